"""Input checks shared by the matmul kernels."""

import torch

from ..validate import check_power_of_two, check_same, check_tensor

PRECISIONS = ("tf32", "ieee")


def check_inputs(a: torch.Tensor, b: torch.Tensor, input_precision: str | None) -> tuple[int, int, int, str]:
    """``a [M, K]`` and ``b [K, N]`` of one float dtype on the kernel device; returns ``(M, N, K, precision)``."""
    check_tensor("a", a, ndim=2, unit_stride_last=False)
    check_tensor("b", b, ndim=2, unit_stride_last=False)
    check_same("dtype", a=a, b=b)
    M, K = a.shape
    K2, N = b.shape
    if K != K2:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)} (a [M, K] @ b [K, N])")
    if min(M, N, K) < 1:
        raise ValueError(f"every dimension must be at least 1; got a {tuple(a.shape)}, b {tuple(b.shape)}")
    for name, t in (("a", a), ("b", b)):
        if max(t.stride()) * max(t.shape) >= 2**31:
            raise ValueError(f"{name} spans more than 2**31 elements; the kernels index with int32")
    if input_precision is None:
        input_precision = "tf32" if a.dtype == torch.float32 else "ieee"
    if input_precision not in PRECISIONS:
        raise ValueError(f"input_precision={input_precision!r}; expected one of {PRECISIONS}")
    return M, N, K, input_precision


def output(out: torch.Tensor | None, M: int, N: int, like: torch.Tensor) -> torch.Tensor:
    """``out`` checked to be ``[M, N]`` of ``like``'s dtype (any strides), or a new tensor."""
    if out is None:
        return torch.empty(M, N, dtype=like.dtype, device=like.device)
    check_tensor("out", out, dtypes=(like.dtype,), ndim=2, unit_stride_last=False)
    if tuple(out.shape) != (M, N):
        raise ValueError(f"out must have shape {(M, N)}, got {tuple(out.shape)}")
    return out


def check_blocks(**blocks: int) -> None:
    for name, value in blocks.items():
        check_power_of_two(name, value, lo=16, hi=256)
