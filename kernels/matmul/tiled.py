"""Tiled matmul: each program computes a BLOCK_M×BLOCK_N tile of C with ``tl.dot`` over a K loop.

The ``[BM, BK]`` and ``[BK, BN]`` tiles are staged on chip and each element of them feeds ``BN`` (resp. ``BM``)
multiply-adds, so a is read ``cdiv(N, BN)`` times and b ``cdiv(M, BM)`` times instead of ``N`` and ``M``.
Programs are numbered in groups of ``GROUP_M`` tile rows so that tiles running together share a's rows and b's
columns in L2. fp16/bf16 in, fp32 accumulate, C in the inputs' dtype; fp32 inputs use TF32 or full-precision dots.
"""

import torch
import triton
import triton.language as tl

from ..device import ON_GPU, upcast_for_dot
from ._checks import check_blocks, check_inputs, output

__all__ = ["tiled_matmul", "bytes_moved", "default_blocks"]


@triton.jit
def _tiled_matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_pid_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM]
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    offs_k = tl.arange(0, BLOCK_K)  # [BK]
    mask_m = offs_m < M
    mask_n = offs_n < N
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak  # [BM, BK]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn  # [BK, BN]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k0
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn  # [BM, BN]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def default_blocks(dtype: torch.dtype) -> dict:
    """Tile sizes and launch settings: H100/H200-friendly on a GPU, few programs under the interpreter."""
    if not ON_GPU:
        return dict(block_m=32, block_n=32, block_k=32, group_m=4, num_warps=4, num_stages=1)
    if dtype == torch.float32:
        return dict(block_m=128, block_n=128, block_k=32, group_m=8, num_warps=8, num_stages=3)
    return dict(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3)


def bytes_moved(M: int, N: int, K: int, itemsize: int = 2, *, block_m: int = 128, block_n: int = 256) -> int:
    """Bytes requested from memory: a once per tile column, b once per tile row, C written once."""
    return (M * K * -(-N // block_n) + K * N * -(-M // block_m) + M * N) * itemsize


def tiled_matmul(a: torch.Tensor, b: torch.Tensor, *, input_precision: str | None = None,
                 block_m: int | None = None, block_n: int | None = None, block_k: int | None = None,
                 group_m: int | None = None, num_warps: int | None = None,
                 num_stages: int | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """``a [M, K] @ b [K, N]`` with ``tl.dot`` tiles; fp32 accumulate, output in the inputs' dtype.

    input_precision (fp32 inputs only): ``"tf32"`` (default, Triton's and the tensor cores') or ``"ieee"``.
    Unset block sizes come from :func:`default_blocks`; ``out`` may supply C (``[M, N]``, any strides).
    """
    M, N, K, precision = check_inputs(a, b, input_precision)
    if input_precision is not None and a.dtype != torch.float32:
        raise ValueError(f"input_precision applies to fp32 inputs; these are {a.dtype}")
    cfg = default_blocks(a.dtype)
    given = dict(block_m=block_m, block_n=block_n, block_k=block_k, group_m=group_m, num_warps=num_warps,
                 num_stages=num_stages)
    cfg.update({k: v for k, v in given.items() if v is not None})
    check_blocks(block_m=cfg["block_m"], block_n=cfg["block_n"], block_k=cfg["block_k"])
    if cfg["group_m"] < 1:
        raise ValueError(f"group_m={cfg['group_m']} must be at least 1")
    upcast = upcast_for_dot(a.dtype)
    if a.dtype == torch.float32:
        dot_precision = precision
    else:
        dot_precision = "ieee" if upcast else "tf32"
    c = output(out, M, N, a)
    grid = (triton.cdiv(M, cfg["block_m"]) * triton.cdiv(N, cfg["block_n"]),)
    _tiled_matmul_kernel[grid](
        a, b, c,
        M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"], GROUP_M=cfg["group_m"],
        DOT_PRECISION=dot_precision, UPCAST=upcast, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return c
