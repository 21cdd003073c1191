"""Helpers for the lesson-check tests: the solution cells of a lesson, kernels and functions rebuilt from them.

The tests grade a lesson's own solution (read from ``solutions/``, the single source) and broken twins of it made
by editing one line, through the same engine steps a notebook check runs.
"""

import pathlib
import types

import pytest

from kernels.checks import engine, provenance
from kernels.checks.spec import CheckFailed, get
from kernels.device import INTERPRET

ROOT = pathlib.Path(__file__).resolve().parents[3]


def solution_cells(lesson: str) -> dict[str, str]:
    """grade_id -> source of every code cell of ``solutions/<lesson>.py``."""
    from grader.course import solution_notebook

    nb = solution_notebook(lesson, validate=False)
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells if c.cell_type == "code"}


def edit(source: str, old: str, new: str) -> str:
    """``source`` with ``old`` replaced once; fails loudly if ``old`` is not there (the twin must differ)."""
    assert source.count(old) >= 1, f"{old!r} not found in the solution"
    return source.replace(old, new, 1)


def zoo_source(exercise_id: str, name: str) -> str:
    """The source of the zoo's answer ``name`` to ``exercise_id`` (grader/zoo), the one copy of it."""
    from grader.zoo import entries

    lesson = exercise_id.split(".")[0]
    return next(e.source for e in entries(lesson) if (e.exercise, e.name) == (exercise_id, name))


def kernel(source: str, name: str, prelude: str = "import triton\nimport triton.language as tl\n"):
    """The ``@triton.jit`` kernel ``name`` rebuilt from cell source, as the grader rebuilds it."""
    ks = provenance.from_cells([prelude, source], name)
    return provenance.load(ks, interpret=INTERPRET)


def function(source: str, name: str, namespace: dict | None = None):
    """A Python function defined by executing cell source (with ``namespace`` as its globals)."""
    mod = types.ModuleType("__main__")
    mod.__dict__.update(namespace or {})
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
    return mod.__dict__[name]


def grade(exercise_id: str, *objects, hidden: bool = False) -> engine.Outcome:
    """The check's verdict; a ``CheckFailed`` raised by the exercise's own ``run`` is a failed outcome too."""
    try:
        return engine.grade_local(get(exercise_id), tuple(objects), hidden)
    except CheckFailed as e:
        return engine.Outcome(exercise_id, False, [str(e)])


def assert_fails(outcome: engine.Outcome, *words: str) -> None:
    assert not outcome.passed, f"{outcome.exercise} passed a broken answer"
    for w in words:
        assert w in outcome.message, f"{outcome.message!r} does not mention {w!r}"


def assert_broken(outcomes: dict, name: str, words: str) -> None:
    """A broken answer of a ``BROKEN`` script (conftest.py's ``broken_outcomes``) failed, its message naming
    ``words``."""
    got = outcomes[name]
    assert not got["passed"], f"{name}: the check passed"
    assert words.lower() in got["message"].lower(), f"{name}: unexpected message {got['message']!r}"


def classic_bug_test(expect: dict[str, tuple[str, str, str]]):
    """The test of a lesson module's ``BROKEN`` script: each broken answer of ``expect`` (name -> (exercise, the
    objects its check is given, words)) fails its check, its message mentioning the words, so a failure is the one
    the broken code deserves."""

    @pytest.mark.slow
    @pytest.mark.parametrize("name", expect)
    def test_a_classic_bug_fails_its_check_with_a_fitting_message(broken_outcomes, name):
        assert_broken(broken_outcomes, name, expect[name][2])

    return test_a_classic_bug_fails_its_check_with_a_fitting_message
