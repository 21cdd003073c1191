"""Speed requirements without a GPU (grader/policy.py) and the flag on a handed-in instructor notebook."""

import json
import pathlib

import pytest

from grader.grade import CellResult, CheckResult, NotebookResult


def _result():
    perf = CheckResult("90_grader_fixture.block_choice", False, True, "passed (partly not graded)", ["✓ ok"],
                       not_graded=["performance: not graded under the interpreter (it is graded on a GPU)"])
    plain = CheckResult("90_grader_fixture.cumsum", False, True, "passed", ["✓ ok"])
    failed = CheckResult("90_grader_fixture.block_choice", True, False, "failed", ["wrong"],
                         not_graded=["performance: not graded under the interpreter (it is graded on a GPU)"])
    cells = [CellResult("speed", 3, 3, [perf]), CellResult("plain", 1, 1, [plain]), CellResult("bad", 2, 0, [failed])]
    return NotebookResult("s", "90_grader_fixture", cells, mode="interpreter")


@pytest.mark.parametrize("policy,score,max_shown", [("zero", 1, 6), ("exclude", 1, 3), ("award", 4, 6)])
def test_speed_policy(policy, score, max_shown):
    from grader import policy as pol
    from grader.run import table

    r = _result()
    pol.apply([r], policy)
    assert r.score == score
    assert r.max_score - pol.excluded_points(r) == max_shown
    assert f"speed policy {policy}" in r.notes[-1]
    if policy != "award":
        assert not r.cells[0].passed and r.cells[0].message.startswith(("needs a GPU", "excluded"))
    assert f"{score:g}/{max_shown:g}" in table([r])
    with pytest.raises(ValueError, match="speed policy"):
        pol.apply([r], "free")


@pytest.mark.parametrize("policy", ["zero", "exclude", "award"])
def test_a_lesson_without_speed_requirements_gets_no_speed_note(policy):
    """The speed policy's note is for lessons that time on a GPU: one whose every check is graded here (lesson
    00's) gets none; one with a speed requirement gets it even where that cell failed for another reason."""
    from grader import policy as pol

    plain = NotebookResult("s", "90_grader_fixture", [CellResult("plain", 1, 1, [
        CheckResult("90_grader_fixture.cumsum", False, True, "passed", ["✓ ok"])])], mode="interpreter")
    pol.apply([plain], policy)
    assert plain.notes == [] and plain.score == 1
    failed = _result()
    del failed.cells[:2]
    pol.apply([failed], policy)
    assert failed.notes == [pol.describe(policy)]


def test_speed_points(fixture_source):
    from grader.policy import speed_points

    assert speed_points(fixture_source) == 3


def test_instructor_source_is_flagged(fixture_source, fixture_release):
    import re

    from grader.collect import flag_solutions

    assert flag_solutions(fixture_source, fixture_source).startswith("flagged: this is the instructor's source")
    assert flag_solutions(fixture_release, fixture_source) == ""
    copied = json.loads(json.dumps(fixture_source))
    for c in copied["cells"]:
        src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        c["source"] = re.sub(r"### (BEGIN|END) (SOLUTION|HIDDEN TESTS)", "# mine", src)
    assert "solution code" in flag_solutions(copied, fixture_source)


def test_feedback_hides_hidden_tests():
    from grader.hidetests import LINE, hide

    src = "### BEGIN HIDDEN TESTS\ncheck('00_setup.vector_add', add_kernel, hidden=True)\n### END HIDDEN TESTS"
    assert hide(src) == LINE and hide("check('x', f)") == "check('x', f)"


