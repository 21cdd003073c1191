"""Inputs, poisoned outputs and tolerances shared by the tests, the lessons' checks and the benchmarks.

Every check follows one recipe: fresh random inputs (seeded per test, never zeros), outputs allocated full of NaN
with NaN guard bands on either side (a NaN of their own bit pattern: see :func:`guard_filled`), a float64
reference, and a relative error ``‖out − ref‖ / ‖ref‖`` compared with a tolerance that depends on the dtype the
kernel computes in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .device import DEVICE

__all__ = [
    "TOLERANCE",
    "tolerance",
    "precision_of",
    "generator",
    "randn",
    "Poisoned",
    "poisoned",
    "poison_value",
    "guard_filled",
    "guard_changed",
    "repoison",
    "rel_error",
    "assert_close",
    "check_bad_input",
]

#: Relative-error tolerances by the precision a kernel computes in. ``tf32`` is Triton's default for an fp32
#: ``tl.dot`` on a GPU (10-bit mantissa inputs, fp32 accumulate); ``ieee`` is full fp32.
TOLERANCE: dict[str, float] = {
    "ieee": 1e-5,
    "tf32": 2e-3,
    "fp16": 5e-3,
    "bf16": 3e-2,
}

_NAMES = {torch.float32: "ieee", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "ieee"}


def precision_of(dtype: torch.dtype) -> str:
    """The :data:`TOLERANCE` key of a kernel whose inputs are ``dtype`` (``"ieee"`` for fp32, fp64 and others)."""
    return _NAMES.get(dtype, "ieee")


def tolerance(dtype: torch.dtype, *, tf32: bool = False) -> float:
    """The tolerance for a kernel whose inputs are ``dtype`` (``tf32=True``: its fp32 dots use TF32)."""
    if dtype == torch.float32 and tf32:
        return TOLERANCE["tf32"]
    try:
        return TOLERANCE[_NAMES[dtype]]
    except KeyError:
        raise TypeError(f"no tolerance for dtype {dtype}") from None


def generator(seed: int) -> torch.Generator:
    """A CPU generator: the same seed draws the same numbers on every machine."""
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, dtype=torch.float32, seed: int | None = None, gen: torch.Generator | None = None,
          scale: float = 1.0, device=None) -> torch.Tensor:
    """Normal random numbers drawn on the CPU (reproducible anywhere), then moved to ``device``."""
    if gen is None:
        gen = generator(seed) if seed is not None else None
    x = torch.randn(*shape, generator=gen, dtype=torch.float32) * scale
    return x.to(device=DEVICE if device is None else device, dtype=dtype)


# The poison: a NaN with a payload of its own per float dtype (quiet bit set). NaN that a kernel computes, or loads
# from NaN-padded inputs and stores, has other bits, so a stray store into a guard band shows even when the value
# it stores is NaN.
_GUARD_BITS = {torch.float64: (torch.int64, 0x7FFDA5A5A5A5A5A5), torch.float32: (torch.int32, 0x7FE5A5A5),
               torch.float16: (torch.int16, 0x7E5A), torch.bfloat16: (torch.int16, 0x7FDA)}


def poison_value(dtype: torch.dtype):
    """The plain poison of ``dtype``: NaN for floats (the inputs' padding), True for bool, the smallest integer."""
    if dtype.is_floating_point:
        return float("nan")
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).min


def guard_filled(n: int, dtype: torch.dtype, device=None) -> torch.Tensor:
    """``n`` elements of ``dtype`` holding the guard poison, written once: the NaN above for the float dtypes that
    have one (bit for bit), otherwise :func:`poison_value`. Made by ``torch.full``, not ``torch.empty``, so tests
    that stand poisoned buffers in for ``torch.empty`` do not recurse."""
    device = DEVICE if device is None else device
    if dtype in _GUARD_BITS:
        view, bits = _GUARD_BITS[dtype]
        return torch.full((n,), bits, dtype=view, device=device).view(dtype)
    return torch.full((n,), poison_value(dtype), dtype=dtype, device=device)


def guard_changed(t: torch.Tensor) -> torch.Tensor:
    """Where ``t`` (made by :func:`guard_filled`) no longer holds the poison, compared bit for bit."""
    if t.dtype in _GUARD_BITS:
        view, bits = _GUARD_BITS[t.dtype]
        return t.view(view) != bits
    if t.dtype.is_floating_point:
        return ~torch.isnan(t)
    return t != poison_value(t.dtype)


