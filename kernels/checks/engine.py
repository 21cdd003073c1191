"""The check engine: inputs, padding, poisoning, running, comparing, timing and the messages.

The steps are separate functions because the grader runs them in separate processes: the trusted side draws the
seed, makes the inputs, computes the float64 reference and judges (:func:`case_inputs`, :func:`reference`,
:func:`verdict`, :func:`perf_verdict`); the sandboxed side only runs the student's objects on those inputs
(:func:`run_case`, :func:`time_performance`). :func:`check` chains them in one process, for the notebook.
"""

from __future__ import annotations

import ast
import contextlib
import json
import math
import os
import re
import secrets
from dataclasses import dataclass, field

import torch

from ..catalog import exercise_objects
from ..device import DEVICE, INTERPRET, ON_GPU, ensure_triton_allocator
from ..device import sync as _sync
from ..testing import TOLERANCE, Poisoned, generator, poison_value, poisoned, precision_of, repoison
from . import provenance
from .spec import Case, CheckFailed, Exercise, NotGradedHere, Performance, get

__all__ = [
    "GRADING_ENV",
    "Outcome",
    "check",
    "resolve_live",
    "check_value",
    "toolchain_missing",
    "draw_seed",
    "case_inputs",
    "reference",
    "tolerance",
    "pad_inputs",
    "alloc_outputs",
    "run_case",
    "your_code_raised",
    "precheck",
    "PROBLEMS",
    "TRAFFIC",
    "UNDEFINED",
    "PRECHECK_ELEMENTS",
    "verdict",
    "time_fresh",
    "time_performance",
    "warm_performance",
    "perf_verdict",
    "describe_case",
    "active_cases",
    "expected_outputs",
    "poisoned_view",
    "Run",
    "Plan",
    "grade_local",
    "summary_line",
]

#: Set in the grader's sandbox: graded cells there are judged outside the notebook, so ``check`` does nothing.
GRADING_ENV = "KERNELS_GRADING"
_GUARD_MIN = 256


@dataclass
class Outcome:
    """What one check call found: ``passed``, the lines to show, timing details when graded for speed, and the
    exception the student's code raised, if it did."""

    exercise: str
    passed: bool
    lines: list[str] = field(default_factory=list)
    cases: int = 0
    not_graded: list[str] = field(default_factory=list)
    perf: dict | None = None
    error: BaseException | None = None

    @property
    def message(self) -> str:
        return "\n".join(self.lines)


# ---- cases, seeds, inputs ----------------------------------------------------------------------------------

def draw_seed() -> int:
    """A fresh seed, unknown before the check runs."""
    return secrets.randbits(48)


def active_cases(ex: Exercise, hidden: bool) -> tuple[list[tuple[int, Case]], list[str]]:
    """The cases to run here (index, case) and the labels skipped because they need a GPU."""
    run, skipped = [], []
    for i, case in enumerate(ex.cases(hidden)):
        if case.gpu_only and not ON_GPU:
            skipped.append(case.label)
        else:
            run.append((i, case))
    return run, skipped


def tolerance(ex: Exercise, case: Case) -> float:
    """The relative-error bound for ``case``: the exercise's own, else by precision, else by dtype."""
    if ex.tolerance is not None:
        return float(ex.tolerance(case))
    if case.precision is not None:
        return TOLERANCE[case.precision]
    return TOLERANCE[precision_of(case.dtype)]


