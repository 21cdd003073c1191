"""How a lesson's run is judged: the kernel runs whatever the run is named, a check that cannot grade here is
neither a pass nor a failure."""

import nbformat
import pytest

from grader.course import lesson_ids
from grader.course.run import Executed, execute, problems


@pytest.mark.slow
def test_every_lesson_run_together_starts_its_kernel():
    # the kernel's sockets are named inside the run's temporary folder: every lesson's name joined passes the
    # 107 bytes a Unix socket's path may have (ZMQError: File name too long, all lessons' student copies at once)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(6 * 7)", id="answer")]
    run = execute(nb, lesson="+".join(lesson_ids()), copy="student")
    assert not run.errors, run.errors
    assert run.nb.cells[0].outputs[0]["text"].strip() == "42"


def _student_run(text: str, *, error: bool = False) -> Executed:
    cell = nbformat.v4.new_code_cell('check("05_ptx_export_rust.launch_grid")', id="ex3-rust-grade")
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "ex3-rust-grade", "points": 2, "solution": False,
                                 "locked": True, "schema_version": 3}
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import kernels", id="setup"), cell]
    errors = {"ex3-rust-grade": "CheckFailed: ..."} if error else {}
    return Executed("05_ptx_export_rust", "student", nb, 1.0, errors)


def test_a_check_not_graded_here_is_not_a_pass_of_the_student_copy():
    skipped = _student_run("05_ptx_export_rust.launch_grid: not graded here: needs cargo: cargo is not installed")
    assert problems(skipped) == []
    passed = _student_run("✓ 05_ptx_export_rust.launch_grid: 4 case(s) passed")
    assert problems(passed) == ["05_ptx_export_rust (student copy): graded cell 'ex3-rust-grade' passed without "
                                "the learner's work"]
    assert problems(_student_run("", error=True)) == []
