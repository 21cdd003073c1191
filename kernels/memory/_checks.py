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
