"""Input checks shared by the memory kernels."""

import torch

from ..validate import check_power_of_two, check_tensor

_INT32_LIMIT = 2**31 - 1


def check_vector(name: str, x: torch.Tensor, block_size: int) -> int:
    """A contiguous float tensor the kernels treat as flat; returns its element count."""
    check_tensor(name, x, contiguous=True)
    check_power_of_two("block_size", block_size, lo=16, hi=2**16)
    n = x.numel()
    if n == 0:
        raise ValueError(f"{name} is empty; the memory kernels need at least one element")
    if n > _INT32_LIMIT - 2 * block_size:
        raise ValueError(f"{name} has {n} elements; the kernels index with int32, so at most "
                         f"{_INT32_LIMIT - 2 * block_size} at block_size={block_size}")
    return n


def check_count(name: str, value: int, *, lo: int = 1, hi: int = _INT32_LIMIT) -> int:
    """A positive integer parameter such as a stride or a reuse count."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name}={value} must lie in [{lo}, {hi}]")
    return value


def output(out: torch.Tensor | None, shape: tuple, like: torch.Tensor) -> torch.Tensor:
    """``out`` checked against the kernel's output shape and ``like``'s dtype and device, or a new tensor."""
    if out is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    check_tensor("out", out, dtypes=(like.dtype,), contiguous=True)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out must have shape {tuple(shape)}, got {tuple(out.shape)}")
    return out
