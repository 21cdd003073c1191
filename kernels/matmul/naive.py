"""Naive matmul: one program per (row of C, BLOCK_N columns), products summed on CUDA cores, no tile reuse.

Program ``(m, n-block)`` walks K in BLOCK_K steps, loading ``a[m, k:k+BK]`` and the ``[BK, BN]`` slab of ``b``
and accumulating their broadcast product elementwise; one reduction over the BK rows ends it. Every program
fetches its own copy of b's columns: b is read ``M`` times and a ``cdiv(N, BLOCK_N)`` times, so the kernel is
bound by memory traffic (mostly L2) long before arithmetic, and it never touches the tensor cores. Accumulation
is fp32; C has the inputs' dtype.
"""

import torch
import triton
import triton.language as tl

from ._checks import check_blocks, check_inputs, output

__all__ = ["naive_matmul", "bytes_moved"]


@triton.jit
def _naive_matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    offs_k = tl.arange(0, BLOCK_K)  # [BK]
    mask_n = offs_n < N
    a_ptrs = a_ptr + m * stride_am + offs_k * stride_ak  # [BK]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn  # [BK, BN]
    acc = tl.zeros([BLOCK_K, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k0
        a = tl.load(a_ptrs, mask=mask_k, other=0.0).to(tl.float32)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
        acc += a[:, None] * b
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = tl.sum(acc, axis=0)  # [BN]
    tl.store(c_ptr + m * stride_cm + offs_n * stride_cn, c.to(c_ptr.dtype.element_ty), mask=mask_n)


def bytes_moved(M: int, N: int, K: int, itemsize: int = 2, *, block_n: int = 64) -> int:
    """Bytes requested from memory: a once per column block, b once per row of C, C written once."""
    return (M * K * -(-N // block_n) + K * N * M + M * N) * itemsize


def naive_matmul(a: torch.Tensor, b: torch.Tensor, *, block_n: int = 64, block_k: int = 64,
                 num_warps: int = 4, out: torch.Tensor | None = None) -> torch.Tensor:
    """``a [M, K] @ b [K, N]`` for fp32/fp16/bf16 (any strides); fp32 accumulate, output (or ``out``) in their dtype."""
    M, N, K, _ = check_inputs(a, b, None)
    check_blocks(block_n=block_n, block_k=block_k)
    c = output(out, M, N, a)
    grid = (M, triton.cdiv(N, block_n))
    _naive_matmul_kernel[grid](
        a, b, c,
        M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_N=block_n, BLOCK_K=block_k, num_warps=num_warps,
    )
    return c
