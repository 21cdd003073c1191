"""Checks for the course's graded cells: ``check("<lesson>.<exercise>", obj, ..., hidden=False)``.

See ``kernels/checks/README.md``. The spec a lesson fills in is in :mod:`kernels.checks.spec`.
"""

from .spec import Case, CheckFailed, Exercise, Performance, register

__all__ = ["check", "guard_launches", "history", "Case", "CheckFailed", "Exercise", "Performance", "register"]

#: The last outcome of each check run in this process: ``(exercise_id, hidden) -> (objects, failure or "")``.
#: ``grader.score`` reuses it when the same objects are scored again.
history: dict[tuple[str, bool], tuple[tuple, str]] = {}


def check(exercise_id: str, *objects, hidden: bool = False) -> None:
    """Grade ``objects`` (the student's kernel, function or value) on exercise ``exercise_id``: prints a line when
    they pass, raises :class:`CheckFailed` saying what is wrong when they do not."""
    from .engine import check as run_check

    try:
        run_check(exercise_id, *objects, hidden=hidden)
    except Exception as e:
        history[exercise_id, hidden] = (objects, str(e) or type(e).__name__)
        raise
    history[exercise_id, hidden] = (objects, "")


def guard_launches(on: bool = True) -> bool:
    """Bounds-check this process's own kernel launches under the interpreter (each lesson's setup cell calls it):
    an access outside a launch's tensors is switched off and raises an error naming it, instead of corrupting
    memory. See :func:`kernels.checks.bounds.guard_launches`."""
    from .bounds import guard_launches as guard

    return guard(on)
