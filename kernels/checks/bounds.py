"""Out-of-bounds loads and stores, found before they touch memory: a check's launches run in Triton's interpreter
with every access compared with the tensor it points into.

The interpreter reads and writes raw host memory: an unmasked store past the end of a tensor corrupts the heap and
kills the process ("double free or corruption", a segfault), and an unmasked load past the end reads whatever lies
there. :func:`run_checked` runs a check's ``run`` under the hooks of :mod:`kernels.viz.tracer`: every load, store
and atomic is mapped to the tensor argument its lanes point into, lanes outside that tensor are counted and masked
off before the access runs (so nothing outside the tensors is touched, and a kernel with no such lane computes
exactly what it would without the hooks), and the elements each tensor had loaded and stored are counted for an
exercise's traffic rule (:attr:`~kernels.checks.spec.Exercise.traffic`).

:func:`guard_launches` does the same for every launch a notebook makes itself (a "try it" cell, a widget, a
benchmark), so that a learner's out-of-bounds store stops with an :class:`OutOfBoundsError` naming it instead of
killing the notebook's kernel.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
import triton
import triton.runtime.interpreter as _interp

from ..viz import tracer as _tracer

__all__ = ["Stray", "Findings", "run_checked", "OutOfBoundsError", "UndefinedLanesWarning", "guard_launches",
           "bare_assertion", "explained", "root_cause"]

_SKIP = (os.path.dirname(triton.__file__), _tracer.__file__, __file__)
# not the learner's code: Triton, the course's package, torch, Python's own library
_LIBRARIES = (os.path.dirname(triton.__file__), os.path.dirname(os.path.dirname(__file__)),
              os.path.dirname(torch.__file__), os.path.dirname(os.__file__))
_KEEP = 1 << 20  # element offsets kept per stray kind, for counting distinct elements
_VERB = {"load": "reads", "store": "writes", "atomic": "updates"}


@dataclass
class Stray:
    """The out-of-bounds lanes of one kind of access (load, store, atomic) to one tensor, over a whole run."""

    kind: str
    tensor: str
    param: str
    numel: int
    shape: tuple
    stride: tuple
    lanes: int = 0
    offsets: list = field(default_factory=list)  # arrays of element offsets from the tensor's element 0
    kept: int = 0
    first: tuple = ()  # (program id, source line, element offset)

    def add(self, offs: np.ndarray, where) -> None:
        if not self.lanes:
            self.first = (*where, int(offs[0]))
        self.lanes += int(offs.size)
        if self.kept < _KEEP:
            self.offsets.append(offs[: _KEEP - self.kept])
            self.kept += min(offs.size, _KEEP - self.kept)

    def message(self) -> str:
        offs = np.unique(np.concatenate(self.offsets)) if self.offsets else np.empty(0, np.int64)
        top = sum((n - 1) * s for n, s in zip(self.shape, self.stride) if s > 0)
        low = sum((n - 1) * s for n, s in zip(self.shape, self.stride) if s < 0)
        after, before = int((offs > top).sum()), int((offs < low).sum())
        gaps = int(offs.size) - after - before
        verb = _VERB.get(self.kind, self.kind)
        name = f"`{self.tensor}`" + (f" ({self.param})" if self.param.removesuffix("_ptr") != self.tensor else "")
        parts = []
        if after:
            parts.append(f"{after} element(s) past the end of {name}")
        if before:
            parts.append(f"{before} element(s) before the start of {name}")
        if gaps:
            parts.append(f"{gaps} element(s) between the elements of {name} (a strided view: shape "
                         f"{tuple(self.shape)}, strides {tuple(self.stride)})")
        pid, src, off = self.first
        at = f"program {pid}" + (f", in `{src}`" if src else "")
        # an expanded view (stride 0 along a dimension) holds fewer elements than its shape says: a kernel that
        # assumes a unit last stride walks off its storage
        broadcast = [d for d, (n, st) in enumerate(zip(self.shape, self.stride)) if st == 0 and n > 1]
        held = "" if not broadcast else (
            f"; `{self.tensor}` is an expanded view, stride 0 along dimension {broadcast[0]} (shape "
            f"{tuple(self.shape)}, strides {tuple(self.stride)}), so its storage holds only {top + 1} elements: "
            "make it contiguous before launching a kernel that assumes a unit last stride")
        return (f"{self.tensor}: out of bounds: the kernel {verb} {' and '.join(parts)} (it has {self.numel}; the "
                f"first at element offset {off}, {at}); check that access's mask and strides" + held)


@dataclass
class Findings:
    """What a checked run found: the out-of-bounds accesses, and the elements loaded and stored per tensor."""

    strays: dict = field(default_factory=dict)  # (kind, tensor) -> Stray
    counts: dict = field(default_factory=dict)  # tensor -> {"load": n, "store": n, "atomic": n}
    launches: int = 0
    undefined: dict = field(default_factory=dict)  # source line of a load without other= -> lanes masked off
    nan_stored: bool = False  # a store wrote NaN

    def undefined_lines(self) -> list[str]:
        """Why a store wrote NaN although no input holds one: each load without ``other=`` that had lanes masked
        off (they read NaN in the interpreter's checks; compiled, whatever the register held). Empty where no store
        wrote NaN."""
        if not self.nan_stored:
            return []
        return [f"`{src}` loads {n} masked-off lane(s) without `other=`: their values are undefined (on a GPU, "
                "whatever the register held; here NaN), and they reached the output. Give the load an `other=` "
                "(0.0 for a sum or a dot), or keep those lanes out of what you store"
                for src, n in list(self.undefined.items())[:3]]

    def problems(self) -> list[str]:
        """One line per tensor and kind of access that went out of bounds, stores first."""
        order = {"store": 0, "atomic": 1, "load": 2}
        return [s.message() for s in sorted(self.strays.values(), key=lambda s: (order.get(s.kind, 3), s.tensor))]

    def loaded(self, tensor: str) -> int:
        return self.counts.get(tensor, {}).get("load", 0)

    def stored(self, tensor: str) -> int:
        return self.counts.get(tensor, {}).get("store", 0)


def _where() -> str:
    """The source line of the kernel making the current access (the line number would be the rebuilt module's,
    not the notebook cell's, so only the text is shown)."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_SKIP):
        f = f.f_back
    return linecache.getline(f.f_code.co_filename, f.f_lineno).strip() if f is not None else ""


class _Bounds(_tracer._Recorder):
    """The tracer's recorder without the per-access records: out-of-bounds lanes and per-tensor counts only."""

    def __init__(self, names: dict[int, str]):
        super().__init__(None)
        self.names = names
        self.found = Findings()

    def grid(self, nx, ny, nz):
        super().grid(nx, ny, nz)
        self.found.launches += 1
        self.labels = [self.names.get(info.source_ptr, info.name.removesuffix("_ptr")) for info in self.regions]

    def access(self, kind: str, ptrs, mask) -> np.ndarray:
        addr = np.asarray(ptrs.data).astype(np.uint64)
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addr.shape) if mask is not None \
            else np.ones(addr.shape, dtype=bool)
        if not self.regions:
            return active
        flat_a, flat_m = addr.reshape(-1), active.reshape(-1)
        hits = []
        for info in self.regions:
            hit = (flat_a >= np.uint64(info.lo)) & (flat_a < np.uint64(info.hi))
            off = flat_a.astype(np.int64) - np.int64(info.base)
            hit &= off % info.itemsize == 0
            if info.lookup is not None and hit.any():
                idx = np.full(flat_a.shape, -1, dtype=np.int64)
                idx[hit] = info.lookup[(flat_a[hit] - np.uint64(info.lo)).astype(np.int64) // info.itemsize]
                hit &= idx >= 0
            hits.append(hit)
        owner = self._owner(hits, flat_m, flat_a, kind)
        info, ok = self.regions[owner], hits[owner]
        inside = flat_m & ok
        label = self.labels[owner]
        counts = self.found.counts.setdefault(label, {"load": 0, "store": 0, "atomic": 0})
        counts[kind] = counts.get(kind, 0) + int(inside.sum())
        out = flat_m & ~ok
        if out.any():
            key = (kind, label)
            stray = self.found.strays.get(key)
            if stray is None:
                stray = self.found.strays[key] = Stray(kind, label, info.name, info.numel, info.shape, info.stride)
            offs = (flat_a[out].astype(np.int64) - np.int64(info.base)) // info.itemsize
            stray.add(offs, (self.pid, _where() if not stray.lanes else ""))
        return inside.reshape(addr.shape)

    def stored_nan(self) -> None:
        self.found.nan_stored = True

    def undefined(self, lanes: int) -> None:
        src = _where()
        self.found.undefined[src] = self.found.undefined.get(src, 0) + lanes

    def _owner(self, hits, active, addr, kind) -> int:
        """The tensor whose pointer parameter starts the access's pointer expression in the source line
        (``tl.load(x_ptr + ...)``, the line's only access of its kind: lanes of it that land in another tensor are
        still outside x); else the tensor most active lanes point into, else the one nearest to the lanes'
        addresses."""
        call = rf"\b{'load' if kind == 'load' else 'store' if kind == 'store' else 'atomic_[a-z]+'}\(\s*"
        line = _where()
        m = re.search(call + r"([A-Za-z_]\w*)", line)
        if m and len(re.findall(call, line)) == 1:  # a line of two loads names two pointers: the lanes decide
            named = [i for i, r in enumerate(self.regions) if m.group(1).startswith(r.name.removesuffix("_ptr"))]
            if len(named) == 1:
                return named[0]
        counts = [int((h & active).sum()) for h in hits]
        if max(counts):
            return int(np.argmax(counts))
        lanes = addr[active] if active.any() else addr
        lo, hi = int(lanes.min()), int(lanes.max())
        gap = [max(r.lo - hi, lo - r.hi + 1, 0) for r in self.regions]
        return int(np.argmin(gap))


def run_checked(fn, names: dict[int, str] | None = None):
    """``fn()`` (which launches kernels) under the interpreter with every access bounds-checked.

    ``names`` maps a tensor's ``data_ptr()`` to the name messages use (the exercise's ``q``, ``o``...); tensors not
    in it are named after the kernel parameter (``c_ptr`` → ``c``). Returns ``(fn's result, Findings)``. Errors the
    kernel raises inside the interpreter come out as themselves, not wrapped in Triton's ``InterpreterError``.
    """
    rec = _Bounds(names or {})
    with _tracer._hooks(rec):
        try:
            result = fn()
        except _interp.InterpreterError as e:
            cause = e.__cause__
            if isinstance(cause, Exception):
                failed = bare_assertion(cause)
                if failed:
                    frames = [f for f in traceback.extract_tb(cause.__traceback__) if not f.filename.startswith(_SKIP)]
                    at = f" in `{frames[-1].line.strip()}`" if frames and frames[-1].line else ""
                    raise AssertionError(f"Triton's `{failed}` failed{at}") from None
                raise cause from None
            raise
    return result, rec.found


def bare_assertion(e: BaseException) -> str | None:
    """The failed ``assert`` statement of an AssertionError that Triton raised without a message (its frontend checks
    some operands so: a ``tl.dot`` accumulator in fp16, say), for a message that says what was asserted; else
    None."""
    if not isinstance(e, AssertionError) or str(e).strip():
        return None
    frames = traceback.extract_tb(e.__traceback__)
    if not frames or not frames[-1].filename.startswith(_SKIP[0]):
        return None
    line = (frames[-1].line or "").strip()
    return line if line.startswith("assert") else None


def root_cause(e: BaseException) -> BaseException:
    """The error at the bottom of ``e``'s chain of causes and contexts (``e`` itself where there is none)."""
    root, seen = e, {id(e)}
    while (below := root.__cause__ or root.__context__) is not None and id(below) not in seen:
        seen.add(id(below))
        root = below
    return root


def explained(e: BaseException) -> str:
    """``str(e)``, and why, where only the error's root cause says it: compiled for a GPU, a ``CompilationError``
    shows the learner's line and a caret, and the reason is the error it was raised from (``tl.zeros([K, BV])`` with a
    runtime ``K``: a TypeError naming the shape element), or a bare ``assert`` of Triton's, named by its statement."""
    text = str(e).strip()
    root = root_cause(e)
    failed = bare_assertion(root)
    if failed and failed not in text:
        text += ("\n" if text else "") + f"Triton's `{failed}` failed"
    elif root is not e and (why := str(root).strip()) and why.splitlines()[0] not in text:
        text += ("\n" if text else "") + f"{type(root).__name__}: {why}"
    return text


def compile_reason(text: str) -> str | None:
    """A compile error's reason and the line it marks, from Triton's "at 5:8:", the source, a caret under the
    column and the reason: ``"reason at `line`"``; None where ``text`` has no caret."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    caret = next((i for i, ln in enumerate(lines) if ln.strip() == "^"), None)
    if not caret:
        return None
    return f"{' '.join(ln.strip() for ln in lines[caret + 1:])} at `{lines[caret - 1].strip()}`"


def describe_error(e: BaseException) -> str:
    """An error a lesson's try-it cell caught, in one line a learner can act on: Triton's ``InterpreterError``
    unwrapped to the error inside it, its first line (the reason, for a compile error, with the line its caret
    marks), and the line of the learner's own code it was raised at."""
    inner = e.__cause__ if isinstance(e, _interp.InterpreterError) and isinstance(e.__cause__, Exception) else e
    lines = [ln for ln in explained(inner).splitlines() if ln.strip()]
    text = lines[0].strip() if lines else ""
    caret = compile_reason("\n".join(lines))
    if caret:
        text = caret
    mine = [f for f in traceback.extract_tb(inner.__traceback__)
            if not f.filename.startswith(_LIBRARIES) and f.line]
    where = f" (line {mine[-1].lineno}: `{mine[-1].line.strip()}`)" if mine and not caret else ""
    hint = ""
    if "for @" in text or "MatMult" in text:  # numpy's product operator, which tiles do not have
        hint = "; tiles have no `@`: multiply them with tl.dot(a, b), the running sum its third argument"
    return f"{type(inner).__name__}" + (f": {text}" if text else "") + where + hint


class UndefinedLanesWarning(UserWarning):
    """A launch under :func:`guard_launches` stored NaN after a load without ``other=`` left lanes masked off
    (they read NaN under the guard; compiled, whatever the register held)."""


class OutOfBoundsError(RuntimeError):
    """A launch under :func:`guard_launches` reached memory outside its tensor arguments (those lanes did not run)."""


_ORIGINAL_RUN: list = []  # InterpretedFunction.run before guard_launches replaced it


def _guarded_run(self, *args, **kwargs):
    if _tracer.recording() or kwargs.get("warmup"):  # a check's or a trace's recorder sees this launch already
        return _ORIGINAL_RUN[0](self, *args, **kwargs)
    rec = _Bounds({})
    with _tracer._hooks(rec):
        result = _ORIGINAL_RUN[0](self, *args, **kwargs)
    name = getattr(getattr(self, "fn", None), "__name__", "the kernel")
    if rec.found.strays:
        first, *more = rec.found.problems()  # the first line says what and where, for a cell that prints only it
        raise OutOfBoundsError("\n".join([f"{name}: {first}", *(f"- {line}" for line in more),
                                           "Those lanes were switched off, so nothing outside the tensors was "
                                           "touched; on a GPU such an access is an illegal address, or silently "
                                           "reads or overwrites other data."]))
    for line in rec.found.undefined_lines():  # a NaN the learner would otherwise have to trace back alone
        warnings.warn(f"{name}: {line}", UndefinedLanesWarning, stacklevel=2)
    return result


def guard_launches(on: bool = True) -> bool:
    """Bounds-check every kernel launch of this process under Triton's interpreter, as :func:`run_checked` does a
    check's: a load or store outside the launch's tensor arguments is switched off before it touches memory, and
    the launch then raises :class:`OutOfBoundsError` naming the tensor, the kind of access and the first program
    and source line. A launch without such an access computes what it would unguarded (a little slower), except
    that the masked-off lanes of a float load without ``other=`` read NaN, as in the checks; where a store then
    writes NaN, an :class:`UndefinedLanesWarning` names the load.

    The interpreter reads and writes raw host memory, so without this a masked-too-little store corrupts the heap
    and kills the notebook's kernel. Each lesson's setup cell calls it. ``on=False`` removes the guard. Compiled
    for a GPU there is nothing to hook (``compute-sanitizer`` finds such accesses there): returns False."""
    from ..device import INTERPRET

    if not INTERPRET:
        return False
    cls = _interp.InterpretedFunction
    if on and not _ORIGINAL_RUN:
        _ORIGINAL_RUN.append(cls.run)
        cls.run = _guarded_run
    elif not on and _ORIGINAL_RUN:
        cls.run = _ORIGINAL_RUN.pop()
    return on
