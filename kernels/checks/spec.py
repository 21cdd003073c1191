"""What an exercise is: the spec a lesson fills in and the check engine runs.

A lesson registers its exercises in ``kernels/checks/lessons/lNN_<topic>.py`` (``00_setup`` →
``l00_setup.py``), one :class:`Exercise` per exercise id ``"<lesson id>.<name>"``. A notebook test cell then reads
``check("<lesson id>.<name>", obj, ...)``. The engine (``kernels.checks.engine``) owns everything else: fresh
random inputs, NaN padding and NaN-poisoned outputs, the float64 comparison, messages, provenance, timing.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["KINDS", "Case", "Performance", "Exercise", "CheckFailed", "NotGradedHere", "register", "get",
           "all_exercises", "lesson_exercises", "settings_problem", "wrong_call"]

#: What a student passes to ``check``, argument by argument:
#: ``kernel`` a ``@triton.jit`` function defined at the top level of the notebook;
#: ``function`` a Python/torch function defined in the notebook;
#: ``value`` a plain value (numbers, strings, lists, dicts), such as chosen tile sizes.
KINDS = ("kernel", "function", "value")


class CheckFailed(AssertionError):
    """A check did not pass; the message says what to fix. In a notebook it shows as the message alone: the
    frames of the check's own code above it are nothing a learner can act on."""

    def _render_traceback_(self) -> list[str]:  # IPython's hook for how an exception is shown
        return [f"{type(self).__name__}: {self}"]


class NotGradedHere(Exception):
    """A check that cannot run on this machine, because the toolchain it builds the answer with is missing
    (:attr:`Exercise.toolchain`); the message starts with "needs <tool>" and says how to get it."""


@dataclass(frozen=True)
class Case:
    """One problem instance: sizes, dtype and options, e.g. ``Case("T=37 fp16", dict(T=37, K=16), torch.float16)``.

    ``precision`` names the arithmetic the tolerance assumes: ``"ieee"``, ``"tf32"``, ``"fp16"``, ``"bf16"`` or
    ``None`` (from ``dtype``). ``gpu_only`` cases are skipped under the interpreter (e.g. bf16 ``tl.dot``).
    ``purpose``: what the case is there to catch, ending the message when it fails ("passes A as a column-major
    view: address it through stride_am and stride_ak").
    """

    label: str
    params: Mapping[str, Any] = field(default_factory=dict)
    dtype: torch.dtype = torch.float32
    precision: str | None = None
    gpu_only: bool = False
    purpose: str = ""

    def __getitem__(self, key: str) -> Any:
        return self.params[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)


@dataclass(frozen=True)
class Performance:
    """A speed requirement, graded on a GPU only (under the interpreter it is reported as not graded).

    ``baseline(args, inputs, outputs, case)`` runs the version to beat (the naive kernel, or a torch op) the same
    way ``Exercise.run`` runs the student's, without using ``args`` (the grader runs it once ahead of the class,
    with none, to warm the caches: :func:`kernels.checks.engine.warm_performance`). The student's median time must
    satisfy ``baseline_ms / student_ms >= min_speedup`` (``min_speedup=0.4``: at least 40% of the baseline's speed), and
    may not beat the hardware floor ``max(bytes / bandwidth, flops / rate)`` (``floor(case) -> (bytes, flops)``)
    by more than ``slack``: that means skipped work or a timing bug. ``case`` is the timed size (a GPU size).
    ``target(inputs, case, floor_ms) -> (ms, what)``, if given, is a time the student's median must also beat,
    measured or derived on the timed inputs (another library's kernel, a multiple of the floor).
    ``compiled(ptx) -> str | None``, if given, reads the PTX of the timed launch compiled for sm_90 (a list of
    texts; ``Exercise.run`` given ``case`` and the first active case's tensors) where nothing can be timed, under
    the interpreter: a note on what the GPU's timing will find (loads the compiler could not widen, say), printed
    beside the check's line; None where it sees nothing to say.
    """

    case: Case
    baseline: Callable[..., Any]
    min_speedup: float
    floor: Callable[[Case], tuple[int, int]]
    baseline_name: str = "the naive version"
    slack: float = 1.25
    target: Callable[[dict, Case, float], tuple[float, str]] | None = None
    warmup: int = 10
    rep: int = 50
    compiled: Callable[[list[str]], str | None] | None = None


