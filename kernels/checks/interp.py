"""Triton 3.6's interpreter gets bf16 wrong; the check engine computes bf16 as a GPU does while it grades.

The interpreter keeps a bf16 block as its raw bits in a ``uint16`` numpy array, and most operations then work on
the bits as integers: ``x + y`` adds bit patterns (values near 3e38 come out), ``tl.dot`` multiplies them
(relative error ~1e10), ``tl.sum`` and ``tl.cumsum`` add them, comparisons compare them (and their result then breaks
a cast), an fp32 → bf16 cast truncates where a GPU rounds to nearest even, and a Python number meeting a bf16 block
(``x * 0.5``) raises, for want of a bf16 constant. Loads, stores, ``tl.where`` and the bf16 → fp32 cast are right.

:func:`bf16_fixed` patches exactly those operations, for the duration of a check, to compute in fp32 and round the
result to bf16 (round to nearest even), which is what the GPU's bf16 arithmetic gives. Nothing else changes, and
nothing outside the ``with`` block. ``tests/checks/test_interpreter_faults.py`` pins every fault on the unpatched
interpreter: a Triton release that fixes one fails that test, and the patch for it can go.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import triton.language as tl
import triton.runtime.interpreter as _interp

__all__ = ["bf16_fixed", "to_f32", "to_bf16", "FAULTS"]

#: The interpreter's known bf16 faults, by the builder operation (or reduction) that has them.
FAULTS = {
    "arithmetic": "x + y, x * y, x - y, x / y, min/max, fma and unary math on bf16 work on the bits as integers",
    "compare": "bf16 comparisons compare bit patterns, and label the result bf16: casting it then fails",
    "dot": "tl.dot of bf16 blocks multiplies bit patterns",
    "reduce": "tl.sum, tl.max, tl.min, tl.cumsum of bf16 reduce bit patterns",
    "cast": "fp32 -> bf16 truncates instead of rounding to nearest even",
    "constant": "a Python number meeting a bf16 block (x * 0.5) raises: the builder has no get_bf16",
}

_BINARY = ("create_fadd", "create_fsub", "create_fmul", "create_fdiv", "create_precise_divf", "create_frem",
           "create_minimumf", "create_minnumf", "create_maximumf", "create_maxnumf",
           "create_fcmpOLT", "create_fcmpOGT", "create_fcmpOLE", "create_fcmpOGE", "create_fcmpOEQ", "create_fcmpONE",
           "create_fcmpULT", "create_fcmpUGT", "create_fcmpULE", "create_fcmpUGE", "create_fcmpUEQ", "create_fcmpUNE")
_UNARY = ("create_cos", "create_exp", "create_exp2", "create_floor", "create_ceil", "create_log", "create_log2",
          "create_precise_sqrt", "create_sqrt", "create_sin", "create_rsqrt", "create_erf")
_OTHER = ("create_clampf", "create_fma", "create_dot", "cast_impl", "get_bf16")


def to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (``uint16``) as float32 values (exact)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def to_bf16(values) -> np.ndarray:
    """float32 values rounded to the nearest bf16 (ties to even), as bit patterns (``uint16``); NaN stays NaN."""
    f = np.array(values, dtype=np.float32)  # a copy, contiguous, keeping a 0-d shape
    u = f.view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = ((u >> 16) & np.uint32(0x8000)).astype(np.uint16) | np.uint16(0x7FC0)
    return np.where(np.isnan(f), nan, rounded)


def _bf16(h) -> bool:
    return getattr(h.dtype, "scalar", h.dtype) == tl.bfloat16


def _f32(h):
    return _interp.TensorHandle(to_f32(h.data), tl.float32) if _bf16(h) else h


def _back(out):
    """A result computed in fp32 as a bf16 handle; a comparison's bools as an int1 handle."""
    if out.data.dtype == np.bool_:
        return _interp.TensorHandle(out.data, tl.int1)
    return _interp.TensorHandle(to_bf16(out.data), tl.bfloat16)


def _binary(orig):
    def op(lhs, rhs):
        if not (_bf16(lhs) or _bf16(rhs)):
            return orig(lhs, rhs)
        return _back(orig(_f32(lhs), _f32(rhs)))
    return op


def _unary(orig):
    def op(arg):
        return _back(orig(_f32(arg))) if _bf16(arg) else orig(arg)
    return op


