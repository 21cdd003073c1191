"""course/ is exactly what solutions/ builds, and the student copies give nothing away."""

import pytest

from grader.course import COURSE, OutOfSync, build, graded_cells, lesson_ids, solution_notebook, student_notebook


def test_course_is_in_sync_with_solutions():
    build(check=True)


def test_every_lesson_has_a_source_and_a_student_copy():
    missing = [f"course/{n}.ipynb" for n in lesson_ids() if not (COURSE / f"{n}.ipynb").exists()]
    assert not missing, f"missing: {', '.join(missing)}"


@pytest.mark.parametrize("name", lesson_ids())
def test_student_copy_has_no_solutions_hidden_tests_or_outputs(name):
    sol, stu = solution_notebook(name), student_notebook(name)
    assert graded_cells(stu) == graded_cells(sol)
    for cell in stu.cells:
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "hidden=True"):
            assert marker not in cell.source, f"{name}: cell {cell.id!r} still holds {marker!r}"
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name}: cell {cell.id!r} has outputs"
    answers = {c.id: c.source for c in sol.cells if c.metadata["nbgrader"]["solution"]}
    for cell in stu.cells:
        if cell.id in answers:
            body = answers[cell.id].split("### BEGIN SOLUTION", 1)[1].split("### END SOLUTION", 1)[0]
            solved = [ln.strip() for ln in body.splitlines() if len(ln.strip()) > 12]
            leaked = [ln for ln in solved if ln in cell.source]
            assert not leaked, f"{name}: cell {cell.id!r} gives away {leaked[:3]}"


def test_course_readme_lists_every_notebook_with_its_points():
    readme = (COURSE / "README.md").read_text()
    for name in lesson_ids():
        nb = solution_notebook(name)
        points = sum(c.metadata["nbgrader"].get("points", 0) for c in nb.cells if c.metadata["nbgrader"]["grade"])
        row = next((ln for ln in readme.splitlines() if f"`{name}.ipynb`" in ln), None)
        assert row is not None, f"course/README.md does not list {name}.ipynb"
        assert row.rstrip(" |").endswith(f"{points:g} points"), f"course/README.md: {name} is worth {points:g} points"


def test_the_sync_check_catches_a_hand_edited_student_copy(tmp_path):
    name = lesson_ids()[0]
    edited = (COURSE / f"{name}.ipynb").read_text().replace("YOUR CODE HERE", "YOUR CODE HERE (edited)", 1)
    (tmp_path / f"{name}.ipynb").write_text(edited)
    with pytest.raises(OutOfSync, match=name):
        build([name], check=True, course=tmp_path)


@pytest.mark.parametrize("name", lesson_ids())
def test_a_value_answer_is_defined_before_it_is_answered(name):
    """A check of a value the learner sets (``check("…", TILES, …)``) runs in the cell after the answer's, whose
    stub raises NotImplementedError first: the stub cell defines the name as None before that, so the check names
    what is missing instead of the notebook stopping at a NameError."""
    import re

    stu = student_notebook(name)
    checked, defined = set(), set()
    for c in stu.cells:
        if c.cell_type != "code":
            continue
        checked |= set(re.findall(r'check\("[^"]+", ([A-Z][A-Z_]*)[,)]', c.source))
        before_stub = c.source.split("raise NotImplementedError()", 1)[0]  # what runs before a stub raises
        defined |= set(re.findall(r"^([A-Z][A-Z_]*) = ", before_stub, re.M))
    assert checked <= defined, f"{name}: {sorted(checked - defined)} checked but undefined where the stub raises"
