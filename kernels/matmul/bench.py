"""Matmul ladder for ``python -m kernels.bench matmul``: naive, tiled (fp16/bf16, TF32 and IEEE fp32), torch."""

import torch

from ..bench import Problem, Version
from ..device import ON_GPU, sizes
from ..testing import randn, tolerance
from .naive import naive_matmul
from .reference import reference_matmul
from .tiled import tiled_matmul

__all__ = ["problems", "versions"]


def _problem(M: int, N: int, K: int, dtype: torch.dtype, tf32: bool = True) -> Problem:
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        return dict(a=randn(M, K, dtype=dtype, gen=g), b=randn(K, N, dtype=dtype, gen=g))

    size = dtype.itemsize
    return Problem(label=f"{M}x{N}x{K} {str(dtype)[6:]}", make_inputs=make,
                   reference=lambda a, b: reference_matmul(a, b), bytes=(M * K + K * N + M * N) * size,
                   flops=2 * M * N * K, tol=tolerance(dtype, tf32=tf32), params=dict(M=M, N=N, K=K, dtype=str(dtype)),
                   dtype=dtype)


def problems(quick: bool) -> list[Problem]:
    s = sizes("matmul")
    M, N, K = s["M"], s["N"], s["K"]
    if quick or not ON_GPU:
        return [_problem(M, N, K, torch.float16)]
    return ([_problem(M, N, K, dt) for dt in (torch.bfloat16, torch.float16, torch.float32)]
            + [_problem(1024 + 1, 1024 + 3, 1024 + 5, torch.bfloat16)])


def _only_16bit(p: Problem) -> str | None:
    return None if p.dtype != torch.float32 else "fp32: see tiled_tf32 / tiled_ieee"


def _only_fp32(p: Problem) -> str | None:
    return None if p.dtype == torch.float32 else "fp32 inputs only"


def versions() -> list[Version]:
    return [
        Version("torch", lambda a, b: a @ b),
        Version("naive", naive_matmul),
        Version("tiled", tiled_matmul, skip=_only_16bit),
        Version("tiled_tf32", lambda a, b: tiled_matmul(a, b, input_precision="tf32"), skip=_only_fp32),
        Version("tiled_ieee", lambda a, b: tiled_matmul(a, b, input_precision="ieee"), skip=_only_fp32),
    ]
