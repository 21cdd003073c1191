"""Input checks for kernel wrappers: a clear error that names the problem, before anything is launched."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .device import DEVICE

__all__ = ["FLOAT_DTYPES", "check_tensor", "check_same", "check_power_of_two"]

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_tensor(name: str, t, *, dtypes: Sequence[torch.dtype] = FLOAT_DTYPES, ndim: int | None = None,
                 unit_stride_last: bool = True, contiguous: bool = False) -> torch.Tensor:
    """Check one kernel input: a tensor, on the kernel device, of an allowed dtype and rank and stride."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != DEVICE.type:
        hint = "the Triton interpreter runs on CPU tensors" if DEVICE.type == "cpu" else "move it with .cuda()"
        raise ValueError(f"{name} is on {t.device}, but kernels run on {DEVICE} ({hint})")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} has dtype {t.dtype}; supported: {', '.join(str(d) for d in dtypes)}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (strides {t.stride()}); call .contiguous() first")
    if unit_stride_last and t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must have unit stride in its last dimension (strides {t.stride()})")
    return t


def check_same(what: str, **tensors: torch.Tensor) -> None:
    """All ``tensors`` share a dtype (``what == "dtype"``) or a device (``what == "device"``)."""
    vals = {k: getattr(v, what) for k, v in tensors.items()}
    if len(set(vals.values())) > 1:
        listed = ", ".join(f"{k}: {v}" for k, v in vals.items())
        raise TypeError(f"inputs must share one {what}; got {listed}") if what == "dtype" else ValueError(
            f"inputs must share one {what}; got {listed}")


def check_power_of_two(name: str, value: int, *, lo: int = 1, hi: int | None = None) -> None:
    """A block size (a Triton constexpr shape) must be a power of two within limits."""
    if value < lo or value & (value - 1):
        raise ValueError(f"{name}={value} must be a power of two >= {lo}")
    if hi is not None and value > hi:
        raise ValueError(f"{name}={value} exceeds the limit {hi}")
