"""A planted performance bug: a tiled matmul that recompiles for no size and so knows nothing about them.

``planted_matmul`` marks its sizes and strides ``do_not_specialize`` (a habit borrowed from kernels that see a new
sequence length every call and want one compiled binary). The JIT then no longer learns that a stride is 1 or a
multiple of 16, so the compiler cannot prove that a row of a tile is contiguous and 16-byte aligned: every element
is loaded by an instruction of its own (``ld.global.b16``) instead of 16-byte asynchronous copies into shared
memory (``cp.async``), and nothing is pipelined. ``fixed_matmul`` is the same kernel, specialised as usual.
fp16/bf16 in, fp32 accumulate, C in the inputs' dtype.
"""

import torch
import triton
import triton.language as tl

from ..device import ON_GPU

__all__ = ["planted_matmul", "fixed_matmul", "SIZES_AND_STRIDES", "launch", "default_config"]

#: The integer arguments the planted kernel refuses to specialise on.
SIZES_AND_STRIDES = ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn")


@triton.jit(do_not_specialize=SIZES_AND_STRIDES)
def _planted_matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM]
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    ks = tl.arange(0, BLOCK_K)  # [BK]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * stride_am + (k + ks)[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & ((k + ks)[None, :] < K), other=0.0)  # [BM, BK]
        b = tl.load(b_ptr + (k + ks)[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=((k + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)  # [BK, BN]
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def _fixed_matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM]
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    ks = tl.arange(0, BLOCK_K)  # [BK]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * stride_am + (k + ks)[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & ((k + ks)[None, :] < K), other=0.0)  # [BM, BK]
        b = tl.load(b_ptr + (k + ks)[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=((k + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)  # [BK, BN]
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def default_config() -> dict:
    """Tiles and launch settings: a Hopper-sized tile on a GPU, a small one for the interpreter."""
    if ON_GPU:
        return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3)
    return dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=2)


def launch(kernel, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int,
           num_warps: int = 4, num_stages: int = 2) -> None:
    """The one launch every version of the kernel gets: grid ``(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))``."""
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=num_warps, num_stages=num_stages)


def _matmul(kernel, a: torch.Tensor, b: torch.Tensor, config: dict | None) -> torch.Tensor:
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs a [M, K] and b [K, N], got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"a and b must both be fp16 or bf16, got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"a is on {a.device} and b on {b.device}")
    c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    launch(kernel, a, b, c, **(config or default_config()))
    return c


def planted_matmul(a: torch.Tensor, b: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """``a @ b`` with the planted bug: sizes and strides not specialised, so loads are one element wide."""
    return _matmul(_planted_matmul_kernel, a, b, config)


def fixed_matmul(a: torch.Tensor, b: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """``a @ b``, the same kernel specialised as Triton's JIT does by default: 16-byte loads, pipelined."""
    return _matmul(_fixed_matmul_kernel, a, b, config)
