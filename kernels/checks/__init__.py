"""Checks for the course's graded cells: ``check("<lesson>.<exercise>", obj, ..., hidden=False)``.

See ``kernels/checks/README.md``. The spec a lesson fills in is in :mod:`kernels.checks.spec`.
"""

from .spec import Case, CheckFailed, Exercise, Performance, register

__all__ = ["check", "describe_error", "guard_launches", "history", "reach", "reach_unchanged", "value_problem", "Case",
           "CheckFailed", "Exercise", "Performance", "register"]

#: The last outcome of each check run in this process: ``(exercise_id, hidden) -> (objects, failure or "",
#: reach)``, ``reach`` being what the objects could call then (:func:`reach`). ``grader.score`` reuses it when the
#: same objects are scored again and nothing they can reach was redefined since.
history: dict[tuple[str, bool], tuple[tuple, str, dict]] = {}


#: What a name read by an answer's code held when nothing was bound to it (a helper defined later changes the reach).
_UNBOUND = object()


def _names(code) -> set[str]:
    """The global names a function's code (its nested functions' and comprehensions' too) reads."""
    out = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            out |= _names(const)
    return out


def _own(value, space: dict) -> bool:
    """Whether ``value`` is a function, kernel or class defined in the namespace ``space`` (the notebook's), not
    torch's, triton's or the course package's."""
    return getattr(getattr(value, "fn", value), "__globals__", None) is space or (
        isinstance(value, type) and value.__module__ == space.get("__name__"))


def reach(objects) -> dict:
    """What ``objects`` read from the namespaces they were defined in (a notebook's globals), transitively through
    the functions, classes and kernels defined there: ``(id(namespace), name) -> object`` for every global name
    their code reads (a placeholder where none is bound yet). An autograd Function that launches ``dq_kernel``
    through its globals is the same object after ``dq_kernel``'s cell is run again with other code, but what it
    reaches is not; a function defined later that none of them names changes nothing."""
    out: dict = {}
    seen: set[int] = set()
    todo = list(objects)
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        fns = [obj, getattr(obj, "fn", None)]  # a @triton.jit kernel holds its Python function as .fn
        if isinstance(obj, type):
            fns += [getattr(v, "__func__", v) for v in vars(obj).values()]  # static and class methods too
        for fn in fns:
            code, space = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
            if code is None or not isinstance(space, dict):
                continue
            for name in _names(code):
                value = space.get(name, _UNBOUND)
                out[id(space), name] = value
                if _own(value, space):
                    todo.append(value)
    return out


def reach_unchanged(before: dict, objects) -> bool:
    """Whether ``objects`` still read what they read when ``before`` (a :func:`reach`) was taken: the same names,
    each holding the same object."""
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