def _clamp(orig):
    def op(arg, lo, hi, propagate_nans):
        if not _bf16(arg):
            return orig(arg, lo, hi, propagate_nans)
        return _back(orig(_f32(arg), _f32(lo), _f32(hi), propagate_nans))
    return op


def _fma(orig):
    def op(x, y, z):
        if not (_bf16(x) or _bf16(y) or _bf16(z)):
            return orig(x, y, z)
        out = orig(_f32(x), _f32(y), _f32(z))
        return _back(out) if _bf16(z) else out
    return op


def _dot(orig):
    def op(a, b, d, input_precision, max_num_imprecise_acc):
        if not (_bf16(a) or _bf16(b) or _bf16(d)):
            return orig(a, b, d, input_precision, max_num_imprecise_acc)
        out = orig(_f32(a), _f32(b), _f32(d), input_precision, max_num_imprecise_acc)
        return _back(out) if _bf16(d) else out
    return op


def _cast(orig):
    def op(src, dst_type):
        src_bf16, dst_bf16 = _bf16(src), dst_type.scalar == tl.bfloat16
        if src_bf16 == dst_bf16:
            return orig(src, dst_type)
        if src_bf16:
            f = _f32(src)
            return f if dst_type.scalar == tl.float32 else orig(f, dst_type)
        return _interp.TensorHandle(to_bf16(src.data.astype(np.float32)), tl.bfloat16)
    return op


def _bf16_constant(orig):
    def op(value):
        return _interp.TensorHandle(to_bf16(np.array([value], dtype=np.float32)), tl.bfloat16)
    return op


def _reduce_sum(orig):
    def op(self, input):
        if input.dtype.scalar != tl.bfloat16:
            return orig(self, input)
        total = np.sum(to_f32(input.handle.data), axis=self.axis, keepdims=self.keep_dims)
        return self.to_tensor(to_bf16(total), input.dtype)
    return op


def _reduce_min_max(orig):
    def op(self, input, val_reduce_op, idx_reduce_op=None):
        data = input[0] if isinstance(input, tuple) else input
        if data.dtype.scalar != tl.bfloat16:
            return orig(self, input, val_reduce_op, idx_reduce_op)
        f = to_f32(data.handle.data)
        val = idx = None
        if val_reduce_op:
            val = self.to_tensor(to_bf16(val_reduce_op(f, axis=self.axis, keepdims=self.keep_dims)), data.dtype)
        if idx_reduce_op:
            idx = self.to_tensor(idx_reduce_op(f, axis=self.axis, keepdims=self.keep_dims), tl.int32)
        if val is not None and idx is not None:
            return val, idx
        return val if val is not None else idx
    return op


def _scan(numpy_op):
    def wrap(orig):
        def op(self, input):
            if input.dtype.scalar != tl.bfloat16:
                return orig(self, input)
            out = numpy_op(to_f32(input.handle.data), axis=self.axis)
            return [self.to_tensor(to_bf16(out), input.dtype)]
        return op
    return wrap


@contextmanager
def bf16_fixed():
    """Inside the block, the interpreter computes bf16 in fp32 and rounds to bf16 (see the module docstring)."""
    b = _interp.interpreter_builder
    names = _BINARY + _UNARY + _OTHER
    saved = {n: b.__dict__.get(n) for n in names}
    classes = [(_interp.ReduceOps, "sum", _reduce_sum), (_interp.ReduceOps, "min_max", _reduce_min_max),
               (_interp.ScanOps, "cumsum", _scan(np.cumsum)), (_interp.ScanOps, "cumprod", _scan(np.cumprod))]
    saved_cls = [(cls, name, cls.__dict__[name]) for cls, name, _ in classes]
    wrap = {**dict.fromkeys(_BINARY, _binary), **dict.fromkeys(_UNARY, _unary), "create_clampf": _clamp,
            "create_fma": _fma, "create_dot": _dot, "cast_impl": _cast, "get_bf16": _bf16_constant}
    for n in names:
        setattr(b, n, wrap[n](getattr(b, n, None)))
    for cls, name, fix in classes:
        setattr(cls, name, fix(cls.__dict__[name]))
    try:
        yield
    finally:
        for n, v in saved.items():
            if v is None:
                b.__dict__.pop(n, None)
            else:
                setattr(b, n, v)
        for cls, name, v in saved_cls:
            setattr(cls, name, v)
