"""Speed requirements without a GPU (grader/policy.py) and the flag on a handed-in instructor notebook."""

import json

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
