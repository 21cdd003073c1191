"""Grading a notebook end to end in the sandbox: scores per problem, independent of order and seed."""

from grader.notebook import with_cells


def _released(source, grade_id):
    """The release's version of one solution cell."""
    from grader.percent import release

    cell = next(c for c in release(source)["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _scores(result):
    return {c.grade_id: c.score for c in result.cells}


def test_faults_are_per_problem_and_regrading_is_stable(grader_run, fixture_source, fixture_release):
    # row_sum left as released (4 points short): each notebook is graded twice, and its two kernel problems
    # would only add time
    done = with_cells(fixture_source, **{"ex2-kernel": _released(fixture_source, "ex2-kernel")})
    broken = with_cells(done, **{"ex3-fn": "import os\nos._exit(1)\ndef cumsum(x):\n    return x"})
    first = [grader_run.grade("s1", "90_grader_fixture", nb, fixture_source, fixture_release, slot=0)
             for nb in (done, broken)]
    second = [grader_run.grade("s1", "90_grader_fixture", nb, fixture_source, fixture_release, slot=1)
              for nb in (broken, done)][::-1]
    assert [r.score for r in first] == [9.0, 7.0]
    assert [_scores(r) for r in first] == [_scores(r) for r in second]
    assert first[1].cells[4].score == 0 and "code cell" in first[1].cells[5].message


def test_release_scores_zero_and_the_checker_cannot_be_patched(grader_run, fixture_source, fixture_release):
    attack = with_cells(fixture_release, **{"ex4-block": (
        "import kernels.checks as kc, kernels.checks.engine as ke\n"
        "kc.check = ke.check = lambda *a, **k: None\nke.verdict = lambda *a, **k: []\nBLOCK = dict(BLOCK=1024)")})
    r = grader_run.grade("s2", "90_grader_fixture", attack, fixture_source, fixture_release)
    assert r.score == 0 and r.max_score == 13


def test_submission_budget_is_per_notebook(fixture_source, fixture_release):
    from grader.democlass import FIXTURE as FIXTURES
    from grader.grade import Grader, Settings

    slow = with_cells(fixture_source, **{"ex3-fn": "def cumsum(x):\n    while True:\n        pass"})
    g = Grader(Settings(problem_timeout=60, submission_budget=8, lesson_paths=[str(FIXTURES)]))
    r = g.grade("s3", "90_grader_fixture", slow, fixture_source, fixture_release)
    msgs = " ".join(c.message for c in r.cells)
    assert r.cells[4].score == 0 and "time budget" in msgs
    assert r.score < 13


def test_waiting_for_the_gpu_is_not_charged_to_the_submission():
    """With several slots a submission can wait minutes for the GPU while others are timed; its budget counts
    only the time it ran (an H100 run's correct lesson 04 ran out of budget on its speed check)."""
    import time

    from grader.grade import Settings, _Session

    s = object.__new__(_Session)
    s.s, s.started, s.phases = Settings(submission_budget=300.0), time.time() - 280.0, {"gpu_wait": 250.0}
    assert 265 < s.left() < 275
    s.phases = {"cells": 250.0}
    assert s.left() < 25


def test_an_unwritten_function_is_named_in_the_graders_message():
    """The sandbox sends a stub's bare NotImplementedError as a type and an empty message: the grader's line names
    the function still to write, as the notebook's check does."""
    from grader.grade import _Session
    from kernels.checks.spec import get

    s = object.__new__(_Session)
    ex = get("07_backward.autograd")
    lines = s._error_lines(ex, "small", {"error": {"type": "NotImplementedError", "message": ""}})
    assert lines == ["07_backward.autograd failed on case 'small': your code raised NotImplementedError: "
                     "`ChunkedLinearAttention` (its forward and backward, which `linear_attention` calls) is not "
                     "implemented yet: replace `raise NotImplementedError()` with your code"]


def test_plain_nbgrader_autograde_uses_the_sandbox(tmp_path, fixture_source):
    """``nbgrader autograde`` run by hand in a course folder grades through ``SandboxExecute``."""
    import json
    import os
    import subprocess
    import sys

    from grader import workflow
    from grader.democlass import FIXTURE as FIXTURES

    root = tmp_path / "course"
    workflow.build_course(root, {"90_grader_fixture": fixture_source})
    incoming = tmp_path / "in" / "bob"
    incoming.mkdir(parents=True)
    # row_sum left as released: a score short of full, and two kernel problems fewer to grade
    handed_in = with_cells(fixture_source, **{"ex2-kernel": _released(fixture_source, "ex2-kernel")})
    (incoming / "90_grader_fixture.ipynb").write_text(json.dumps(handed_in))
    workflow.collect(root, tmp_path / "in")
    env = dict(os.environ, GRADER_LESSON_PATHS=str(FIXTURES), PYTHONPATH=str(FIXTURES.parents[1]))
    nbgrader = [sys.executable, "-c", "import sys; from nbgrader.apps import NbGraderApp; "
                "sys.exit(NbGraderApp.launch_instance())"]
    proc = subprocess.run(nbgrader + ["autograde", "90_grader_fixture", "--force"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from kernels.device import ON_GPU

    # without a GPU the speed cell (3 points) scores 0 under the default speed policy (grader/policy.py)
    assert workflow.gradebook_scores(root)[("bob", "90_grader_fixture")] == (9 if ON_GPU else 6)
    graded = json.loads((root / "autograded" / "bob" / "90_grader_fixture" / "90_grader_fixture.ipynb").read_text())
    assert graded["cells"][0]["metadata"].get("grader_note")


def test_a_cell_that_breaks_the_gpu_context_is_left_out(grader_run, fixture_source, fixture_release):
    # On a GPU, a kernel that faults (an illegal address) leaves its process's CUDA context unusable even when
    # the cell catches the exception; every later problem run in that worker would fail with it. The worker
    # reports the lost context after the cell and the grader runs the notebook again without that cell.
    # the cell re-imports torch, so the function problems need it (the setup cell before it imports torch too)
    lost = with_cells(fixture_source, **{"ex1-try": (
        "import torch\n"
        "raise RuntimeError('CUDA error: an illegal memory access was encountered')")})
    r = grader_run.grade("s4", "90_grader_fixture", lost, fixture_source, fixture_release)
    assert r.score == 13.0, [c.message for c in r.cells]
    assert any("left the GPU unusable" in n and "illegal memory access" in n for n in r.notes), r.notes
