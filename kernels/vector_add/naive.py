"""Naive vector add: one program per BLOCK_SIZE elements, a mask for the tail.

Every element is read once and written once, so the kernel moves 3·n·itemsize bytes and does n additions: it is
bound by HBM bandwidth at any size that fills the GPU. The additions happen in fp32 and the sum is stored in the
inputs' dtype. Its limit is the one every elementwise kernel shares: one byte of arithmetic per many bytes moved.
"""

import torch
import triton
import triton.language as tl

from ..validate import check_power_of_two, check_same, check_tensor

__all__ = ["naive_vector_add", "bytes_moved"]


@triton.jit
def _naive_vector_add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)  # [BLOCK_SIZE]
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    out = x.to(tl.float32) + y.to(tl.float32)
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def bytes_moved(n: int, itemsize: int = 4) -> int:
    """HBM bytes: read x and y, write out."""
    return 3 * n * itemsize


def naive_vector_add(x: torch.Tensor, y: torch.Tensor, *, block_size: int = 1024,
                     out: torch.Tensor | None = None) -> torch.Tensor:
    """``x + y`` for two contiguous tensors of one shape and float dtype; ``out`` may be given (same shape)."""
    check_tensor("x", x, contiguous=True)
    check_tensor("y", y, contiguous=True)
    check_same("dtype", x=x, y=y)
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape; got {tuple(x.shape)} and {tuple(y.shape)}")
    check_power_of_two("block_size", block_size, lo=16, hi=2**16)
    n = x.numel()
    if n > 2**31 - 1 - block_size:
        raise ValueError(f"x has {n} elements; the kernel indexes with int32, so at most 2**31 - 1 - block_size")
    if out is None:
        out = torch.empty_like(x)
    else:
        check_tensor("out", out, contiguous=True)
        check_same("dtype", x=x, out=out)
        if out.shape != x.shape:
            raise ValueError(f"out must have shape {tuple(x.shape)}, got {tuple(out.shape)}")
    if n == 0:
        return out
    grid = (triton.cdiv(n, block_size),)
    _naive_vector_add_kernel[grid](x, y, out, n, BLOCK_SIZE=block_size)
    return out
