"""Checks for the course's graded cells: ``check("<lesson>.<exercise>", obj, ..., hidden=False)``.

See ``kernels/checks/README.md``. The spec a lesson fills in is in :mod:`kernels.checks.spec`.
"""

from .spec import Case, CheckFailed, Exercise, Performance, register

__all__ = ["check", "Case", "CheckFailed", "Exercise", "Performance", "register"]


def check(exercise_id: str, *objects, hidden: bool = False) -> None:
    """Grade ``objects`` (the student's kernel, function or value) on exercise ``exercise_id``: prints a line when
    they pass, raises :class:`CheckFailed` saying what is wrong when they do not."""
    from .engine import check as run_check

    run_check(exercise_id, *objects, hidden=hidden)
