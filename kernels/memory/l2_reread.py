"""L2-resident re-read: a working set swept ``reuse`` times, ``out[i] = Σ_r x[(i + r·shift) mod n]``.

Round ``r`` of program ``pid`` reads the block that sits ``r·shift`` elements further on, so every element of ``x``
is read exactly ``reuse`` times, by different programs. When ``x`` and ``out`` fit in L2, only the first touch of
each sector reaches HBM: HBM traffic stays ``2·n·itemsize`` while the kernel reads ``reuse·n·itemsize``, and its
effective bandwidth rises towards the L2's. Once the working set outgrows L2 every round pays HBM again.
"""

import torch
import triton
import triton.language as tl

from ._checks import check_count, check_vector, output

__all__ = ["l2_reread_memory", "bytes_moved", "bytes_read", "shift_for", "L2_BYTES", "l2_bytes"]

#: The H200's L2 as its driver reports it (two partitions of 30 MiB; the H100's is 50 MiB); :func:`l2_bytes` reads
#: the real size on a GPU.
L2_BYTES = 60 * 2**20


def l2_bytes() -> int:
    """This GPU's L2 size in bytes (:data:`L2_BYTES` without a GPU)."""
    if torch.cuda.is_available():
        return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", L2_BYTES))
    return L2_BYTES


@triton.jit
def _l2_reread_memory_kernel(x_ptr, out_ptr, n_elements, shift, reuse, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)  # [BLOCK_SIZE]
    mask = offs < n_elements
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    start = 0
    for _ in range(reuse):
        idx = offs + start
        idx = tl.where(idx >= n_elements, idx - n_elements, idx)
        acc += tl.load(x_ptr + idx, mask=mask).to(tl.float32)
        start = (start + shift) % n_elements
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def shift_for(n: int, reuse: int, block_size: int) -> int:
    """The distance between rounds: ``n / reuse`` rounded up to whole blocks, so rounds read other programs' data."""
    blocks = -(-n // block_size)
    return min(n - 1, -(-blocks // reuse) * block_size) if n > 1 else 0


def bytes_moved(n: int, itemsize: int = 4, *, reuse: int = 1, l2_bytes: int = L2_BYTES) -> int:
    """HBM bytes: ``x`` read once and ``out`` written once while both fit in L2, every sweep from HBM once not."""
    if 2 * n * itemsize <= l2_bytes:
        return 2 * n * itemsize
    return bytes_read(n, reuse, itemsize)


def bytes_read(n: int, reuse: int, itemsize: int = 4) -> int:
    """Bytes the kernel requests from the memory system: ``reuse`` sweeps of ``x`` plus the output."""
    return (reuse + 1) * n * itemsize


def l2_reread_memory(x: torch.Tensor, *, reuse: int, block_size: int = 2048, num_warps: int = 8,
                     shift: int | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """``Σ_{r<reuse} roll(x, -r·shift)`` for a contiguous 1-D float ``x``, summed in fp32, stored in x's dtype."""
    n = check_vector("x", x, block_size)
    if x.dim() != 1:
        raise ValueError(f"x must be 1-D (the working set), got shape {tuple(x.shape)}")
    check_count("reuse", reuse, hi=2**20)
    shift = shift_for(n, reuse, block_size) if shift is None else check_count("shift", shift, lo=0, hi=n - 1)
    out = output(out, x.shape, x)
    _l2_reread_memory_kernel[(triton.cdiv(n, block_size),)](x, out, n, shift, reuse, BLOCK_SIZE=block_size,
                                                           num_warps=num_warps)
    return out