def test_feedback_score_cells_are_the_same_for_hand_out_and_course_students():
    """nbgrader restores the release's score cells (``score_here``, ``make score``), which a hand-out student
    never had (grader/dist.py): the feedback page says where the scores are instead, for everyone."""
    import nbformat

    from grader.dist import handout_notebook
    from grader.hidetests import FEEDBACK_CELLS, HideTests

    course = json.loads((pathlib.Path(__file__).parents[2] / "course" / "00_setup.ipynb").read_text())
    handout = json.loads(handout_notebook(json.dumps(course), "00_setup.ipynb"))
    shown = []
    for nb in (course, handout):
        nb = nbformat.from_dict(nb)
        cells = [HideTests().preprocess_cell(c, {}, i)[0] for i, c in enumerate(nb.cells)]
        score = {c.metadata.nbgrader.grade_id: c for c in cells if c.metadata.get("nbgrader", {}).get("grade_id")
                 in FEEDBACK_CELLS}
        assert set(score) == set(FEEDBACK_CELLS)
        assert "score_here" not in score["score"].source and "make score" not in score["score_md"].source
        assert score["score"].outputs == []
        shown.append([c.source for c in cells if c.metadata.get("nbgrader", {}).get("grade_id") in FEEDBACK_CELLS])
    assert shown[0] == shown[1]


@pytest.mark.parametrize("policy", ["zero", "exclude", "award"])
def test_nbgrader_records_the_graders_score(policy):
    """The grader decides each cell's score once; the outputs it writes make nbgrader read that same score
    (full points, 0 and anything in between)."""
    import nbformat
    from nbgrader.utils import determine_grade

    from grader import policy as pol
    from grader.nbexec import apply_results

    r = _result()
    pol.apply([r], policy)
    r.cells.append(CellResult("half", 4, 1.5, [CheckResult("90_grader_fixture.cumsum", False, True, "passed",
                                                           ["✓ part"])]))
    nb = nbformat.v4.new_notebook()
    for c in r.cells:
        cell = nbformat.v4.new_code_cell('check("x", f)')
        cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": c.grade_id, "points": c.points}
        nb.cells.append(cell)
    apply_results(nb, r)
    read = {c.metadata["nbgrader"]["grade_id"]: determine_grade(c)[0] for c in nb.cells if c.cell_type == "code"}
    assert read == {c.grade_id: c.score for c in r.cells}, read
    assert read["half"] == 1.5 and read["bad"] == 0


def test_a_hidden_rule_timed_on_the_gpu_needs_a_gpu():
    """Lesson 06's autotuning space: its hidden check re-times the autotuner's winner on a GPU, inside the rule (a
    value has no kernel to time): without a GPU that cell is a speed cell, scored by the policy, never awarded."""
    from grader.demo import course_lessons
    from grader.policy import speed_points
    from kernels.checks import engine
    from kernels.checks.lessons.l06_profile_compile_autotune import LESSON_CONFIG
    from kernels.checks.spec import get
    from kernels.device import ON_GPU

    if ON_GPU:
        pytest.skip("on a GPU the hidden check times the winner")
    lesson = "06_profile_compile_autotune"
    src, _ = course_lessons([lesson])[lesson]
    assert speed_points(src) == 4  # ex3-speed (a speed requirement) and ex4-hidden (the re-timed winner)
    ex = get(f"{lesson}.autotune_space")
    assert ex.needs_gpu(hidden=True) and not ex.needs_gpu(hidden=False)
    space = [dict(LESSON_CONFIG, num_warps=w, num_stages=s) for w in (4, 8) for s in (2, 3)]
    visible, hidden = (engine.grade_local(ex, (space,), h) for h in (False, True))
    assert visible.passed and not visible.not_graded
    assert hidden.passed and hidden.not_graded[0].startswith("performance"), hidden.not_graded
    assert "not graded here" in hidden.lines[0]


def test_progress_line_shows_the_score_after_the_speed_policy(capsys):
    """A submission's progress line shows the score the table will: the speed policy applied first, and the speed
    cell among the failed cells it lists."""
    from grader.collect import Submission
    from grader.run import grade_class

    class Graded:
        def grade(self, student, lesson, notebook, source, release, slot=0):
            return _result()

    sub = Submission("s", "90_grader_fixture", {"cells": []})
    results = grade_class(Graded(), [sub], {"90_grader_fixture": {}}, {}, slots=1, speed_policy="zero")
    err = capsys.readouterr().err
    assert results[0].score == 1
    assert "s/90_grader_fixture 1/6" in err and "4/6" not in err
    assert "speed: needs a GPU" in err
