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
