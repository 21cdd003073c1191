"""HBM copy: the bandwidth ceiling every other memory kernel is measured against.

Each program copies BLOCK_SIZE contiguous elements. From ``pid·BLOCK_SIZE + arange`` and the 16-byte alignment of
the pointers (Triton specialises on it) the compiler proves each thread's elements contiguous and emits 16-byte
vector loads and stores; neighbouring threads touch neighbouring addresses, so every warp request covers whole
32-byte sectors (coalesced). A mask ``offs < n`` would undo the vectors whenever ``n`` is not a multiple of 16,
so full blocks take an unmasked path and only the last block is masked. It moves ``2·n·itemsize`` bytes.
"""

import torch
import triton
import triton.language as tl

from ._checks import check_vector, output

__all__ = ["copy_memory", "bytes_moved"]


@triton.jit
def _copy_memory_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)  # [BLOCK_SIZE]
    if (pid + 1) * BLOCK_SIZE <= n_elements:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))
    else:
        mask = offs < n_elements
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def bytes_moved(n: int, itemsize: int = 4) -> int:
    """HBM bytes: read n elements, write n elements."""
    return 2 * n * itemsize


def copy_memory(x: torch.Tensor, *, block_size: int = 4096, num_warps: int = 8,
                out: torch.Tensor | None = None) -> torch.Tensor:
    """A copy of the contiguous float tensor ``x`` (into ``out`` if given)."""
    n = check_vector("x", x, block_size)
    out = output(out, x.shape, x)
    _copy_memory_kernel[(triton.cdiv(n, block_size),)](x, out, n, BLOCK_SIZE=block_size, num_warps=num_warps)
    return out