def _precision_name(case: Case) -> str:
    if case.precision:
        return case.precision
    return {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64"}.get(case.dtype, "ieee fp32")


def describe_case(ex: Exercise, case: Case, seed: int | None = None) -> str:
    params = ", ".join(f"{k}={v}" for k, v in case.params.items())
    dtype = str(case.dtype).replace("torch.", "")
    tail = f"; seed {seed}" if seed is not None else ""
    tol = tolerance(ex, case)
    if tol == 0 and set(ex.args) == {"function"}:  # functions of counts: exact, no dtype to speak of
        return f"case {case.label!r} ({params}{'; ' if params else ''}exact answers{tail})"
    return (f"case {case.label!r} ({params}{'; ' if params else ''}{dtype}, tolerance {tol:.0e} "
            f"[{_precision_name(case)}]{tail})")


def case_inputs(ex: Exercise, case: Case, seed: int) -> dict:
    """The case's inputs on the CPU, drawn from ``seed``."""
    inputs = ex.make_inputs(case, generator(seed))
    return {k: (v.detach().cpu() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


class Reference(dict):
    """The float64 reference outputs, name -> tensor or number; ``scale``: name -> the norm that relative errors
    are taken against where it exceeds the output's own (:attr:`Exercise.magnitude`)."""

    def __init__(self, outputs: dict, scale: dict | None = None):
        super().__init__(outputs)
        self.scale = scale or {}


def reference(ex: Exercise, case: Case, cpu_inputs: dict) -> Reference:
    """The float64 reference outputs on the CPU (and, for a ``magnitude`` exercise, the norms of the same
    computation on the inputs' absolute values)."""
    f64 = {k: (v.to(torch.float64) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
           for k, v in cpu_inputs.items()}
    out = {k: (v.detach().cpu() if isinstance(v, torch.Tensor) else v) for k, v in ex.reference(f64, case).items()}
    scale = {}
    if ex.magnitude:
        absolute = ex.reference({k: (v.abs() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
                                 for k, v in f64.items()}, case)
        scale = {k: float(v.detach().double().norm()) for k, v in absolute.items()
                 if isinstance(v, torch.Tensor) and v.is_floating_point()}
    return Reference(out, scale)


def _guard(n: int) -> int:
    """Guard elements on each side of a buffer of ``n``: a multiple of 64, so that every tensor a check hands a
    kernel starts at least 64-byte aligned (a kernel compiled assuming 16-byte aligned pointers gets them)."""
    return -(-max(_GUARD_MIN, min(n // 4, 1 << 16)) // 64) * 64


def pad_inputs(cpu_inputs: dict, device=None) -> tuple[dict, list[torch.Tensor]]:
    """Inputs moved to ``device``, each inside a NaN-filled buffer (same strides), so stray reads load NaN."""
    views, buffers = _pad(cpu_inputs, device)
    return views, list(buffers.values())


def _pad(cpu_inputs: dict, device=None) -> tuple[dict, dict[str, torch.Tensor]]:
    device = DEVICE if device is None else device
    views, buffers = {}, {}
    for k, v in cpu_inputs.items():
        if not isinstance(v, torch.Tensor):
            views[k] = v
            continue
        if v.numel() == 0 or any(s < 0 for s in v.stride()):
            views[k] = v.to(device)
            continue
        span = 1 + sum((n - 1) * s for n, s in zip(v.shape, v.stride()))
        g = _guard(span)
        buf = torch.full((span + 2 * g,), poison_value(v.dtype), dtype=v.dtype, device=device)
        view = buf.as_strided(v.shape, v.stride(), g)
        view.copy_(v)
        views[k] = view
        buffers[k] = buf
    return views, buffers


def _output_specs(ex: Exercise, case: Case, cpu_inputs: dict) -> dict[str, tuple[tuple, torch.dtype, tuple | None]]:
    """name -> (shape, dtype, order) from :attr:`Exercise.outputs`; ``order`` (None: row-major) lists the dimensions
    from the outermost in memory to the innermost, ``(1, 0)`` for a column-major matrix."""
    out = {}
    for k, spec in (ex.outputs(case, cpu_inputs) if ex.outputs is not None else {}).items():
        shape, dtype, order = (*spec, None) if len(spec) == 2 else spec
        out[k] = (tuple(shape), dtype, tuple(order) if order is not None else None)
    return out


def _laid_out(p: Poisoned, shape: tuple, order: tuple | None) -> Poisoned:
    """``p`` (its elements, contiguous: ``shape`` permuted by ``order``) seen in its logical ``shape``."""
    if order is None:
        return Poisoned(p.buffer, p.out.view(shape), p.guard)
    return Poisoned(p.buffer, p.out.view([shape[d] for d in order]).permute(*[order.index(d) for d in
                                                                              range(len(shape))]), p.guard)


def alloc_outputs(ex: Exercise, case: Case, cpu_inputs: dict, device=None) -> dict[str, Poisoned]:
    """The outputs a kernel writes, full of NaN, with guard bands of a NaN whose bits differ from the inputs'
    padding (:func:`kernels.testing.guard_filled`), so an unmasked store of a padding NaN still shows; each laid
    out in memory as its ``order`` says (:func:`_output_specs`)."""
    device = DEVICE if device is None else device
    return {k: _laid_out(poisoned(math.prod(shape), dtype=dtype, guard=_guard(math.prod(shape)), device=device),
                         shape, order)
            for k, (shape, dtype, order) in _output_specs(ex, case, cpu_inputs).items()}


def expected_outputs(ex: Exercise, case: Case, cpu_inputs: dict) -> dict[str, tuple[tuple, torch.dtype, int, tuple]]:
    """name -> (shape, dtype, guard, order) of each poisoned output buffer, as :func:`alloc_outputs` lays them
    out."""
    return {k: (shape, dtype, _guard(math.prod(shape)), order)
            for k, (shape, dtype, order) in _output_specs(ex, case, cpu_inputs).items()}


def poisoned_view(buffer: torch.Tensor, shape: tuple, guard: int, order: tuple | None = None) -> Poisoned:
    """The :class:`Poisoned` over a returned buffer laid out by :func:`alloc_outputs`."""
    n = math.prod(shape)
    return _laid_out(Poisoned(buffer, buffer[guard: guard + n], guard), shape, order)


#: ``result[PROBLEMS]``: what :func:`run_case` found wrong before any output is compared (out-of-bounds accesses,
#: a traffic rule, a ``CheckFailed`` the exercise's run raised). :func:`verdict` reports these first; they travel
#: from the grader's sandbox with the other results.
PROBLEMS = "__problems__"
#: ``result[TRAFFIC]``: why the memory traffic is not the exercise's (:attr:`Exercise.traffic`), reported only when
#: the outputs are right (a wrong kernel gets the message about its outputs).
TRAFFIC = "__traffic__"
#: ``result[UNDEFINED]``: the loads without ``other=`` whose masked-off lanes read NaN in the interpreter
#: (:meth:`kernels.checks.bounds.Findings.undefined_lines`), reported only where an output holds NaN.
UNDEFINED = "__undefined__"
#: Under a GPU, cases with at most this many input and output elements are first run in the interpreter, bounds
#: checked (cheap at that size), so an out-of-bounds access is named before it can fault on the device.
PRECHECK_ELEMENTS = 1 << 18


def _names(inputs: dict, outs: dict) -> dict[int, str]:
    names = {v.data_ptr(): k for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    names.update({p.out.data_ptr(): k for k, p in outs.items()})
    return names


def _checked(ex: Exercise, case: Case, launch, inputs: dict, outs: dict) -> tuple[object, list[str], dict]:
    """Run ``launch()`` in the interpreter with every access bounds-checked (:mod:`kernels.checks.bounds`) and bf16
    computed as a GPU does (:mod:`kernels.checks.interp`); return its result, the out-of-bounds accesses and the
    notes for the verdict: the traffic rule's objection (:attr:`Exercise.traffic`, asked only of a run that stayed
    in bounds) and the loads that read undefined lanes."""
    from . import bounds, interp

    with interp.bf16_fixed():
        result, found = bounds.run_checked(launch, _names(inputs, outs))
    problems = found.problems()
    why = ex.traffic(found, case) if ex.traffic is not None and not problems else None
    notes = {TRAFFIC: [why]} if why else {}
    undefined = found.undefined_lines()
    if undefined:
        notes[UNDEFINED] = undefined
    return result, problems, notes


def _small(ex: Exercise, case: Case, cpu_inputs: dict) -> bool:
    n = sum(v.numel() for v in cpu_inputs.values() if isinstance(v, torch.Tensor))
    n += sum(math.prod(shape) for shape, _, _ in _output_specs(ex, case, cpu_inputs).values())
    return n <= PRECHECK_ELEMENTS


def precheck(ex: Exercise, args: tuple, case: Case, cpu_inputs: dict) -> tuple[list[str], list[str]]:
    """On a GPU machine, run the case once in the interpreter on CPU copies, bounds-checked: the out-of-bounds
    accesses and the traffic rule's objection found (both empty when the run is clean, or when the interpreter
    itself cannot run it: the real run then speaks for itself)."""
    inputs, _ = pad_inputs(cpu_inputs, "cpu")
    outs = alloc_outputs(ex, case, cpu_inputs, "cpu")
    try:
        # the interpreter runs the kernel's loops as Python, which an alarm stops: a kernel that never ends is
        # named here, before the GPU runs it (a GPU kernel that never ends can only be stopped with its process)
        with _case_time_limit(CASE_SECONDS, interpreted=True):
            _, problems, notes = _checked(ex, case, lambda: ex.run(args, inputs, {k: p.out for k, p in outs.items()},
                                                                    case), inputs, outs)
    except CaseTooLong:
        raise
    except AssertionError as e:
        if any(rule in str(e) for rule in _TMA_RULES):  # the GPU run would fault on it, its context lost
            raise AssertionError(f"{e} (a tensor descriptor's rule, which the GPU's TMA unit enforces: there this "
                                 "access would fault)") from None
        return [], []
    except Exception:  # noqa: BLE001 (whatever the interpreter makes of the kernel, the GPU run decides)
        return [], []
    return problems, notes.get(TRAFFIC, [])


#: What the interpreter asserts of a tensor descriptor (``tl.make_tensor_descriptor``) that the hardware requires
#: too: its base, outer strides and block offsets in multiples of 16 bytes.
_TMA_RULES = ("must be 16-byte aligned",)


def _inputs_changed(cpu_inputs: dict, inputs: dict, buffers: dict[str, torch.Tensor], kernels: bool) -> list[str]:
    """Inputs must come back as they went in, padding included: a kernel that stores into an input, or into the
    padding around one, wrote where only outputs may be written; a function (``kernels`` false) that changes an
    input in place changes its caller's tensor."""
    problems = []
    for k, buf in buffers.items():
        view = inputs[k]
        expect = torch.full_like(buf, poison_value(buf.dtype))
        expect.as_strided(view.shape, view.stride(), view.storage_offset()).copy_(cpu_inputs[k])
        bits = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[buf.element_size()]
        changed = buf.view(bits) != expect.view(bits)
        if not changed.any():
            continue
        inside = torch.zeros_like(changed)
        inside.as_strided(view.shape, view.stride(), view.storage_offset()).fill_(True)
        in_view, around = int((changed & inside).sum()), int((changed & ~inside).sum())
        where = [f"{in_view} of its elements"] if in_view else []
        where += [f"{around} element(s) of the padding around it (an out-of-bounds store)"] if around else []
        if kernels:
            problems.append(f"{k}: the kernel wrote into its input `{k}`: {' and '.join(where)} changed; only the "
                            "outputs may be written")
        else:
            problems.append(f"{k}: your code changed its input {k} in place ({' and '.join(where)} changed: x *= "
                            "scale, x.mul_(...), a slice assigned into it): the caller's tensors must come back as "
                            "they went in (autograd may hand the same tensor to other backwards); compute into new "
                            "tensors")
    return problems


def run_case(ex: Exercise, args: tuple, case: Case, cpu_inputs: dict, device=None, *, check_first: bool | None = None):
    """Run the student's objects on one case; return (poisoned outputs, returned results).

    Kernel launches never touch memory outside their tensors under the interpreter: they run bounds-checked there
    (:mod:`kernels.checks.bounds`). On a GPU, a case of at most :data:`PRECHECK_ELEMENTS` elements is first run that
    way on CPU copies (``check_first`` overrides the choice), then on the device, where the outputs' guard bands and
    the inputs' padding show stray stores. What is found, and a ``CheckFailed`` the exercise's run raises, comes
    back as ``result[PROBLEMS]``; an error of the student's own code propagates.
    """
    device = DEVICE if device is None else device
    kernels = "kernel" in ex.args
    interpreted = kernels and INTERPRET and torch.device(device).type == "cpu"
    notes = {}
    if kernels and not interpreted and (check_first if check_first is not None else _small(ex, case, cpu_inputs)):
        problems, traffic = precheck(ex, args, case, cpu_inputs)
        notes = {TRAFFIC: traffic} if traffic else {}
        if problems:
            return alloc_outputs(ex, case, cpu_inputs, device), {PROBLEMS: problems}
    inputs, buffers = _pad(cpu_inputs, device)
    outs = alloc_outputs(ex, case, cpu_inputs, device)

    def launch():
        if torch.device(device).type == "cuda":  # a kernel may build TMA descriptors on the device
            ensure_triton_allocator()
        return ex.run(args, inputs, {k: p.out for k, p in outs.items()}, case)

    try:
        if interpreted:
            result, problems, notes = _checked(ex, case, launch, inputs, outs)
        else:
            result, problems = launch(), []
            _sync()
    except CheckFailed as e:
        return outs, {PROBLEMS: [str(e)]}
    if not problems:
        problems = _inputs_changed(cpu_inputs, inputs, buffers, kernels)
    if problems:
        return outs, {PROBLEMS: problems}
    if result is not None and not isinstance(result, dict):
        raise CheckFailed(f"the exercise's run() returned a {type(result).__name__}, not a dict")
    return outs, {**(result or {}), **notes}


# ---- judging -----------------------------------------------------------------------------------------------

def _first(mask: torch.Tensor) -> tuple:
    return tuple(int(i) for i in mask.nonzero()[0])


def _ranges(indices: list[int], most: int = 3) -> str:
    """Sorted indices as runs, ``0-63, 128-191``; past ``most`` runs, how many more."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:most])
    return text + (f" and {len(runs) - most} more runs" if len(runs) > most else "")


def _where(mask: torch.Tensor) -> str:
    """Where the True elements of ``mask`` lie when that has a short name: every element at some indices of one
    dimension (say a chunk of tokens never reached, or a tail past the last block), the rest everywhere; else ""."""
    if mask.all():
        return "; nothing was written"
    for d in range(mask.dim()):
        if mask.shape[d] < 2:
            continue
        others = [x for x in range(mask.dim()) if x != d]
        hit = mask.any(dim=others) if others else mask
        shape = [1] * mask.dim()
        shape[d] = mask.shape[d]
        if torch.equal(mask, hit.reshape(shape).expand_as(mask)):
            at = hit.nonzero().flatten().tolist()
            where = f"index {at[0]}" if len(at) == 1 else f"indices {_ranges(at)}"
            if mask.dim() == 1:
                return f"; exactly {where} (of {mask.shape[0]})"
            return f"; exactly {where} of dimension {d} (of {mask.shape[d]}), at every index of the others"
    return ""


def _compare(name: str, got: torch.Tensor, ref: torch.Tensor, tol: float, device="cpu",
             scale: float = 0.0) -> str | None:
    """What is wrong with ``got`` against ``ref`` (None: within ``tol``), compared in float64 on ``device``; the
    relative error is taken against ``max(|ref|, scale)`` (see :attr:`Exercise.magnitude`)."""
    o = got.detach().to(device, torch.float64)
    r = ref.detach().to(device, torch.float64)
    if tuple(o.shape) != tuple(r.shape):
        return f"{name}: shape {tuple(o.shape)}, expected {tuple(r.shape)}"
    bad = ~torch.isfinite(o)
    if bad.any():
        return (f"{name}: {int(bad.sum())} of {o.numel()} elements are NaN or inf, first at {_first(bad)}; "
                "an element that was never written, a load outside the inputs (they are padded with NaN) or "
                "an overflow")
    if o.numel() == 0:
        return None
    diff = (o - r).abs()
    denom = max(r.norm().item(), scale)
    err = diff.norm().item() / denom if denom > 0 else diff.norm().item()
    if tol == 0:
        if not torch.equal(o, r):
            wrong = diff > 0
            idx = _first(wrong)
            return (f"{name}: {int(wrong.sum())} of {o.numel()} values differ (exact answer expected); first at "
                    f"{idx}: got {o[idx].item():.10g}, expected {r[idx].item():.10g}")
        return None
    if not err <= tol:
        idx = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
        off = diff > (tol * (r.abs().max().item() or 1.0))
        share = f"{int(off.sum())} of {o.numel()} elements are off" if off.any() else "errors spread thinly"
        return (f"{name}: relative error {err:.3e} > tolerance {tol:.0e} ({share}); largest difference "
                f"{diff.max().item():.3e} at {idx}: got {o[idx].item():.6g}, expected {r[idx].item():.6g}")
    return None


def verdict(ex: Exercise, case: Case, outs: dict[str, Poisoned], result: dict, ref: Reference,
            inputs: dict | None = None) -> list[str]:
    """Everything wrong with one case's outputs (empty: it passed); a failing case with a
    :attr:`~kernels.checks.spec.Case.purpose` ends with it. Where the outputs are only off in value, the
    exercise's :attr:`~kernels.checks.spec.Exercise.diagnose` (given the case's ``inputs``) may name the mistake."""
    problems = _verdict(ex, case, outs, result, ref)
    if problems and ex.diagnose is not None and inputs is not None:
        why = _diagnosis(ex, case, outs, result, ref, inputs, problems)
        if why:
            problems.insert(0, why)
    if problems and case.purpose:
        problems.append(f"(this case {case.purpose})")
    return problems


# a value past the tolerance, or NaN/inf where a finite value was due (garbage a backward never overwrote may hold
# either: torch.empty_like's memory decides, and the diagnosis must not depend on it)
_OFF = re.compile(r"^\w+: (relative error |\d+ of \d+ values differ|got .*, expected |\d+ of \d+ elements are NaN "
                  r"or inf)")
_UNWRITTEN = re.compile(r"^\w+: output not written: ")


def _diagnosis(ex: Exercise, case: Case, outs: dict[str, Poisoned], result: dict, ref: Reference, inputs: dict,
               problems: list[str]) -> str | None:
    """``ex.diagnose`` on a case whose every problem is a value past the tolerance (nothing out of bounds or
    missing: those messages name their fault already; nothing unwritten, unless the exercise asks,
    :attr:`~kernels.checks.spec.Exercise.diagnose_unwritten`)."""
    if not all(_OFF.match(p) or (ex.diagnose_unwritten and _UNWRITTEN.match(p)) for p in problems):
        return None
    got = {n: (outs[n].out if n in outs else result.get(n)) for n in ref}
    if not all(isinstance(g, torch.Tensor) for g in got.values()):
        return None
    want = {n: w for n, w in ref.items() if isinstance(w, torch.Tensor)}
    return ex.diagnose(inputs, {n: g.detach().cpu().double() for n, g in got.items()}, case, want)


def _verdict(ex: Exercise, case: Case, outs: dict[str, Poisoned], result: dict, ref: Reference) -> list[str]:
    if result.get(PROBLEMS):
        return [str(p) for p in result[PROBLEMS]]
    tol = tolerance(ex, case)
    problems = []
    undefined_nan = False  # an output holds NaN, and loads without other= left lanes undefined
    for name, want in ref.items():
        if name in outs:
            p = outs[name]
            before, after = p.stray_writes()
            if before or after:
                problems.append(f"{name}: the kernel wrote out of bounds ({before} elements before the start of "
                                f"{name}, {after} after its end); check your masks")
            if p.out.is_floating_point():
                unwritten = torch.isnan(p.out)
                if unwritten.any():
                    n, first = int(unwritten.sum()), _first(unwritten)
                    if result.get(UNDEFINED):  # NaN from a store of the undefined lanes, or never written
                        undefined_nan = True
                        problems.append(f"{name}: {n} of {p.out.numel()} elements are NaN, first at {first}: "
                                        "computed from those undefined lanes, or never written")
                    else:
                        problems.append(f"{name}: output not written: {n} of {p.out.numel()} elements still hold "
                                        f"the NaN poison, first at {first}{_where(unwritten)} (outputs start "
                                        "filled with NaN: a kernel "
                                        "that reads an output before storing to it, a state never zeroed, say, "
                                        "spreads that NaN too)")
                    continue
            msg = _compare(name, p.out, want, tol, scale=ref.scale.get(name, 0.0))
        elif name in result:
            got = result[name]
            if isinstance(want, torch.Tensor):
                if not isinstance(got, torch.Tensor):
                    problems.append(f"{name}: expected a tensor of shape {tuple(want.shape)}, got a "
                                    f"{type(got).__name__}")
                    continue
                msg = _compare(name, got, want, tol, scale=ref.scale.get(name, 0.0))
            else:
                if isinstance(got, torch.Tensor) and got.numel() == 1:
                    got = got.item()
                if not isinstance(got, (int, float)) or isinstance(got, bool):
                    problems.append(f"{name}: expected a number, got {type(got).__name__} {got!r:.80}")
                    continue
                msg = _compare(name, torch.tensor(float(got)), torch.tensor(float(want)), tol)
                if msg:
                    msg = f"{name}: got {got!r}, expected {want!r}" + (f" (tolerance {tol:.0e})" if tol else "")
        else:
            problems.append(f"{name}: not returned" if ex.outputs is None else f"{name}: not produced")
            continue
        if msg:
            problems.append(msg)
    if not problems and result.get(TRAFFIC):
        problems += [str(p) for p in result[TRAFFIC]]
    if undefined_nan:
        problems = [str(p) for p in result[UNDEFINED]] + problems  # the cause first, then the NaN it left
    return problems


def toolchain_missing(ex: Exercise) -> str | None:
    """Where the exercise's toolchain (:attr:`Exercise.toolchain`) is missing on this machine, what to do about it
    (the message starts with "needs <tool>"); else None."""
    if ex.toolchain == "cargo":
        from ..export import rust_exercise

        return None if rust_exercise.cargo() else rust_exercise.GET_CARGO
    return None


def _not_plain(v, where: str = "the value") -> tuple[str, object]:
    """The first part of ``v`` that is not plain data, and where it is (``the value[2]``, ``the value['k']``)."""
    parts = enumerate(v) if isinstance(v, (list, tuple)) else v.items() if isinstance(v, dict) else ()
    for k, x in parts:
        if isinstance(v, dict) and not isinstance(k, (str, int, float, bool)) and k is not None:
            return f"a key of {where}", k
        try:
            json.dumps(x)
        except (TypeError, ValueError):
            return _not_plain(x, f"{where}[{k!r}]")
    return where, v


def check_value(ex: Exercise, values: tuple, hidden: bool) -> str | None:
    """A value argument must be plain data; then the exercise's rule decides."""
    for v in values:
        if v is None:
            continue
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            where, bad = _not_plain(v)
            kind = type(bad).__qualname__ if type(bad).__module__ == "builtins" else \
                f"{type(bad).__module__}.{type(bad).__qualname__}"
            return (f"a value must be plain data (numbers, strings, lists, dicts); {where} has type {kind}"
                    + (" (write each configuration as a dict of its keyword arguments)"
                       if type(bad).__name__ == "Config" else ""))
    if ex.rule is None:
        return None
    return ex.rule(values, hidden)


# ---- speed (GPU only) --------------------------------------------------------------------------------------

def _named_results(returned) -> dict:
    return returned if isinstance(returned, dict) else {}


_FASTEST: dict[str, float] = {}


#: How many more times the ceilings are measured when a kernel's time beats the floor they give, before the
#: kernel is said to skip work.
FLOOR_REMEASURES = 3


def _fastest(what: str, measured: float) -> float:
    """The highest rate this process has measured for ``what``: a measurement taken while something else used the
    GPU can only come out low, and a low rate would raise the floor above what an honest kernel can reach."""
    _FASTEST[what] = max(_FASTEST.get(what, 0.0), measured)
    return _FASTEST[what]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[t.element_size()])


def _launch_checker(outputs: dict[str, Poisoned], tol: float):
    """``(snapshot, check, count)``: ``snapshot()`` keeps the outputs of a full launch; ``check()`` (after each
    timed launch, outside the timed region, on the device) counts the launches whose outputs differ from it beyond
    ``tol`` (a poison NaN left in place counts); ``count()`` -> (launches, elements) that differed."""
    state: dict = {}
    first = next(iter(outputs.values())).out

    def snapshot():
        state["ref"] = {k: p.out.detach().clone() for k, p in outputs.items()}
        state["atol"] = {k: tol * float(r.double().abs().nan_to_num(0.0).max()) if r.is_floating_point() and r.numel()
                         else 0.0 for k, r in state["ref"].items()}
        state["bad"] = torch.zeros(2, dtype=torch.int64, device=first.device)

    def check():
        wrong = None
        for k, p in outputs.items():
            ref = state["ref"][k]
            if p.out.is_floating_point():
                got, want = p.out.float(), ref.float()  # (no copies for fp32: nothing in place here)
                ok = (got - want).abs() <= want.abs() * tol + state["atol"][k]
                w = (~ok).sum()
            else:
                w = (p.out != ref).sum()
            wrong = w if wrong is None else wrong + w
        state["bad"][0] += (wrong > 0).to(torch.int64)
        state["bad"][1] += wrong

    def count():
        return tuple(int(v) for v in state["bad"].tolist()) if "bad" in state else (0, 0)

    return snapshot, check, count


def time_fresh(launch, outputs: dict[str, Poisoned], *, warmup: float = 10, rep: float = 50,
               inputs: tuple | list = (), flush_bytes: int = 256 << 20, verify: float | None = None) -> dict:
    """Time ``launch(outs)``, which writes the tensors ``outs[name]``, so that every timed launch starts from
    outputs it cannot tell from a fresh call's; then check what the timed launches did.

    Before each launch, outside the timed region, every output is filled with the poison again
    (:func:`kernels.testing.repoison`; the guard bands are left as they are, so a stray store while timing still
    shows) and the L2 cache is flushed by writing ``flush_bytes``. A kernel that reads its own output to skip work
    ("this tile already holds a number") therefore does its full work in every timed launch. Each launch is timed
    alone with CUDA events (on a CPU device, with the wall clock); ``warmup`` and ``rep`` are milliseconds of
    launches, as in ``triton.testing.do_bench``, and the median is reported. The host's own time to make a launch
    (Python, binding the arguments: a millisecond on the grader's cubin path) is kept out of the events: before
    the start event the GPU is given a spin of twice the median host time of the last 16 launches (at most
    20 ms; a first launch that compiles or loads a module is slow once), so the kernel is already queued when the
    start event is reached. Afterwards the guard bands are read, the ``inputs`` (whole buffers, padding included)
    are compared with copies taken before, and one more launch is made on freshly allocated NaN-filled outputs
    (with guard bands), for the caller to compare with its reference.

    ``verify`` (a relative tolerance): every warm-up and timed launch's outputs are compared, after its end event,
    with those of the first full launch, so a kernel that does its work only on some launches (the first, the
    untimed ones, those it guesses are not timed) is found whatever way it tells them apart: ``"skipped"`` is
    (launches, elements) that differed.

    Returns ``{"ms", "times", "launches", "stray": {name: (before, after)}, "inputs_changed": [index, ...],
    "after": {name: Poisoned}, "result": what the last launch returned, "skipped": (launches, elements),
    "host_ms": a launch's median time on the host (None on a CPU device)}``.
    """
    import statistics
    import time

    first = next(iter(outputs.values())).out
    device = first.device
    cuda = device.type == "cuda"
    outs = {k: p.out for k, p in outputs.items()}
    flush = torch.empty(flush_bytes if cuda else 0, dtype=torch.int8, device=device)
    copies = [t.clone() for t in inputs]

    def fresh():
        for p in outputs.values():
            repoison(p)
        flush.zero_()

    snapshot, check, skipped = _launch_checker(outputs, verify) if verify is not None else (None, None, None)
    host: list[float] = []  # each timed launch's host time, in seconds
    # the SM clock, for the spin's cycles (kHz in the properties; 2 GHz where torch does not say)
    clock_hz = getattr(torch.cuda.get_device_properties(device), "clock_rate", 0) * 1e3 or 2e9 if cuda else 0

    def timed(n: int, checked: bool = True) -> list[float]:
        checked = checked and check is not None
        if not cuda:
            out = []
            for _ in range(n):
                fresh()
                t0 = time.perf_counter()
                launch(outs)
                out.append((time.perf_counter() - t0) * 1e3)
                if checked:
                    check()
            return out
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for s, e in zip(starts, ends):
            fresh()
            if host:
                torch.cuda._sleep(int(min(2 * statistics.median(host[-16:]), 0.02) * clock_hz))
            s.record()
            t0 = time.perf_counter()
            launch(outs)
            host.append(time.perf_counter() - t0)
            e.record()
            if checked:
                check()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]

    if snapshot is not None:  # the reference of what a launch writes at this size: a first full launch
        fresh()
        launch(outs)
        if cuda:
            torch.cuda.synchronize()
        snapshot()
    estimate = max(min(timed(3)), 1e-3)
    timed(max(1, min(int(warmup / estimate), 1000)))
    times = timed(max(5, min(int(rep / estimate), 1000)))
    stray = {k: p.stray_writes() for k, p in outputs.items()}
    changed = [i for i, (t, c) in enumerate(zip(inputs, copies)) if not torch.equal(_bits(t), _bits(c))]
    del copies
    after = {k: poisoned(*p.out.shape, dtype=p.out.dtype, guard=p.guard, device=device) for k, p in outputs.items()}
    result = launch({k: p.out for k, p in after.items()})
    if cuda:
        torch.cuda.synchronize()
    return {"ms": float(sorted(times)[len(times) // 2]), "times": times, "launches": len(times), "stray": stray,
            "inputs_changed": changed, "after": after, "result": result,
            "skipped": skipped() if skipped is not None else (0, 0),
            "host_ms": statistics.median(host) * 1e3 if host else None}


def time_performance(ex: Exercise, args: tuple, seed: int, target: tuple[float, str] | None = None) -> dict:
    """Time the student's run and the baseline on the performance case (:func:`time_fresh`, every launch on
    re-poisoned outputs); then compare the outputs of a launch of each on fresh NaN-filled buffers. ``target``:
    the exercise's target time, as :func:`warm_performance` measured it on this GPU (else measured here)."""
    perf = ex.performance
    case = perf.case
    cpu = case_inputs(ex, case, seed)
    inputs, buffers = _pad(cpu)
    mine = alloc_outputs(ex, case, cpu)
    base = alloc_outputs(ex, case, cpu)
    del cpu  # the timed size is large (1 GiB moved for lesson 01): nothing of it stays in host memory
    faults = []
    # run and baseline write into their output buffers; a dict they return adds named results to compare (any
    # other return value, such as the tensor of ``out.copy_(x)``, is not a result)
    tol = tolerance(ex, case)
    ensure_triton_allocator()  # a kernel may build TMA descriptors on the device
    student = time_fresh(lambda outs: ex.run(args, inputs, outs, case), mine, warmup=perf.warmup, rep=perf.rep,
                         inputs=list(buffers.values()), verify=max(tol, 1e-6) * 2)
    launches, elements = student["skipped"]
    if launches:
        faults.append(f"{launches} of the {student['launches']} timed and warm-up launches left outputs different "
                      f"from a full launch's ({elements} elements, the poison NaN counted): the kernel skips work "
                      "while timed")
    for k, (before, after) in student["stray"].items():
        if before or after:
            faults.append(f"{k}: the kernel wrote out of bounds while timed ({before} elements before the start of "
                          f"{k}, {after} after its end)")
    names = list(buffers)
    for i in student["inputs_changed"]:
        faults.append(f"{names[i]}: the kernel wrote into its input `{names[i]}` (or the padding around it) while "
                      "timed; only the outputs may be written")
    baseline = time_fresh(lambda outs: perf.baseline(args, inputs, outs, case), base, warmup=perf.warmup,
                          rep=perf.rep)
    mismatch = []
    # compared where they are: float64 host copies of the timed size would take 4x its bytes of host memory
    for k, p in student["after"].items():
        msg = _compare(k, p.out, baseline["after"][k].out, max(tol, 1e-6) * 2, device=p.out.device)
        if msg:
            mismatch.append(msg)
    got, want = _named_results(student["result"]), _named_results(baseline["result"])
    for k in got:
        if isinstance(got[k], torch.Tensor) and isinstance(want.get(k), torch.Tensor):
            msg = _compare(k, got[k], want[k], max(tol, 1e-6) * 2, device=got[k].device)
            if msg:
                mismatch.append(msg)
    floor_ms, bw = _floor_ms(perf)
    for _ in range(FLOOR_REMEASURES):
        # a floor above the student's time may come from ceilings measured while other work shared the GPU
        # (graders on one GPU side by side): measured again, the highest rate is kept, so it can only come down
        if student["ms"] * perf.slack >= floor_ms or faults or mismatch:  # no floor judged, or none too high
            break
        floor_ms, bw = _floor_ms(perf)
    out = {"student_ms": student["ms"], "baseline_ms": baseline["ms"], "floor_ms": floor_ms, "bandwidth_Bps": bw,
           "launches": student["launches"], "faults": faults, "mismatch": mismatch, "case": case.label,
           "host_ms": student["host_ms"]}  # a launch's median time on the host, kept out of the events
    if perf.target is not None:
        out["target_ms"], out["target_name"] = target or perf.target(inputs, case, floor_ms)
    return out


def _floor_ms(perf: Performance) -> tuple[float, float]:
    """The performance case's hardware floor in ms, ``max(bytes / bandwidth, flops / rate)``, and the bandwidth
    (bytes/s), each the best this process has measured."""
    from ..bench import copy_bandwidth, matmul_rate

    nbytes, flops = perf.floor(perf.case)
    bw = _fastest("copy", copy_bandwidth(512 * 2**20))
    dtype = perf.case.dtype
    mm_dtype = dtype if dtype in (torch.float16, torch.bfloat16) else torch.float32
    rate = _fastest(f"matmul {mm_dtype}", matmul_rate(mm_dtype)) if flops else 0
    return max(nbytes / bw * 1e3, flops / rate * 1e3 if rate else 0.0), bw


def warm_performance(seed: int = 0, budget: float = 200.0, between=None, lessons=None) -> dict[str, tuple[float, str]]:
    """Run each speed-graded exercise's baseline once on its timed case, so that what it compiles (the package's
    kernels, torch's) is in the caches before any submission is timed; call ``between()``; then measure each
    exercise's target time (another library's kernel, which may autotune for a minute at a new shape): exercise
    id -> (ms, what). What the grader does once per class on a GPU, where every submission's worker has seconds,
    not minutes, to time its kernel (``between`` takes the cache's snapshot without the other library's tuning
    binaries). ``lessons``: only their exercises (default: every lesson's). An exercise whose baseline or target
    fails here, or that ``budget`` seconds leave no time to start, is left to measure them itself."""
    import time

    from .spec import all_exercises

    start = time.monotonic()
    timed = [ex for ex in all_exercises() if ex.performance is not None
             and (lessons is None or ex.id.split(".", 1)[0] in lessons)]

    def each(step, exercises):
        for ex in exercises:
            if time.monotonic() - start > budget:
                return
            perf = ex.performance
            try:
                cpu = case_inputs(ex, perf.case, seed)
                inputs, _ = _pad(cpu)
                outs = alloc_outputs(ex, perf.case, cpu)
                del cpu
                step(ex, perf, inputs, outs)
            except Exception:  # noqa: BLE001 (the timed check measures it again, and reports what fails)
                pass
            finally:
                inputs = outs = None
                with contextlib.suppress(Exception):  # a baseline that broke the device: the next step says so
                    torch.cuda.empty_cache()

    def baseline(ex, perf, inputs, outs):
        perf.baseline((), inputs, {k: p.out for k, p in outs.items()}, perf.case)

    targets = {}

    def target(ex, perf, inputs, outs):
        targets[ex.id] = tuple(perf.target(inputs, perf.case, _floor_ms(perf)[0]))

    each(baseline, timed)
    if between is not None:
        between()
    each(target, [ex for ex in timed if ex.performance.target is not None])
    return targets


def perf_verdict(ex: Exercise, timing: dict) -> list[str]:
    """Judge the timings (on the trusted side): speedup threshold, the hardware floor, the output at size."""
    perf = ex.performance
    faults = list(timing.get("faults", []))
    if faults:
        return [f"at the timed size ({timing['case']}): " + "; ".join(faults)]
    problems = list(timing.get("mismatch", []))
    if problems:
        return [f"at the timed size ({timing['case']}), on fresh NaN-filled outputs after timing, the output differs "
                f"from {perf.baseline_name}'s: "
                + "; ".join(problems)]
    s, b, floor = timing["student_ms"], timing["baseline_ms"], timing["floor_ms"]
    if not (s > 0 and b > 0 and math.isfinite(s) and math.isfinite(b)):
        return [f"timing failed (student {s!r} ms, baseline {b!r} ms)"]
    if s * perf.slack < floor:
        return [f"{s:.4f} ms is faster than the hardware floor ({floor:.4f} ms for this problem's bytes and "
                "FLOPs): the kernel skips work, or the timing is wrong"]
    speedup = b / s
    if speedup < perf.min_speedup:
        return [f"too slow at {timing['case']}: {s:.4f} ms vs {perf.baseline_name}'s {b:.4f} ms, a speedup of "
                f"{speedup:.2f}x; at least {perf.min_speedup:g}x is required (floor {floor:.4f} ms)"]
    if perf.target is not None:
        t = timing.get("target_ms")
        if not (isinstance(t, (int, float)) and t > 0 and math.isfinite(t)):
            return [f"timing failed (no time to beat: {t!r})"]
        if s > t:
            return [f"too slow at {timing['case']}: {s:.4f} ms; it must beat {timing.get('target_name')} "
                    f"({t:.4f} ms; floor {floor:.4f} ms, so yours is {s / floor:.1f}x the floor)"]
    return []


# ---- the notebook-facing check -----------------------------------------------------------------------------

def dot_precision_problem(ex: Exercise, text: str) -> str | None:
    """Why a kernel for an exercise that hands it ``PRECISION`` is wrong on a GPU whatever the interpreter computes:
    a ``tl.dot`` without an input precision, or with TF32 written in. The interpreter multiplies fp32 tiles in full
    fp32 either way; compiled, an fp32 ``tl.dot`` defaults to TF32 (a 10-bit mantissa) and the exercise's
    ``"ieee"`` cases miss their tolerance. ``text``: the kernel's source with its helpers
    (:class:`~kernels.checks.provenance.KernelSource`)."""
    if "PRECISION" not in ex.signature:
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name != "dot":
            continue
        given = [k.value for k in node.keywords if k.arg == "input_precision"] + node.args[3:4]
        tf32 = [k.value for k in node.keywords if k.arg == "allow_tf32"]
        call = " ".join((ast.get_source_segment(text, node) or "tl.dot(...)").split())
        call = call if len(call) <= 70 else call[:67] + "..."
        written = tf32[:1] + given[:1]
        if written and isinstance(written[0], ast.Constant) and written[0].value not in ("ieee", "tf32x3", False):
            # TF32 written into the kernel: the cases' PRECISION is never read ("ieee" everywhere is exact, only
            # slower where a case allows TF32)
            return (f"your kernel calls `{call}` with its precision written in: each case hands the kernel the "
                    "precision it asks for in PRECISION, and the interpreter computes every dot in full fp32 "
                    "whatever it is told, so only a GPU shows the difference: there a \"tf32\" dot misses an "
                    "\"ieee\" case's tolerance. Pass input_precision=PRECISION")
        if written:
            continue
        return (f"your kernel calls `{call}` without input_precision: the interpreter computes every dot in full "
                "fp32 either way, but compiled for a GPU an fp32 tl.dot defaults to TF32 (a 10-bit mantissa), and "
                "the cases that ask for \"ieee\" then miss their tolerance. Pass input_precision=PRECISION to every "
                "tl.dot")
    return None


def matmul_operator_problem(text: str) -> str | None:
    """Why a kernel that multiplies tiles with ``@`` fails: Triton's language has no ``@`` (the interpreter raises a
    TypeError, the compiler an AttributeError about ``MatMult``, neither naming ``tl.dot``)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult):
            what = " ".join((ast.get_source_segment(text, node) or "a @ b").split())
            what = what if len(what) <= 70 else what[:67] + "..."
            return (f"your kernel multiplies tiles with `@` (`{what}`): Triton has no `@` for tiles; a tile "
                    "product is tl.dot(a, b), with the running sum as its third argument: "
                    "acc = tl.dot(a, b, acc, ...)")
    return None


def check_kernel_source(ex: Exercise, text: str) -> None:
    """The rules on a kernel's source that hold in every mode (:func:`matmul_operator_problem`,
    :func:`dot_precision_problem`), wherever the source is rebuilt: the notebook's check, the grader, the zoo."""
    why = matmul_operator_problem(text) or dot_precision_problem(ex, text)
    if why:
        raise CheckFailed(f"{ex.id}: {why}")


def resolve_live(ex: Exercise, objects: tuple, hidden: bool = False, notes: list | None = None) -> tuple:
    """Turn the notebook's live objects into what ``run`` receives, enforcing provenance; under the interpreter
    also compile every kernel launch of the check for sm_90 first
    (:func:`kernels.checks.provenance.verify_compiles`), adding to ``notes`` what the exercise reads in the
    compiled code."""
    if len(objects) != len(ex.args):
        raise CheckFailed(f"{ex.id} takes {len(ex.args)} object(s) after the exercise id ({', '.join(ex.args)}); "
                          f"got {len(objects)}. Expected: {ex.signature}")
    out, sources = [], []
    for kind, obj in zip(ex.args, objects):
        if kind == "kernel":
            ks = provenance.from_live(obj, twins=ex.twins)
            check_kernel_source(ex, ks.text)
            out.append(provenance.load(ks, interpret=INTERPRET))
            sources.append({"entry": ks.entry, "text": ks.text})
        elif kind == "function":
            provenance.check_function_live(obj, forbid=ex.forbid)
            out.append(obj)
            sources.append(None)
        else:
            out.append(obj)
            sources.append(None)
    if INTERPRET and "kernel" in ex.args:
        why = check_value(ex, _values(ex, tuple(out)), hidden) if "value" in ex.args else None
        if why is None:
            found = provenance.verify_compiles(ex.id, hidden, sources,
                                               [a if k == "value" else None for k, a in zip(ex.args, out)])
            if notes is not None:
                notes.extend(found)
    return tuple(out)


def _values(ex: Exercise, args: tuple) -> tuple:
    return tuple(a if kind == "value" else None for kind, a in zip(ex.args, args))


_CUDA_FAULTS = ("illegal memory access", "illegal address", "misaligned address", "CUDA_ERROR_ILLEGAL",
                "unspecified launch failure")


def your_code_raised(kind: str, message, ex: Exercise | None = None) -> str:
    """How a check reports the student's exception, in the notebook and in the grader (which sees only the type's
    name and the message, sent from the sandbox); ``ex``, the exercise, lets a stub's message name the function."""
    text = str(message).strip()
    if len(text) > 2000:  # a compiler's message: the excerpt of the source first, why at the end
        text = f"{text[:1200]}\n…\n{text[-700:]}"
    if kind == "NotImplementedError" and not text:  # the exercise's stub, as handed out
        names = (ex.stub or " or ".join(f"`{n}`" for n in _function_names(ex))) if ex is not None else ""
        text = f"{names or 'it'} is not implemented yet: replace `raise NotImplementedError()` with your code"
    elif kind == "RuntimeError" and "nvml" in text and "CUDACachingAllocator" in text:
        # torch's allocator opens NVML to describe an allocation it could not make; where NVML cannot start (a
        # container, a sandbox) that description fails with an internal assert in place of the OutOfMemoryError
        text = ("the GPU is out of memory: torch could not allocate what your code asked for (and then failed to "
                f"say how much was in use: {text.splitlines()[0][:160]})")
    return f"your code raised {kind}: {text}"


def _function_names(ex: Exercise) -> list[str]:
    """The names of the functions an exercise's check is passed (the catalog's, in the order of ``ex.args``)."""
    return [name for name, kind in zip(exercise_objects().get(ex.id, ()), ex.args) if kind == "function"]


def _raised(e: BaseException, ex: Exercise | None = None) -> str:
    if isinstance(e, CaseTooLong):
        return str(e)
    from .bounds import explained

    text = your_code_raised(type(e).__name__, explained(e), ex)
    # on a GPU only: the interpreter's own out-of-bounds error says "illegal address" too, and nothing is lost there
    if ON_GPU and type(e).__name__ != "OutOfBoundsError" and any(f in str(e) for f in _CUDA_FAULTS):
        text += ("; the kernel touched memory outside its tensors on the GPU, and this process's CUDA context is "
                 "now lost: restart the notebook's kernel before the next check. The smaller cases, checked "
                 "access by access in the interpreter first, showed nothing: look for offsets that only this "
                 "case's sizes push out of range (a product past 2**31 needs int64)")
    return text


# ---- the check plan: what one check call runs and how it is judged ---------------------------------------------

@dataclass
class Run:
    """One run of the student's objects that a check makes: the case (``index`` into ``ex.cases(hidden)``), its
    seed and, made by :meth:`Plan.prepare` on the trusted side, its CPU inputs and float64 reference.
    ``after_timing``: the re-check on fresh inputs after the timed launches."""

    index: int
    case: Case
    seed: int
    after_timing: bool = False
    inputs: dict | None = None
    ref: Reference | None = None


class Plan:
    """One check call, the same wherever it is executed: in the notebook (:func:`grade_local`, every step in this
    process) and in the grader (``grader.grade``, which sends the runs to its sandbox and feeds back what comes
    out; the verdict is computed here, on its side).

    The plan: the value rule first (:meth:`check_values`); then every active case (:func:`active_cases`), each on
    inputs drawn from its own seed (``seed(index, "case")``); on a GPU, for an exercise graded for speed, the
    timing (:func:`time_performance` with ``seed("time")``) after the last case, then the first case again on fresh
    inputs (``seed("recheck")``), so that a kernel that only computes right when it is not timed fails. The first
    failure decides and its message is the outcome's (:meth:`fail`); what comes after it is not judged.
    ``seed(*parts)`` draws a fresh seed by default; the grader derives them from the submission instead."""

    def __init__(self, ex: Exercise, hidden: bool, seed=None):
        seed = seed or (lambda *parts: draw_seed())
        self.ex, self.hidden = ex, hidden
        cases, self.skipped = active_cases(ex, hidden)
        self.runs = [Run(i, case, seed(i, "case")) for i, case in cases]
        self.timed = ex.performance is not None and ON_GPU and bool(self.runs)
        self.time_seed = seed("time") if self.timed else None
        self.recheck = Run(self.runs[0].index, self.runs[0].case, seed("recheck"), True) if self.timed else None
        self.passed = 0
        self.perf: dict | None = None
        self.failure: list[str] = []
        self.error: BaseException | None = None
        self.unrated = ""

    @property
    def failed(self) -> bool:
        return bool(self.failure)

    @property
    def values_only(self) -> bool:
        return all(k == "value" for k in self.ex.args)

    def sequence(self) -> list[Run]:
        """Every run in order: the cases, then (when timed; the timing comes between) the re-check."""
        return self.runs + ([self.recheck] if self.recheck else [])

    def prepare(self, run: Run) -> Run:
        """Draw the run's inputs and compute its float64 reference (once)."""
        if run.inputs is None:
            run.inputs = case_inputs(self.ex, run.case, run.seed)
            run.ref = reference(self.ex, run.case, run.inputs)
        return run

    def fail(self, lines: list[str], error: BaseException | None = None) -> None:
        """Record a failure (only the first counts)."""
        if not self.failure:
            self.failure, self.error = list(lines), error

    def check_values(self, values: tuple, rule=None) -> bool:
        """The exercise's rule on its ``value`` arguments (the others None), or ``rule(values)`` where it runs
        elsewhere (the grader runs a toolchain's rule in its sandbox); False once failed, or when the rule cannot be
        judged on this machine (:class:`NotGradedHere`: ``unrated`` says why)."""
        if rule is not None or "value" in self.ex.args:
            try:
                why = rule(values) if rule is not None else check_value(self.ex, values, self.hidden)
            except NotGradedHere as e:  # the toolchain is missing here: neither passed nor failed
                self.unrated = str(e)
                return False
            if why:
                self.fail([f"{self.ex.id}: {why}"])
        return not self.failed

    def fail_run(self, run: Run, problems: list[str], error: BaseException | None = None) -> None:
        when = " after timing" if run.after_timing else ""
        self.fail([f"{self.ex.id} failed{when} on {describe_case(self.ex, run.case, run.seed)}:"]
                  + [f"  - {p}" for p in problems], error)

    def judge(self, run: Run, outs: dict[str, Poisoned], result: dict) -> bool:
        """Judge what a run gave back (its poisoned outputs and returned results); False once failed."""
        if not self.failed:
            problems = verdict(self.ex, run.case, outs, result, self.prepare(run).ref, run.inputs)
            if problems:
                self.fail_run(run, problems)
            elif not run.after_timing:
                self.passed += 1
        return not self.failed

    def judge_timing(self, timing: dict | None) -> bool:
        """Judge the timings (:func:`perf_verdict`); False once failed."""
        self.perf = timing
        if not self.failed:
            self.fail([f"{self.ex.id}: {p}" for p in perf_verdict(self.ex, timing or {})])
        return not self.failed

    def not_graded(self) -> list[str]:
        out = [f"case {s!r} needs a GPU" for s in self.skipped]
        if self.ex.needs_gpu(self.hidden) and not ON_GPU:
            out.append("performance: not graded under the interpreter (it is graded on a GPU)" if
                       self.ex.performance is not None else
                       "performance: the hidden check times on a GPU; not graded under the interpreter")
        return out

    def outcome(self) -> Outcome:
        ex = self.ex
        if self.failed:
            return Outcome(ex.id, False, list(self.failure), cases=self.passed, perf=self.perf, error=self.error)
        if self.unrated:
            return Outcome(ex.id, True, [f"{ex.id}: not graded here: {self.unrated}"], not_graded=[self.unrated])
        if self.values_only:
            later = self.not_graded()
            what = ("built with cargo; the crate's tests and the cases drawn fresh passed" if ex.toolchain == "cargo"
                    else "value accepted")
            return Outcome(ex.id, True, [f"✓ {ex.id}: {what}" + ("; not graded here: " + "; ".join(later)
                                                                  if later else "")], not_graded=later)
        out = Outcome(ex.id, True, cases=self.passed, not_graded=self.not_graded(), perf=self.perf)
        out.lines.append(summary_line(ex, out))
        return out


#: Seconds one case of a check may run in this process under the interpreter (``KERNELS_CASE_SECONDS``): the
#: largest case of any lesson takes a few seconds there; a kernel still running after this never ends.
CASE_SECONDS = float(os.environ.get("KERNELS_CASE_SECONDS", "180"))


#: What the message of a case stopped at :data:`CASE_SECONDS` says (``grader.score`` looks for it).
CASE_STOPPED = "in the interpreter and was stopped"


class CaseTooLong(Exception):
    """A case ran past :data:`CASE_SECONDS` in the interpreter: a loop that never ends, most likely."""


@contextlib.contextmanager
def _case_time_limit(seconds: float, interpreted: bool | None = None):
    """Interrupt the case after ``seconds`` where it runs in the interpreter (``interpreted``; by default, where
    this process interprets its kernels), whose Python loops an alarm stops; only in the main thread with no other
    SIGALRM handler, where Python lets signals in."""
    import signal
    import threading

    interpreted = INTERPRET if interpreted is None else interpreted
    if (not interpreted or seconds <= 0 or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None)):
        yield
        return

    def stop(signum, frame):
        raise CaseTooLong(f"the case ran for more than {seconds:g} s {CASE_STOPPED}: a loop that "
                          "never ends? (a while loop whose condition never changes, a range whose step is 0 or "
                          "negative); the largest case of a lesson takes a few seconds here")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _run_here(ex: Exercise, args: tuple, run: Run) -> tuple[dict, dict]:
    with _case_time_limit(CASE_SECONDS):
        outs, result = run_case(ex, args, run.case, run.inputs)
    outs = {k: Poisoned(p.buffer.cpu(), p.out.cpu(), p.guard) for k, p in outs.items()}
    result = {k: (v.detach().cpu() if isinstance(v, torch.Tensor) else v) for k, v in result.items()}
    return outs, result


def grade_local(ex: Exercise, args: tuple, hidden: bool) -> Outcome:
    """Every step of a check's :class:`Plan` in this process (the notebook's view). An error the student's code
    raises is a failed outcome naming the case (kept in ``Outcome.error``), never an exception out of here."""
    plan = Plan(ex, hidden)
    if not plan.check_values(_values(ex, args)) or plan.values_only:
        return plan.outcome()
    for run in plan.sequence():
        if run.after_timing:
            try:
                timing = time_performance(ex, args, plan.time_seed)
            except Exception as e:  # noqa: BLE001
                plan.fail([f"{ex.id}: at the timed size ({ex.performance.case.label}): " + _raised(e, ex)], e)
                break
            if not plan.judge_timing(timing):
                break
        try:
            outs, result = _run_here(ex, args, plan.prepare(run))
        except Exception as e:  # noqa: BLE001 (the student's kernel or function may raise anything)
            plan.fail_run(run, [_raised(e, ex)], e)
            break
        if not plan.judge(run, outs, result):
            break
    return plan.outcome()


def summary_line(ex: Exercise, out: Outcome) -> str:
    where = "on the GPU" if ON_GPU else "in the interpreter"
    line = f"✓ {ex.id}: {out.cases} case(s) passed {where}"
    if out.perf:
        p = out.perf
        line += (f"; {p['student_ms']:.4f} ms vs {ex.performance.baseline_name} {p['baseline_ms']:.4f} ms "
                 f"({p['baseline_ms'] / p['student_ms']:.2f}x; floor {p['floor_ms']:.4f} ms)")
    if out.not_graded:
        line += "; not graded here: " + "; ".join(out.not_graded)
    return line


def check(exercise_id: str, *objects, hidden: bool = False) -> None:
    """Grade the notebook's objects on ``exercise_id``: print a line on success, raise :class:`CheckFailed` (chained
    to the student's own error, if their code raised one) on failure. Returns nothing, so a graded cell shows only
    the printed line: nbgrader reads a cell's last value as its score and warns on anything else."""
    if os.environ.get(GRADING_ENV):
        print(f"({exercise_id}: judged by the grader, outside this notebook)")
        return
    ex = get(exercise_id)
    notes: list[str] = []
    args = resolve_live(ex, objects, hidden, notes)
    out = grade_local(ex, args, hidden)
    if not out.passed:
        raise CheckFailed(out.message) from out.error
    print(out.message + "".join(f"\n  note, from the code compiled for sm_90: {n}" for n in notes))
