"""Vector-add ladder for ``python -m kernels.bench vector_add``: the naive kernel against torch's ``x + y``."""

import torch

from ..bench import Problem, Version
from ..device import ON_GPU, sizes
from ..testing import randn, tolerance
from .naive import bytes_moved, naive_vector_add
from .reference import reference_vector_add

__all__ = ["problems", "versions"]


def _problem(n: int, dtype: torch.dtype) -> Problem:
    def make(seed):
        return dict(x=randn(n, dtype=dtype, seed=2 * seed), y=randn(n, dtype=dtype, seed=2 * seed + 1))

    return Problem(label=f"n={n} {str(dtype)[6:]}", make_inputs=make,
                   reference=lambda x, y: reference_vector_add(x, y),
                   bytes=bytes_moved(n, dtype.itemsize), flops=n, tol=tolerance(dtype),
                   params=dict(n=n, dtype=str(dtype)), dtype=dtype)


def problems(quick: bool) -> list[Problem]:
    n = sizes("vector_add")["n"]
    if quick or not ON_GPU:
        return [_problem(n, torch.float32)]
    return [_problem(m, dt) for m in (2**20 + 1, 2**24 + 3, n) for dt in (torch.float32, torch.bfloat16)]


def versions() -> list[Version]:
    return [
        Version("torch", lambda x, y: x + y),
        Version("naive", lambda x, y: naive_vector_add(x, y)),
        Version("naive_bs4096", lambda x, y: naive_vector_add(x, y, block_size=4096)),
    ]
