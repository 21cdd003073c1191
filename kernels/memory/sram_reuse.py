"""On-chip reuse: load a block once, use it ``reuse`` times from registers: ``y ← a·y + x``, ``reuse`` times.

Each element is read from HBM once and written once whatever ``reuse`` is, while the work grows as ``2·reuse``
FLOPs per element (one fused multiply-add per round). Arithmetic intensity is ``reuse / itemsize`` FLOP/byte, so
sweeping ``reuse`` walks the kernel along the roofline from the bandwidth slope to the FMA ceiling.
"""

import torch
import triton
import triton.language as tl

from ._checks import check_count, check_vector, output

__all__ = ["sram_reuse_memory", "bytes_moved", "flops"]


@triton.jit
def _sram_reuse_memory_kernel(x_ptr, out_ptr, n_elements, a, reuse, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)  # [BLOCK_SIZE]
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = x
    for _ in tl.range(0, reuse, loop_unroll_factor=8):
        y = y * a + x
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def bytes_moved(n: int, itemsize: int = 4) -> int:
    """HBM bytes: ``x`` read once, ``out`` written once, whatever the reuse."""
    return 2 * n * itemsize


def flops(n: int, reuse: int) -> int:
    """One multiply and one add per element per round."""
    return 2 * n * reuse


def sram_reuse_memory(x: torch.Tensor, *, reuse: int, a: float = 0.5, block_size: int = 1024,
                      num_warps: int = 4, out: torch.Tensor | None = None) -> torch.Tensor:
    """``y_R`` of ``y_0 = x, y_{r+1} = a·y_r + x`` for a contiguous float ``x``, in fp32, stored in x's dtype."""
    n = check_vector("x", x, block_size)
    check_count("reuse", reuse, lo=0, hi=2**24)
    if not isinstance(a, (int, float)) or isinstance(a, bool):
        raise TypeError(f"a must be a Python float, got {type(a).__name__}")
    out = output(out, x.shape, x)
    _sram_reuse_memory_kernel[(triton.cdiv(n, block_size),)](x, out, n, float(a), reuse, BLOCK_SIZE=block_size,
                                                            num_warps=num_warps)
    return out
