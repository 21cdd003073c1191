"""Lookback: one pass over HBM, the state scan chained across segments through L2.

Each program owns one segment of ``L`` tokens of one (sequence, head, V-block) chain. Phase A reduces the
segment's ``Σ kᵀv`` in fp32; the program then waits for its predecessor's inclusive prefix state, publishes its
own (prefix + local) to a two-slot ring, and in phase B re-reads the segment (K, V mostly from L2) and writes the
outputs chunk by chunk from the prefix state, kept on-chip. Programs take tickets from an atomic counter in
segment-major order, so every program waits only on one that has already started: no deadlock. HBM holds no
per-chunk states. Limits: K <= 256; the fp32 state is cast to the input dtype for ``q·S`` (as chunked kernels do).

The kernel is the fused forward's chained launch (``fused.py``, which also serves the normaliser, states and the
dispatch's other launches); this module keeps the lookback's own tuned tiles (:data:`CONFIGS`) and its entry
point, one of the versions the lessons and benchmarks compare.
"""

from __future__ import annotations

import math

import torch
import triton

from ..device import INTERPRET
from .checks import check_cu_seqlens, check_inputs, host_offsets
from .dispatch import LOOKBACK_COST, Launch, one_pass_fills
from .fused import SLOTS, fused_forward

__all__ = ["Config", "CONFIGS", "config_for", "lookback_linear_attention", "one_pass_fills", "LOOKBACK_COST",
           "SLOTS"]


def Config(L: int, BT: int, BV: int, num_warps: int, num_stages: int, prefetch: int = 0, tma: bool = False) -> Launch:
    """A lookback launch (:class:`~.dispatch.Launch` at TF32 for fp32 tiles): segments of ``L`` tokens (one a
    program), chunks of ``BT``, ``BV`` value columns a program; ``prefetch`` chunks pulled into L2 ahead of use
    (``prefetch.global.L2``; off under the interpreter); ``tma``: Q, K, V and O tiles moved by tensor descriptors
    (Hopper's TMA engine: one instruction a tile, rows past the sequence's end zero-filled or dropped by the
    hardware), falling back to pointer loads where the tensors' alignment does not allow descriptors."""
    return Launch(L, BT, BV, num_warps, num_stages, prefetch=prefetch, tma=tma, precision="tf32")


# (max(K, V) bucket, input element size) -> [(largest mean sequence length, config), ...], first match wins.
# From the H200 tuning runs (PERF.md): bf16/fp16 D=128 L4096 + prefetch 2 up to 16k (one segment per chain at
# 4k), L2048 beyond; D=64 L2048 with three stages. fp32 and D=256 rows compile without spills but are untimed.
CONFIGS: dict[tuple[int, int], list[tuple[float, Launch]]] = {
    (64, 2): [(math.inf, Config(2048, 64, 64, 4, 3))],
    (128, 2): [(16384, Config(4096, 64, 64, 4, 2, prefetch=2)), (math.inf, Config(2048, 64, 64, 4, 2))],
    (256, 2): [(math.inf, Config(512, 64, 32, 4, 2))],
    (64, 4): [(math.inf, Config(1024, 64, 64, 4, 2))],
    (128, 4): [(math.inf, Config(1024, 64, 32, 4, 2))],
    (256, 4): [(math.inf, Config(512, 32, 16, 4, 1))],
}
# Packed sequences of mixed lengths: the one measured varlen choice (64k tokens in 16 sequences, 0.99 ms).
VARLEN_CONFIG = Config(1024, 64, 64, 4, 2)
# Under the interpreter: short segments and chunks, so small test sizes still cross several of each.
INTERPRETER_CONFIG = Config(L=32, BT=16, BV=16, num_warps=4, num_stages=1)


def config_for(K: int, V: int, dtype: torch.dtype, T: float, varlen: bool = False) -> Launch:
    """The table's configuration for head sizes ``K``, ``V``, input ``dtype`` and mean sequence length ``T``."""
    if INTERPRET:
        return INTERPRETER_CONFIG
    d = max(K, V)
    if varlen and d > 64 and dtype != torch.float32:
        return VARLEN_CONFIG
    bucket = next(b for b in (64, 128, 256) if d <= b)
    size = 4 if dtype == torch.float32 else 2
    return next(cfg for t_max, cfg in CONFIGS[(bucket, size)] if T <= t_max)


def _check_config(cfg: Launch) -> None:
    if cfg.L is None:
        raise ValueError("a lookback launch needs a segment length L (tokens a program)")
    cfg.check()


def _lengths(cu_seqlens: torch.Tensor) -> list[int]:
    """The packed sequences' lengths, from their N + 1 offsets."""
    cu = host_offsets(cu_seqlens)
    return [b - a for a, b in zip(cu, cu[1:])]


def lookback_linear_attention(q, k, v, scale, initial_state=None, output_final_state=False, cu_seqlens=None, *,
                              config: Launch | None = None):
    """Causal linear attention ``o_t = scale · q_tᵀ S_t``, ``S_t = S_{t-1} + k_t v_tᵀ``, in one pass.

    q, k: [B, T, H, K]; v: [B, T, H, V]; ``initial_state``: [N, H, K, V]; returns ``(o, final_state or None)``
    with ``o`` like ``v`` and the fp32 final state [N, H, K, V]. ``config`` overrides the tuned table. The kernel
    is the fused one's chained launch (``fused.py``) at this table's tiles, unnormalised, fp32 tiles at TF32.
    """
    p = check_inputs(q, k, v, scale, initial_state, output_final_state, cu_seqlens)
    cfg = config or config_for(p.K, p.V, q.dtype, p.T / p.N, varlen=cu_seqlens is not None)
    _check_config(cfg)
    h0 = initial_state.to(torch.float32).contiguous() if initial_state is not None else None
    f = fused_forward(q, k, v, scale, h0, None, output_final_state, False, cu_seqlens, launch=cfg)
    return f.o, f.final_state


def _supports(q, k, v, initial_state=None, cu_seqlens=None) -> str | None:
    """Which calls :func:`chunk_linear_attn` may send here (None: this one)."""
    if INTERPRET or not q.is_cuda:
        return None
    if q.dtype == torch.float32:
        return "fp32 on a GPU: the chained wait hung once on an H200 with fp32 tiles; the chunked kernel serves them"
    from .chunked import _blocks

    B, T, H, K = q.shape
    V = v.shape[-1]
    if cu_seqlens is not None:
        check_cu_seqlens(cu_seqlens, T, B)  # before the offsets are used: bad ones get the checks' message
    lengths = None if cu_seqlens is None else _lengths(cu_seqlens)
    N = B if lengths is None else len(lengths)
    programs = N * H * triton.cdiv(V, _blocks(K, V)[1])
    if one_pass_fills(programs, torch.cuda.get_device_properties(q.device).multi_processor_count, lengths):
        return (f"{programs} chains keep the GPU busy to the end: the chunked kernel's single pass is faster here "
                "(the lookback pays for splitting sequences it does not need to split)")
    return None


lookback_linear_attention.supports = _supports
