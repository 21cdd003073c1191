"""Recurrent ladder for ``python -m kernels.bench recurrent``: naive (HBM state) against fused (register state)."""

import torch

from ..bench import Problem, Version
from ..device import ON_GPU, sizes
from ..testing import randn, tolerance
from . import fused, naive, prefetch
from .reference import reference_recurrent

__all__ = ["problems", "versions"]


def _problem(B, T, H, K, V, dtype=torch.bfloat16) -> Problem:
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        return dict(q=randn(B, T, H, K, dtype=dtype, gen=g), k=randn(B, T, H, K, dtype=dtype, gen=g),
                    v=randn(B, T, H, V, dtype=dtype, gen=g), initial_state=randn(B, H, K, V, gen=g))

    def reference(q, k, v, initial_state):
        return reference_recurrent(q, k, v, initial_state=initial_state)[0]

    floor = fused.bytes_moved(B, T, H, K, V, dtype.itemsize, block_v=V, initial_state=True)
    return Problem(label=f"B={B} T={T} H={H} K={K} V={V} {str(dtype)[6:]}", make_inputs=make, reference=reference,
                   bytes=floor, flops=4 * B * T * H * K * V, tol=tolerance(dtype),
                   params=dict(B=B, T=T, H=H, K=K, V=V, dtype=str(dtype),
                               naive_bytes=naive.bytes_moved(B, T, H, K, V, dtype.itemsize, initial_state=True)),
                   dtype=dtype)


def problems(quick: bool) -> list[Problem]:
    s = sizes("recurrent")
    if quick or not ON_GPU:
        return [_problem(**s)]
    B, T, H = s["B"], s["T"], s["H"]
    return [_problem(B, T, H, 64, 64), _problem(B, T, H, 128, 128), _problem(B, 4 * T, H, 64, 64),
            _problem(B, T, H, 100, 72)]


def _call(fn, **kw):
    return lambda q, k, v, initial_state: fn(q, k, v, initial_state=initial_state, **kw)


def versions() -> list[Version]:
    first = lambda r: r[0]  # noqa: E731
    return [
        Version("naive", _call(naive.naive_recurrent), output=first),
        Version("fused", _call(fused.fused_recurrent), output=first),
        Version("fused_bv16", _call(fused.fused_recurrent, block_v=16), output=first),
        Version("fused_bv64", _call(fused.fused_recurrent, block_v=64), output=first),
        Version("prefetch", _call(prefetch.prefetch_recurrent), output=first),
    ]
