"""Lookback: one kernel, one pass over HBM, the state scan chained across segments through L2.

Each program owns one segment of ``L`` tokens of one (sequence, head, V-block) chain. Phase A reduces the
segment's ``Σ kᵀv`` in fp32; the program then waits for its predecessor's inclusive prefix state, publishes its
own (prefix + local) to a two-slot ring, and in phase B re-reads the segment (K, V mostly from L2) and writes the
outputs chunk by chunk from the prefix state, kept on-chip. Programs take tickets from an atomic counter in
segment-major order, so every program waits only on one that has already started: no deadlock. HBM holds no
per-chunk states. Limits: K <= 256; the fp32 state is cast to the input dtype for ``q·S`` (as chunked kernels do).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..device import INTERPRET, upcast_for_dot
from ..validate import check_power_of_two
from .checks import check_cu_seqlens, check_inputs, host_offsets

__all__ = ["Config", "CONFIGS", "config_for", "lookback_linear_attention", "one_pass_fills"]

SLOTS = 2
# Polls (~1 µs each) before a wait gives up and poisons its outputs with NaN: a wrong answer, never a hang.
MAX_SPIN = tl.constexpr(1 << 22)


@dataclass(frozen=True)
class Config:
    """Launch parameters: segment length ``L`` (tokens per program), chunk ``BT``, V-block ``BV``.

    ``prefetch``: chunks ahead to pull into L2 with ``prefetch.global.L2`` (0: none; off under the interpreter).
    ``tma``: load Q, K, V tiles and store O tiles through tensor descriptors (Hopper's TMA engine: one instruction
    per tile instead of a ``cp.async`` per 16 bytes, and rows past the sequence's end zero-filled or dropped by
    the hardware); falls back to pointer loads where the tensors' alignment does not allow descriptors.
    """

    L: int
    BT: int
    BV: int
    num_warps: int
    num_stages: int
    prefetch: int = 0
    tma: bool = False


# (max(K, V) bucket, input element size) -> [(largest mean sequence length, config), ...], first match wins.
# From the H200 tuning runs (PERF.md): bf16/fp16 D=128 L4096 + prefetch 2 up to 16k (one segment per chain at
# 4k), L2048 beyond; D=64 L2048 with three stages. fp32 and D=256 rows compile without spills but are untimed.
CONFIGS: dict[tuple[int, int], list[tuple[float, Config]]] = {
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


def config_for(K: int, V: int, dtype: torch.dtype, T: float, varlen: bool = False) -> Config:
    """The table's configuration for head sizes ``K``, ``V``, input ``dtype`` and mean sequence length ``T``."""
    if INTERPRET:
        return INTERPRETER_CONFIG
    d = max(K, V)
    if varlen and d > 64 and dtype != torch.float32:
        return VARLEN_CONFIG
    bucket = next(b for b in (64, 128, 256) if d <= b)
    size = 4 if dtype == torch.float32 else 2
    return next(cfg for t_max, cfg in CONFIGS[(bucket, size)] if T <= t_max)


