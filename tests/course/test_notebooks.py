"""Every lesson runs top to bottom; its graded cells pass on the solution and fail on the untouched student copy.

Each notebook runs once per copy (cached for the session) in a fresh kernel: in the interpreter here, on the
GPU where there is one. The student copy runs up to its last graded or widget cell, the last one judged.
"""

import pytest

from grader.course import lesson_ids
from grader.course.run import execute, judged_only, lesson_notebook, problems, run_lesson, run_widgets_alone

_runs: dict = {}


def executed(name, copy):
    if (name, copy) not in _runs:
        _runs[name, copy] = run_lesson(name, copy) if copy == "solution" else \
            execute(judged_only(lesson_notebook(name, copy)), lesson=name, copy=copy)
    return _runs[name, copy]


@pytest.mark.slow
@pytest.mark.parametrize("name", lesson_ids())
def test_solution_runs_top_to_bottom_and_passes_every_graded_cell(name):
    run = executed(name, "solution")
    assert not problems(run), "\n".join(problems(run))
    print(f"{name}: solution notebook ran in {run.seconds:.1f} s")


@pytest.mark.slow
@pytest.mark.parametrize("name", lesson_ids())
def test_untouched_student_copy_fails_every_graded_cell(name):
    run = executed(name, "student")
    assert not problems(run), "\n".join(problems(run))


@pytest.mark.slow
@pytest.mark.parametrize("name", lesson_ids())
def test_widget_cells_run_on_their_own_after_the_setup_cell(name):
    run = run_widgets_alone(name)
    assert not problems(run), "\n".join(problems(run))
