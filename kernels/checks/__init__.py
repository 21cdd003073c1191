"""Checks for the course's graded cells: ``check("<lesson>.<exercise>", obj, ..., hidden=False)``.

See ``kernels/checks/README.md``. The spec a lesson fills in is in :mod:`kernels.checks.spec`.
"""

import re

from .spec import Case, CheckFailed, Exercise, Performance, register

__all__ = ["check", "describe_error", "guard_launches", "history", "reach", "reach_unchanged", "value_problem", "Case",
           "CheckFailed", "Exercise", "Performance", "register"]

#: The last outcome of each check run in this process: ``(exercise_id, hidden) -> (objects, failure or "",
#: reach)``, ``reach`` being what the objects could call then (:func:`reach`). ``grader.score`` reuses it when the
#: same objects are scored again and nothing they can reach was redefined since.
history: dict[tuple[str, bool], tuple[tuple, str, dict]] = {}


#: IPython's history names (``_``, ``__``, ``_5``, ``_i5``, ``_ih``, ...) and module dunders: not the learner's code.
_IPYTHON_HISTORY = re.compile(r"^(_+|_\d+|_i+\d*|_[io]h|_dh|__\w+__)$")


def reach(objects) -> dict:
    """Every function, class and kernel defined in the namespaces that ``objects`` were defined in (a notebook's
    globals), by name: an autograd Function that launches ``dq_kernel`` through its globals is the same object
    after ``dq_kernel``'s cell is run again with other code, but what it reaches is not."""
    spaces = {}
    for obj in objects:
        for fn in [obj, getattr(obj, "fn", None), *(vars(obj).values() if isinstance(obj, type) else ())]:
            fn = getattr(fn, "__func__", fn)  # a static or class method
            g = getattr(fn, "__globals__", None)
            if isinstance(g, dict):
                spaces[id(g)] = g
    return {(i, name): v for i, g in spaces.items() for name, v in list(g.items())
            if not _IPYTHON_HISTORY.match(name) and (callable(v) or hasattr(v, "fn"))}


def reach_unchanged(before: dict, objects) -> bool:
    """Whether every name in ``before`` (a :func:`reach`) still holds the same object, and no new one appeared."""
    now = reach(objects)
    return now.keys() == before.keys() and all(now[k] is v for k, v in before.items())


def check(exercise_id: str, *objects, hidden: bool = False) -> None:
    """Grade ``objects`` (the student's kernel, function or value) on exercise ``exercise_id``: prints a line when
    they pass, raises :class:`CheckFailed` saying what is wrong when they do not."""
    from .engine import check as run_check

    seen = reach(objects)
    try:
        run_check(exercise_id, *objects, hidden=hidden)
    except Exception as e:
        history[exercise_id, hidden] = (objects, str(e) or type(e).__name__, seen)
        raise
    history[exercise_id, hidden] = (objects, "", seen)


def value_problem(exercise_id: str, *values) -> str | None:
    """What exercise ``exercise_id``'s rule says of its value answers ``values`` (given in the order of its value
    arguments), before anything is compiled or run: None where it accepts them. A lesson's budget cell asks this
    first, so a setting the check refuses is named as the check names it."""
    from .engine import check_value
    from .spec import get

    ex = get(exercise_id)
    given = iter(values)
    return check_value(ex, tuple(next(given, None) if kind == "value" else None for kind in ex.args), False)


def describe_error(e: BaseException) -> str:
    """An error a try-it cell caught, in one line: the error inside Triton's ``InterpreterError``, its reason, and the
    line of the learner's code it came from. See :func:`kernels.checks.bounds.describe_error`."""
    from .bounds import describe_error as describe

    return describe(e)


def guard_launches(on: bool = True) -> bool:
    """Bounds-check this process's own kernel launches under the interpreter (each lesson's setup cell calls it):
    an access outside a launch's tensors is switched off and raises an error naming it, instead of corrupting
    memory. See :func:`kernels.checks.bounds.guard_launches`."""
    from .bounds import guard_launches as guard

    return guard(on)