@triton.jit
def _l2(ptrs):
    """Ask L2 for the lines at ``ptrs`` (one pointer per 128-byte line); nothing waits for them."""
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def _lookback_linear_attention_kernel(
    # pointers
    q_ptr, k_ptr, v_ptr, o_ptr, h0_ptr, ht_ptr, ring_ptr, flag_ptr, ticket_ptr, cu_ptr, seg_ptr,
    # sizes
    scale, T, B, H,
    # strides (batch, token, head; the last dimension is unit-stride)
    stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh, stride_ob, stride_ot, stride_oh,
    # meta-parameters
    K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, L: tl.constexpr, BT: tl.constexpr,
    SLOTS: tl.constexpr, HAS_H0: tl.constexpr, STORE_HT: tl.constexpr, IS_VARLEN: tl.constexpr,
    UPCAST: tl.constexpr, PREFETCH: tl.constexpr, LINE: tl.constexpr, TMA: tl.constexpr,
):
    # Tickets, not program ids: a predecessor (smaller ticket) has always started before its waiter.
    ticket = tl.atomic_add(ticket_ptr, 1)
    NV: tl.constexpr = (V + BV - 1) // BV
    row = ticket // (H * NV)
    h = (ticket // NV) % H
    iv = ticket % NV
    if IS_VARLEN:
        n = tl.load(seg_ptr + 2 * row)
        j = tl.load(seg_ptr + 2 * row + 1)
        bos = tl.load(cu_ptr + n).to(tl.int32)
        eos = tl.load(cu_ptr + n + 1).to(tl.int32)
        b = tl.full([], 0, tl.int32)
    else:
        j = row // B
        n = row % B
        bos = 0
        eos = T
        b = n
    t0 = bos + j * L
    t1 = tl.minimum(t0 + L, eos)
    last = t1 == eos
    chain = (n * H + h) * NV + iv

    offs_t = tl.arange(0, BT)
    offs_k = tl.arange(0, BK)
    offs_v = iv * BV + tl.arange(0, BV)
    mk = offs_k < K
    mv = offs_v < V
    q_base = q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = k_ptr + b.to(tl.int64) * stride_kb + h.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + h.to(tl.int64) * stride_vh
    o_base = o_ptr + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
    if TMA:
        # One (sequence, head) as a [tokens, features] matrix ending at the sequence's end: tiles reaching past
        # it load zeros and store nothing, so no masks are needed.
        q_desc = tl.make_tensor_descriptor(q_base, shape=[eos, K], strides=[stride_qt, 1], block_shape=[BT, BK])
        k_desc = tl.make_tensor_descriptor(k_base, shape=[eos, K], strides=[stride_kt, 1], block_shape=[BT, BK])
        v_desc = tl.make_tensor_descriptor(v_base, shape=[eos, V], strides=[stride_vt, 1], block_shape=[BT, BV])
        o_desc = tl.make_tensor_descriptor(o_base, shape=[eos, V], strides=[stride_ot, 1], block_shape=[BT, BV])

    # One pointer per 128-byte line of a [BT, BK] / [BT, BV] tile, for L2 prefetches.
    lines_k = tl.arange(0, (BK + LINE - 1) // LINE) * LINE
    lines_v = iv * BV + tl.arange(0, (BV + LINE - 1) // LINE) * LINE

    # Phase A: the segment's own Σ kᵀv (the last segment of a chain publishes nothing and skips it).
    local = tl.full([BK, BV], 0.0, dtype=tl.float32)
    for s in range(0, tl.where(last, 0, L), BT):
        rows = (t0 + s + offs_t).to(tl.int64)
        if PREFETCH > 0:
            ahead = tl.minimum(rows + PREFETCH * BT, eos - 1)
            _l2(k_base + ahead[:, None] * stride_kt + lines_k[None, :])
            _l2(v_base + ahead[:, None] * stride_vt + lines_v[None, :])
            _l2(q_base + rows[:, None] * stride_qt + lines_k[None, :])
        if TMA:
            kk = k_desc.load([t0 + s, 0])  # [BT, BK]
            vv = v_desc.load([t0 + s, iv * BV])  # [BT, BV]
        else:
            kk = tl.load(k_base + rows[:, None] * stride_kt + offs_k[None, :], mask=mk[None, :], other=0.0)
            vv = tl.load(v_base + rows[:, None] * stride_vt + offs_v[None, :], mask=mv[None, :], other=0.0)
        if UPCAST:
            kk = kk.to(tl.float32)
            vv = vv.to(tl.float32)
        local = tl.dot(tl.trans(kk), vv, local)

    # The prefix state: the predecessor's published inclusive state, or the initial state. A wait that outlasts
    # MAX_SPIN polls poisons the state with NaN, so a broken chain shows as NaN outputs instead of a hung GPU.
    offs_ring = offs_k[:, None] * BV + tl.arange(0, BV)[None, :]  # [BK, BV]
    offs_state = (n * H + h).to(tl.int64) * K * V + offs_k[:, None] * V + offs_v[None, :]
    m_state = mk[:, None] & mv[None, :]
    if j > 0:
        slot = chain * SLOTS + (j - 1) % SLOTS
        seen = tl.atomic_add(flag_ptr + slot, 0, sem="acquire", scope="gpu")
        tries = 0
        while (seen != j) & (tries < MAX_SPIN):
            seen = tl.atomic_add(flag_ptr + slot, 0, sem="acquire", scope="gpu")
            tries += 1
        state = tl.load(ring_ptr + slot.to(tl.int64) * BK * BV + offs_ring, cache_modifier=".cg")
        state = state * tl.where(seen == j, 1.0, float("nan"))
    else:
        if HAS_H0:
            state = tl.load(h0_ptr + offs_state, mask=m_state, other=0.0)
        else:
            state = tl.full([BK, BV], 0.0, dtype=tl.float32)
    if not last:
        slot = chain * SLOTS + j % SLOTS
        tl.store(ring_ptr + slot.to(tl.int64) * BK * BV + offs_ring, state + local)
        tl.debug_barrier()
        tl.atomic_xchg(flag_ptr + slot, j + 1, sem="release", scope="gpu")

    # Phase B: outputs chunk by chunk, o = scale·(q S + tril(q kᵀ) v), then S += kᵀ v.
    causal = offs_t[:, None] >= offs_t[None, :]
    for s in range(t0, t1, BT):
        rows = s + offs_t
        mt = rows < t1
        rows = rows.to(tl.int64)
        if PREFETCH > 0:
            ahead = tl.minimum(rows + PREFETCH * BT, t1 - 1)
            _l2(q_base + ahead[:, None] * stride_qt + lines_k[None, :])
            _l2(k_base + ahead[:, None] * stride_kt + lines_k[None, :])
            _l2(v_base + ahead[:, None] * stride_vt + lines_v[None, :])
        if TMA:
            qq = q_desc.load([s, 0])  # [BT, BK]
            kk = k_desc.load([s, 0])  # [BT, BK]
            vv = v_desc.load([s, iv * BV])  # [BT, BV]
        else:
            qq = tl.load(q_base + rows[:, None] * stride_qt + offs_k[None, :], mask=mt[:, None] & mk[None, :],
                         other=0.0)
            kk = tl.load(k_base + rows[:, None] * stride_kt + offs_k[None, :], mask=mt[:, None] & mk[None, :],
                         other=0.0)
            vv = tl.load(v_base + rows[:, None] * stride_vt + offs_v[None, :], mask=mt[:, None] & mv[None, :],
                         other=0.0)
        if UPCAST:
            qq = qq.to(tl.float32)
            kk = kk.to(tl.float32)
            vv = vv.to(tl.float32)
        scores = tl.where(causal, tl.dot(qq, tl.trans(kk)), 0.0)  # [BT, BT]
        out = tl.dot(qq, state.to(qq.dtype))  # [BT, BV]
        out = tl.dot(scores.to(qq.dtype), vv, out)
        if TMA:
            o_desc.store([s, iv * BV], (out * scale).to(o_ptr.dtype.element_ty))
        else:
            tl.store(o_base + rows[:, None] * stride_ot + offs_v[None, :],
                     (out * scale).to(o_ptr.dtype.element_ty), mask=mt[:, None] & mv[None, :])
        state = tl.dot(tl.trans(kk), vv, state)
    if STORE_HT:
        tl.store(ht_ptr + offs_state, state, mask=m_state & last)


def _check_config(cfg: Config) -> None:
    check_power_of_two("BT", cfg.BT, lo=16, hi=256)
    check_power_of_two("BV", cfg.BV, lo=16, hi=256)
    check_power_of_two("num_warps", cfg.num_warps, lo=1, hi=16)
    if cfg.L < cfg.BT or cfg.L % cfg.BT:
        raise ValueError(f"segment length L={cfg.L} must be a positive multiple of the chunk BT={cfg.BT}")
    if cfg.num_stages < 1:
        raise ValueError(f"num_stages={cfg.num_stages} must be at least 1")
    if cfg.prefetch < 0:
        raise ValueError(f"prefetch={cfg.prefetch} must be >= 0 (chunks ahead)")


def _lengths(cu_seqlens: torch.Tensor) -> list[int]:
    """The packed sequences' lengths, from their N + 1 offsets."""
    cu = host_offsets(cu_seqlens)
    return [b - a for a, b in zip(cu, cu[1:])]


def _tma_ready(*tensors: torch.Tensor) -> bool:
    """Whether tensor descriptors can address these [B, T, H, D] tensors: 16-byte aligned bases and strides."""
    for t in tensors:
        size = t.element_size()
        if t.data_ptr() % 16 or any(st * size % 16 for st in t.stride()[:-1]) or t.shape[-1] * size < 16:
            return False
    return True


def _workspace(size: int, alignment: int, stream) -> torch.Tensor:
    """Global memory for the descriptors a kernel builds on the device (128 bytes per descriptor)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _ensure_allocator() -> None:
    """Give Triton an allocator for device-built descriptors, unless the caller has set one of their own."""
    from triton.runtime import _allocation

    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(_workspace)


def lookback_linear_attention(q, k, v, scale, initial_state=None, output_final_state=False, cu_seqlens=None, *,
                              config: Config | None = None):
    """Causal linear attention ``o_t = scale · q_tᵀ S_t``, ``S_t = S_{t-1} + k_t v_tᵀ``, in one pass.

    q, k: [B, T, H, K]; v: [B, T, H, V]; ``initial_state``: [N, H, K, V]; returns ``(o, final_state or None)``
    with ``o`` like ``v`` and the fp32 final state [N, H, K, V]. ``config`` overrides the tuned table.
    """
    p = check_inputs(q, k, v, scale, initial_state, output_final_state, cu_seqlens)
    B, T, H, K, V, N = p.B, p.T, p.H, p.K, p.V, p.N
    cfg = config or config_for(K, V, q.dtype, T / N, varlen=cu_seqlens is not None)
    _check_config(cfg)
    BK = max(16, triton.next_power_of_2(K))
    BV = max(16, min(cfg.BV, triton.next_power_of_2(V)))
    NV = triton.cdiv(V, BV)

    o = torch.empty(B, T, H, V, dtype=v.dtype, device=q.device)
    ht = torch.empty(N, H, K, V, dtype=torch.float32, device=q.device) if output_final_state else None
    h0 = initial_state.to(torch.float32).contiguous() if initial_state is not None else None
    if cu_seqlens is not None:
        lengths = _lengths(cu_seqlens)
        # Segment-major order: every sequence's segment j comes before any sequence's segment j + 1.
        table = sorted(((j, s) for s, n_tok in enumerate(lengths) for j in range(triton.cdiv(n_tok, cfg.L))))
        seg = torch.tensor([[s, j] for j, s in table], dtype=torch.int32).reshape(-1).to(q.device)
        rows = len(table)
        cu_dev = cu_seqlens.to(torch.int32)
        empty = [s for s, n_tok in enumerate(lengths) if n_tok == 0]
        if ht is not None and empty:
            ht[empty] = h0[empty] if h0 is not None else 0.0
    else:
        seg, cu_dev = None, None
        rows = triton.cdiv(T, cfg.L) * B
    if rows == 0:
        o.zero_()
        if ht is not None:
            ht.copy_(h0 if h0 is not None else torch.zeros_like(ht))
        return o, ht

    tma = cfg.tma and _tma_ready(q, k, v, o)
    if tma and not INTERPRET:
        _ensure_allocator()
    chains = N * H * NV
    sync = torch.zeros(1 + chains * SLOTS, dtype=torch.int32, device=q.device)
    ring = torch.empty(chains * SLOTS * BK * BV, dtype=torch.float32, device=q.device)
    _lookback_linear_attention_kernel[(rows * H * NV,)](
        q, k, v, o, h0, ht, ring, sync[1:], sync, cu_dev, seg,
        float(scale), T, B, H,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
        K=K, V=V, BK=BK, BV=BV, L=cfg.L, BT=cfg.BT, SLOTS=SLOTS,
        HAS_H0=h0 is not None, STORE_HT=ht is not None, IS_VARLEN=cu_seqlens is not None,
        UPCAST=upcast_for_dot(q.dtype), PREFETCH=0 if INTERPRET else cfg.prefetch, LINE=128 // q.element_size(),
        TMA=tma,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return o, ht


#: How much longer the lookback takes than the chunked kernel's single pass when both keep every SM busy (H200,
#: B=4 H=16 D=128 bf16: 0.530 / 0.361 ms at 16k, 2.209 / 1.455 at 64k, 8.508 / 5.869 at 256k: 1.45-1.52; 1.16 at
#: 4k). It reads K and V twice and passes states along its chain; what it buys is splitting long sequences.
LOOKBACK_COST = 1.4


def one_pass_fills(programs: int, sms: int, lengths: list[int] | None = None, cost: float = LOOKBACK_COST) -> bool:
    """Whether the chunked kernel's single pass beats the lookback: ``programs`` chains (one per sequence, head and
    V block; packed sequences of ``lengths``, or all of one length) each walk their sequence on one SM, so the
    pass takes as long as the longest chain or as the work spread over ``sms`` SMs, whichever is more; the
    lookback spreads the work evenly but costs ``cost`` times as much per token. Measured on the H200:
    chunked for B=4 H=16 or H=32 (128 chains, 0.36 vs 0.53 ms at 16k) and for eight packed sequences of 1 to 20,000
    tokens (0.56 vs 0.99 ms), the lookback for one sequence of 64k with 16 heads (32 chains: 0.54 vs 1.4 ms)."""
    lengths = [1] if not lengths else lengths  # one length: only the number of chains matters
    per_sequence = programs / len(lengths)
    work = per_sequence * sum(lengths)  # chain-tokens
    return max(lengths) <= cost * work / sms


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