@dataclass(frozen=True)
class Exercise:
    """One graded exercise; see ``kernels/checks/README.md`` for a worked example.

    - ``id``: ``"<lesson id>.<name>"``; ``args``: the kind of each object the check cell passes (see :data:`KINDS`).
    - ``signature``: the documented call, shown in messages (``"add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE)"``).
    - ``make_inputs(case, gen) -> dict``: inputs on the CPU drawn from ``gen`` (a seeded ``torch.Generator``); the
      engine moves tensors to the kernel device inside NaN padding. Numbers pass through.
    - ``outputs(case, inputs) -> {name: (shape, dtype)}``: what a kernel writes; the engine allocates each one full
      of NaN with NaN guard bands. ``(shape, dtype, order)`` lays an output out in memory dimension by dimension,
      outermost first: ``(1, 0)`` is a column-major matrix (a kernel must then honour its strides). Function
      exercises return their outputs instead (``{}`` here).
    - ``run(args, inputs, outputs, case)``: grader-owned; computes the grid and launches the student's kernel (or
      calls the function) with the documented signature. ``args`` holds the student's objects, in order. Returns
      ``None`` (a kernel wrote ``outputs``) or ``{name: tensor or number}`` (a function's results).
    - ``reference(inputs, case) -> {name: tensor or number}``: float64 oracle; ``inputs`` arrive as float64.
    - ``tolerance(case) -> float``: relative-error bound; default from ``case.precision`` or ``case.dtype``
      (``kernels.testing.TOLERANCE``). ``0`` means exact.
    - ``rule(args, hidden) -> str | None``: for ``value`` arguments, the reason a value is unacceptable, or ``None``.
    - ``visible`` / ``hidden``: the cases of ``check(...)`` and ``check(..., hidden=True)``; give sizes that are not
      multiples of the block, and several dtypes. Seeds are drawn fresh on every run.
    - ``performance``: optional :class:`Performance`; ``points``: (visible, hidden) points, matching the cells.
    - ``stub``: what the student writes, where it is not the function the check is passed (a class that
      function calls): a stub's bare ``NotImplementedError`` is reported as this not being written yet.
    - ``timed_hidden``: the hidden check's rule times something on the GPU (a value exercise has no kernel to time
      through ``performance``): without a GPU that check is graded like a speed requirement, as needing one.
    - ``forbid``: dotted prefixes a ``function`` answer may not call (``"kernels."`` is always forbidden).
    - ``twins``: package kernels (``"kernels.<module>.<name>"``) an answer may equal, for exercises whose natural
      answer is a short kernel with one natural form (vector add): writing it the obvious way is not copying.
    - ``magnitude``: the reference is built from sums of products of the inputs (matmuls, attention without
      softmax, prefix sums). Rounding error then scales with the same computation on the inputs' absolute values,
      not with the result: with fresh seeds an output can nearly cancel (``q·k`` = -0.002 from terms summing to
      1.6 in fp32), and a correct kernel would miss a relative tolerance. The relative error is then taken against
      the larger of the two norms.
    - ``toolchain``: a ``value`` exercise whose rule builds the value with an outside toolchain (``"cargo"``: lesson
      05's Rust). The rule raises :class:`NotGradedHere` where the toolchain is missing (the check is then reported
      as "needs cargo", never passed or failed), and the grader runs it in its sandbox, since it runs the student's
      compiled code.
    - ``traffic(findings, case) -> str | None``: a rule on the memory traffic of a kernel exercise, checked where
      the case runs bounds-checked in the interpreter (:mod:`kernels.checks.bounds`): ``findings.loaded(name)`` and
      ``findings.stored(name)`` count the elements of each tensor the launches loaded and stored. Returns the
      reason the traffic is not the exercise's (the naive kernel's state must round-trip through memory).
    - ``diagnose(inputs, got, case, ref) -> str | None``: names the mistake a wrong answer matches. Called only when
      every output was produced, written and finite but some miss the tolerance: ``inputs`` as drawn (CPU),
      ``got`` and ``ref`` name -> tensor (the answer's outputs, the float64 reference). The returned reason leads
      the case's problems, above the numbers.
    - ``diagnose_unwritten``: call ``diagnose`` also when outputs hold the NaN poison (elements never written),
      ``got`` holding NaN there: an exercise whose loop over chunks can miss one names which (lesson 07).
    """

    id: str
    args: tuple[str, ...]
    signature: str
    run: Callable[..., Any]
    visible: Sequence[Case] = ()
    hidden: Sequence[Case] = ()
    make_inputs: Callable[[Case, torch.Generator], dict] | None = None
    outputs: Callable[[Case, dict], dict] | None = None
    reference: Callable[[dict, Case], dict] | None = None
    tolerance: Callable[[Case], float] | None = None
    rule: Callable[[tuple, bool], str | None] | None = None
    performance: Performance | None = None
    points: tuple[int, int] = (1, 1)
    forbid: tuple[str, ...] = ()
    twins: tuple[str, ...] = ()
    magnitude: bool = False
    traffic: Callable[[Any, Case], str | None] | None = None
    diagnose: Callable[[dict, dict, Case, dict], str | None] | None = None
    diagnose_unwritten: bool = False
    description: str = ""
    toolchain: str = ""
    timed_hidden: bool = False
    stub: str = ""

    def __post_init__(self):
        if not _ID.match(self.id):
            raise ValueError(f"exercise id {self.id!r} must look like '<NN_lesson>.<name>'")
        bad = [a for a in self.args if a not in KINDS]
        if not self.args or bad:
            raise ValueError(f"{self.id}: args must be a non-empty tuple of {KINDS}, got {self.args!r}")
        graded = any(a != "value" for a in self.args)
        if graded and (self.make_inputs is None or self.reference is None or not (self.visible or self.hidden)):
            raise ValueError(f"{self.id}: kernel and function exercises need make_inputs, reference and cases")
        if "kernel" in self.args and self.outputs is None:
            raise ValueError(f"{self.id}: a kernel exercise needs outputs(case, inputs)")
        if not graded and self.rule is None:
            raise ValueError(f"{self.id}: a value-only exercise needs a rule")

    @property
    def lesson(self) -> str:
        return self.id.split(".", 1)[0]

    def cases(self, hidden: bool) -> list[Case]:
        return list(self.hidden if hidden else self.visible)

    def needs_gpu(self, hidden: bool) -> bool:
        """Whether the check (``hidden`` or visible) has a part only a GPU can grade: a speed requirement, or a
        hidden rule that times on the GPU (``timed_hidden``)."""
        return self.performance is not None or (hidden and self.timed_hidden)


