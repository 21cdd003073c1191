"""The red-team class (grader/redteam.py): each crafted attack on lessons 00 and 02 gets the score the grader
must give, the controls keep theirs, and the all-lessons cheat scores 0. Kept apart from the demo class and
cheap: attacks start from the release, so only the attacked problem runs."""

import json
import time


def test_redteam_class(tmp_path):
    from grader.redteam import run

    t0 = time.time()
    summary = run(report=tmp_path / "redteam.json", slots=2)
    assert not summary["mismatches"], summary["table"] + "\n" + json.dumps(summary["mismatches"], indent=1)
    assert summary["scores"]["universal/00_setup"] == 0 and summary["scores"]["universal/02_naive_hbm_loops"] == 0
    assert time.time() - t0 < 600


def test_a_higher_score_accepted_needs_the_work_timed():
    """On a GPU ``skip_if_filled`` may keep its speed points (its extra load is cheap on some cards), but only
    with a timing that shows the work done: one under a quarter of the baseline's time, or none, is forgery."""
    from grader.redteam import _forged
    from grader.results import CellResult, CheckResult, NotebookResult

    def result(perf):
        check = CheckResult("02_naive_hbm_loops.fused_speed", False, True, "passed", perf=perf)
        return NotebookResult("skip_if_filled", "02_naive_hbm_loops",
                              [CellResult("check_fused_speed", 2.0, 2.0, [check])])

    assert _forged(result({"student_ms": 1.76, "baseline_ms": 3.67}), "check_fused_speed") == ""
    assert "skipped the work" in _forged(result({"student_ms": 0.02, "baseline_ms": 3.67}), "check_fused_speed")
    assert "without a timing" in _forged(result(None), "check_fused_speed")
