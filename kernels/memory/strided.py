"""Strided gather: ``out[i] = x[i·stride]``, the uncoalesced access pattern.

Neighbouring threads read addresses ``stride·itemsize`` bytes apart. DRAM and L2 deliver whole 32-byte sectors, so
once ``stride·itemsize >= 32`` every useful element costs a full sector: the kernel moves up to ``32/itemsize``
times the bytes it uses (8x for fp32), and the useful bandwidth drops by that factor. Writes stay coalesced.
"""

import torch
import triton
import triton.language as tl

from ._checks import check_count, check_vector, output

__all__ = ["strided_memory", "bytes_moved", "useful_bytes", "SECTOR_BYTES"]

#: The granularity in which L2 and DRAM move data on NVIDIA GPUs.
SECTOR_BYTES = 32


@triton.jit
def _strided_memory_kernel(x_ptr, out_ptr, n_out, stride, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)  # [BLOCK_SIZE]
    mask = offs < n_out
    x = tl.load(x_ptr + offs * stride, mask=mask)
    tl.store(out_ptr + offs, x, mask=mask)


def _n_out(n: int, stride: int) -> int:
    return -(-n // stride)


def useful_bytes(n: int, stride: int, itemsize: int = 4) -> int:
    """Bytes the gather uses: the elements it reads plus the elements it writes."""
    return 2 * _n_out(n, stride) * itemsize


def bytes_moved(n: int, stride: int, itemsize: int = 4, sector: int = SECTOR_BYTES) -> int:
    """HBM bytes: every 32-byte sector that holds a gathered element is read whole; the output is written once."""
    n_out = _n_out(n, stride)
    if stride * itemsize >= sector:
        read = n_out * sector
    else:
        read = -(-n * itemsize // sector) * sector
    return read + n_out * itemsize


def strided_memory(x: torch.Tensor, *, stride: int, block_size: int = 1024, num_warps: int = 4,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """``x.flatten()[::stride]`` gathered into a contiguous tensor of ``cdiv(n, stride)`` elements (or ``out``)."""
    n = check_vector("x", x, block_size)
    check_count("stride", stride, hi=n)
    n_out = _n_out(n, stride)
    out = output(out, (n_out,), x)
    _strided_memory_kernel[(triton.cdiv(n_out, block_size),)](x, out, n_out, stride, BLOCK_SIZE=block_size,
                                                             num_warps=num_warps)
    return out