def wrong_call(fn: str, params: tuple[str, ...], calls: Sequence[tuple], got: Sequence[float],
               want: Sequence[float], mistakes: Sequence[tuple[Callable[..., float], str]] = ()) -> str | None:
    """For a function exercise graded on many calls: the first call whose answer is wrong, written out
    (``fn(M=.., N=..) returned X, expected Y``), and the first of ``mistakes`` (``(formula, why)``, each formula
    taking a call's arguments) that gives every wrong answer, named. None when all are right."""
    wrong = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    if not wrong:
        return None
    args = ", ".join(f"{p}={v}" for p, v in zip(params, calls[wrong[0]]))
    head = f"{fn}({args}) returned {got[wrong[0]]:g}, expected {want[wrong[0]]:g}"
    for formula, why in mistakes:
        if all(got[i] == formula(*calls[i]) for i in wrong):
            return f"{head}: {why}"
    return head + f" ({len(wrong)} of {len(calls)} calls are wrong)"


def settings_problem(name: str, value: Any, keys: tuple[str, ...]) -> str | None:
    """Why ``value``, the notebook's launch settings ``name``, is not a dict of exactly ``keys`` holding positive
    integers (None when it is): the first test of a ``value`` exercise's rule."""
    if value is None:
        return f"{name} is still None: set it in its cell (a dict with keys {', '.join(keys)})"
    if not isinstance(value, dict):
        return f"{name} must be a dict with keys {', '.join(keys)}; got a {type(value).__name__}"
    missing = [k for k in keys if k not in value]
    extra = [k for k in value if k not in keys]
    if missing or extra:
        return f"{name} needs exactly the keys {', '.join(keys)} (missing {missing}, unknown {extra})"
    for k in keys:
        if isinstance(value[k], bool) or not isinstance(value[k], int) or value[k] < 1:
            return f"{k}={value[k]!r} must be a positive integer"
    return None


_ID = re.compile(r"^\d\d_[a-z0-9_]+\.[A-Za-z0-9_]+$")
_REGISTRY: dict[str, Exercise] = {}


def register(*exercises: Exercise) -> None:
    """Add exercises to the registry (a lesson module calls this at import)."""
    for ex in exercises:
        old = _REGISTRY.get(ex.id)
        if old is not None and old is not ex and old.signature != ex.signature:
            raise ValueError(f"exercise {ex.id!r} is registered twice with different signatures")
        _REGISTRY[ex.id] = ex


def _module_for(lesson: str) -> str:
    return f"kernels.checks.lessons.l{lesson}"


def get(exercise_id: str) -> Exercise:
    """The registered exercise, importing its lesson module on first use."""
    if exercise_id not in _REGISTRY:
        _import_lesson(exercise_id.split(".", 1)[0])
    try:
        return _REGISTRY[exercise_id]
    except KeyError:
        known = ", ".join(sorted(k for k in _REGISTRY if k.startswith(exercise_id.split(".", 1)[0]))) or "none"
        raise KeyError(f"no exercise {exercise_id!r} (this lesson's: {known})") from None


def _import_lesson(lesson: str) -> bool:
    """Import the lesson's module: ``kernels.checks.lessons.lNN_topic``, else a top-level ``lNN_topic`` (fixtures)."""
    for name in (_module_for(lesson), f"l{lesson}"):
        try:
            importlib.import_module(name)
            return True
        except ModuleNotFoundError as e:
            if e.name not in (name, "kernels.checks.lessons." + name):
                raise
    return False


def all_exercises() -> list[Exercise]:
    """Every exercise of the course's lessons (the catalog's), each lesson imported."""
    from ..catalog import lesson_ids

    return [ex for lesson in lesson_ids() for ex in lesson_exercises(lesson).values()]


def lesson_exercises(lesson: str) -> dict[str, Exercise]:
    """Every exercise a lesson registers."""
    _import_lesson(lesson)
    return {k: v for k, v in _REGISTRY.items() if k.startswith(lesson + ".")}
