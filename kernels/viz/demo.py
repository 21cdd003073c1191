"""Kernels the views trace when a lesson passes none of its own: a masked vector add and a grouped tiled matmul.

They are ordinary ``@triton.jit`` kernels with launchers of the same shape the views expect from a learner:
``launch(**sizes)`` allocates small CPU inputs, launches, and returns the output.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..testing import randn

__all__ = ["vector_add_launch", "grouped_matmul_launch"]


@triton.jit
def _demo_vector_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def vector_add_launch(n: int, BLOCK: int) -> torch.Tensor:
    """``out = x + y`` over ``n`` elements, ``cdiv(n, BLOCK)`` programs."""
    x, y = randn(n, seed=0, device="cpu"), randn(n, seed=1, device="cpu")
    out = torch.empty_like(x)
    _demo_vector_add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out


@triton.jit
def _demo_grouped_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                                stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    # GROUP_M row-blocks share their B column-blocks while they are hot in L2
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    group_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM]
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        offs_k = k + tl.arange(0, BLOCK_K)  # [BK]
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)  # [BM, BK]
        b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)  # [BK, BN]
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def grouped_matmul_launch(M: int, N: int, K: int, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int,
                          GROUP_M: int = 1) -> torch.Tensor:
    """``C = A @ B`` in fp32 with programs ordered in groups of ``GROUP_M`` row-blocks."""
    a, b = randn(M, K, seed=0, device="cpu"), randn(K, N, seed=1, device="cpu")
    c = torch.empty(M, N)
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    _demo_grouped_matmul_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                                      BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M)
    return c
