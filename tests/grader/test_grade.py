"""Grading a notebook end to end in the sandbox: scores per problem, independent of order and seed."""

from conftest import with_cells


def _scores(result):
    return {c.grade_id: c.score for c in result.cells}


def test_faults_are_per_problem_and_regrading_is_stable(grader_run, fixture_source, fixture_release):
    broken = with_cells(fixture_source, **{"ex3-fn": "import os\nos._exit(1)\ndef cumsum(x):\n    return x"})
    first = [grader_run.grade("s1", "90_grader_fixture", nb, fixture_source, fixture_release, slot=0)
             for nb in (fixture_source, broken)]
    second = [grader_run.grade("s1", "90_grader_fixture", nb, fixture_source, fixture_release, slot=1)
              for nb in (broken, fixture_source)][::-1]
    assert [r.score for r in first] == [13.0, 11.0]
    assert [_scores(r) for r in first] == [_scores(r) for r in second]
    assert first[1].cells[4].score == 0 and "code cell" in first[1].cells[5].message


def test_release_scores_zero_and_the_checker_cannot_be_patched(grader_run, fixture_source, fixture_release):
    attack = with_cells(fixture_release, **{"ex4-block": (
        "import kernels.checks as kc, kernels.checks.engine as ke\n"
        "kc.check = ke.check = lambda *a, **k: None\nke.verdict = lambda *a, **k: []\nBLOCK = dict(BLOCK=1024)")})
    r = grader_run.grade("s2", "90_grader_fixture", attack, fixture_source, fixture_release)
    assert r.score == 0 and r.max_score == 13
