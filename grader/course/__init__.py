"""The course build: ``solutions/NN_topic.py`` → nbgrader source → ``nbgrader generate_assignment`` → ``course/``.

``solutions/`` holds the single source of every lesson, in jupytext's percent format with nbgrader's cell metadata
in each cell header. :func:`build` turns them into the student notebooks in ``course/``; ``build(check=True)``
rebuilds them in a temporary folder and raises :class:`OutOfSync` if ``course/`` differs. The command line is
``python -m grader.course [--check] [LESSON ...]`` (``make course``), the one command that builds the course.
"""

from .build import (
    COURSE,
    GRADER,
    ROOT,
    SOLUTIONS,
    CourseError,
    OutOfSync,
    build,
    graded_cells,
    lesson_ids,
    solution_notebook,
    source_text,
    student_notebook,
)

__all__ = [
    "COURSE",
    "GRADER",
    "ROOT",
    "SOLUTIONS",
    "CourseError",
    "OutOfSync",
    "build",
    "graded_cells",
    "lesson_ids",
    "solution_notebook",
    "source_text",
    "student_notebook",
]