@dataclass
class Poisoned:
    """An output tensor that lives inside a larger buffer made by :func:`guard_filled`.

    ``out`` is what a kernel writes; the ``guard`` elements before and after it keep the poison's exact bits
    unless the kernel writes out of bounds (even a NaN), and every element of ``out`` stays NaN unless the kernel
    writes it.
    """

    buffer: torch.Tensor
    out: torch.Tensor
    guard: int

    def unwritten(self) -> int:
        """How many elements of ``out`` still hold the poison."""
        return int(torch.isnan(self.out).sum()) if self.out.is_floating_point() else 0

    def stray_writes(self) -> tuple[int, int]:
        """How many guard elements before and after ``out`` no longer hold the poison."""
        head, tail = self.buffer[: self.guard], self.buffer[self.buffer.numel() - self.guard:]
        return int(guard_changed(head).sum()), int(guard_changed(tail).sum())

    def guards_intact(self) -> bool:
        return self.stray_writes() == (0, 0)

    def check(self, name: str = "output") -> None:
        """Raise if the kernel left elements unwritten or wrote into a guard band."""
        if not self.guards_intact():
            raise AssertionError(f"{name}: the kernel wrote out of bounds (into the guard band around the output)")
        missing = self.unwritten()
        if missing:
            raise AssertionError(f"{name}: {missing} of {self.out.numel()} elements were never written (still NaN)")


def poisoned(*shape: int, dtype=torch.float32, guard: int = 64, device=None) -> Poisoned:
    """A contiguous NaN-filled output of ``shape`` with ``guard`` poisoned elements on each side."""
    n = math.prod(shape)
    buf = guard_filled(n + 2 * guard, dtype, device)
    return Poisoned(buf, buf[guard: guard + n].view(shape), guard)


def repoison(p: Poisoned) -> None:
    """Fill ``p.out`` with the poison again (its guard bands keep whatever they hold): the output is as a fresh
    :func:`poisoned` allocation left it, so a kernel run on it cannot tell it from a fresh call."""
    if p.out.dtype in _GUARD_BITS:
        view, bits = _GUARD_BITS[p.out.dtype]
        p.out.view(view).fill_(bits)
    else:
        p.out.fill_(poison_value(p.out.dtype))


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``‖out − ref‖ / ‖ref‖`` in float64; NaN anywhere in ``out`` gives ``inf``."""
    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    if o.shape != r.shape:
        raise AssertionError(f"shape {tuple(o.shape)} does not match the reference's {tuple(r.shape)}")
    if not torch.isfinite(o).all():
        return math.inf
    denom = r.norm().item()
    num = (o - r).norm().item()
    return num / denom if denom > 0 else num


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, tol: float) -> float:
    """Fail with an actionable message if ``out`` is not within relative error ``tol`` of ``ref``."""
    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    if o.shape != r.shape:
        raise AssertionError(f"{name}: shape {tuple(o.shape)} does not match the reference's {tuple(r.shape)}")
    bad = ~torch.isfinite(o)
    if bad.any():
        first = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(f"{name}: {int(bad.sum())} of {o.numel()} elements are NaN/inf (first at {first}); "
                             "unwritten output or an overflow")
    err = rel_error(o, r)
    if not err <= tol:
        diff = (o - r).abs()
        idx = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
        raise AssertionError(f"{name}: relative error {err:.3e} > tolerance {tol:.1e} (ratio {err / tol:.2f}); "
                             f"largest difference {diff.max().item():.3e} at {idx}: "
                             f"got {o[idx].item():.6g}, expected {r[idx].item():.6g}")
    return err


def check_bad_input(fn, *args, match: str, **kwargs) -> None:
    """Assert that ``fn(*args, **kwargs)`` raises ``ValueError``/``TypeError`` whose message contains ``match``."""
    try:
        fn(*args, **kwargs)
    except (ValueError, TypeError) as e:
        if match.lower() not in str(e).lower():
            raise AssertionError(f"error message {str(e)!r} does not mention {match!r}") from e
        return
    raise AssertionError(f"expected an error mentioning {match!r}; the call succeeded")
