"""Lesson 05's Rust exercise in the grader: cargo builds and tests the student's launch_grid inside the compile
sandbox (the toolchain and the crate bound read-only), the verdict comes back; without cargo on the grading
machine the cell is "not graded", with the reason."""

import json

import pytest

from grader.notebook import with_cells
from kernels.export.rust_exercise import cargo

LESSON = "05_ptx_export_rust"
CELLS = ("ex3-rust", "ex3-rust-grade")


@pytest.fixture(scope="module")
def rust_lesson():
    """The lesson's instructor notebook and release cut down to the Rust answer and its graded cell."""
    from grader.demo import course_lessons

    src, rel = course_lessons([LESSON])[LESSON]

    def cut(nb):
        out = json.loads(json.dumps(nb))
        out["cells"] = [c for c in out["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") in CELLS]
        return out

    return cut(src), cut(rel)


def _answer(nb) -> str:
    cell = next(c for c in nb["cells"] if c["metadata"]["nbgrader"]["grade_id"] == "ex3-rust")
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _grade(grader_run, student, submission, source, release):
    result = grader_run.grade(student, LESSON, submission, source, release)
    (cell,) = result.cells
    return cell


@pytest.mark.slow
@pytest.mark.skipif(cargo() is None, reason="cargo is not installed")
def test_the_solution_passes_and_the_stub_and_an_off_by_one_fail_in_the_sandbox(grader_run, rust_lesson):
    src, rel = rust_lesson
    cell = _grade(grader_run, "solution", src, src, rel)
    assert cell.score == cell.points == 3, cell.message
    cell = _grade(grader_run, "release", rel, src, rel)
    assert cell.score == 0, cell.message
    assert "`# YOUR CODE HERE` and `raise NotImplementedError()` must go" in cell.message, cell.message
    wrong = with_cells(src, **{"ex3-rust": _answer(src).replace("v > limits[axis]", "v >= limits[axis]")})
    cell = _grade(grader_run, "off_by_one", wrong, src, rel)
    assert cell.score == 0 and "off by one" in cell.message, cell.message


def test_without_cargo_on_the_grading_machine_the_cell_is_not_graded(grader_run, rust_lesson, monkeypatch):
    from grader import grade
    from kernels.export.rust_exercise import GET_CARGO

    src, rel = rust_lesson
    monkeypatch.setattr(grade.engine, "toolchain_missing", lambda ex: GET_CARGO if ex.toolchain else None)
    cell = _grade(grader_run, "solution", src, src, rel)
    assert cell.score == 0 and "needs cargo" in cell.message and "rustup" in cell.message, cell.message
    assert cell.checks[0].status == "not graded"


def test_the_demo_class_expects_no_points_for_a_missing_toolchain(monkeypatch):
    """The demo class's full marks for lesson 05 leave out the Rust cell where the grading machine has no cargo."""
    from grader import policy
    from grader.demo import course_lessons
    from kernels.checks import engine
    from kernels.export.rust_exercise import GET_CARGO

    src, _ = course_lessons([LESSON])[LESSON]
    monkeypatch.setattr(engine, "toolchain_missing", lambda ex: None)
    assert policy.toolchain_points(src) == 0
    monkeypatch.setattr(engine, "toolchain_missing", lambda ex: GET_CARGO if ex.toolchain else None)
    assert policy.toolchain_points(src) == 3
