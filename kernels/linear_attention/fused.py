"""Fused: the package's forward, one kernel for every call ``chunk_linear_attn`` serves.

The chunk loop of ``chunked.py`` with the normaliser fused in (the running key sum ``z`` carried beside the state,
the division done before the output store, ``z_state`` in and out), fp32 inputs on tensor cores at a stated
precision (TF32, or 3xTF32 where ``torch.get_float32_matmul_precision()`` is "highest"), any K, V ≤ 256, and two
launches of the same loop: one program per (sequence, head, V block) walking its whole sequence, or segments of
``L`` tokens chained through L2 as in ``lookback.py``, for calls with too few chains to fill the GPU.
:func:`fused_forward` is the entry point; ``dispatch.py`` picks its launch. A launch with ``Launch.states`` set
runs ``states.py``'s two kernels instead (chunk states materialised, every block's output at once).
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..device import INTERPRET, ensure_triton_allocator, upcast_for_dot
from ..validate import FLOAT_DTYPES, check_tensor
from .checks import check_inputs, check_scale, host_offsets, offsets_read_once
from .dispatch import (
    NORM_MMA_FORMS,
    PRECISIONS,
    Launch,
    PlanCache,
    cdiv,
    contiguous_strides,
    launch_for,
    next_power_of_2,
    settings,
)
from .reference import EPS
from .states import states_pass, stored_prefixes
from .sums import _key_sum_mma, _query_key_sum_mma, _query_key_sum_mma_t

__all__ = ["Launch", "Forward", "fused_forward", "fused_linear_attention", "PRECISIONS", "NORM_MMA_FORMS"]

_EPS = tl.constexpr(EPS)
# A chained launch's ring: SLOTS published states per chain, a program waiting on the one before it.
SLOTS = 2
# Polls (~1 µs each) before a wait gives up and poisons its outputs with NaN: a wrong answer, never a hang.
MAX_SPIN = tl.constexpr(1 << 22)
_SLOTS = tl.constexpr(SLOTS)


@triton.jit
def _l2(ptrs):
    """Ask L2 for the lines at ``ptrs`` (one pointer per 128-byte line); nothing waits for them."""
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32,
                              is_pure=False, pack=1)


def _tma_ready(*tensors: torch.Tensor) -> bool:
    """Whether tensor descriptors can address these [B, T, H, D] tensors: 16-byte aligned bases and strides."""
    for t in tensors:
        size = t.element_size()
        if t.data_ptr() % 16 or any(st * size % 16 for st in t.stride()[:-1]) or t.shape[-1] * size < 16:
            return False
    return True


class Forward(NamedTuple):
    """What one forward call produces (and what a backward pass needs of it)."""

    o: torch.Tensor  # [B, T, H, V]
    final_state: torch.Tensor | None  # [N, H, K, V] fp32
    z_state: torch.Tensor | None  # [N, 1, H, K], with normalize=True
    norm: torch.Tensor | None  # [B, T, H] fp32, the normaliser scale·q_t·z_t + EPS, when asked for
    launch: Launch


@triton.jit
def _initial(h0_ptr, offs_state, m_state, BK: tl.constexpr, BV: tl.constexpr, HAS_H0: tl.constexpr):
    if HAS_H0:
        state = tl.load(h0_ptr + offs_state, mask=m_state, other=0.0).to(tl.float32)
    else:
        state = tl.zeros([BK, BV], dtype=tl.float32)
    return state


@triton.jit
def _publish(slot_ptr, state, zs, flag, status, offs_ring, offs_k, BK: tl.constexpr, BV: tl.constexpr,
             NORMALIZE: tl.constexpr):
    """Write a state (and key sum) into a slot, then raise its flag to ``status``: every thread's stores are
    issued before the barrier, and the release makes them visible before the flag."""
    tl.store(slot_ptr + offs_ring, state)
    if NORMALIZE:
        tl.store(slot_ptr + BK * BV + offs_k, zs)
    tl.debug_barrier()
    tl.atomic_xchg(flag, status, sem="release", scope="gpu")


@triton.jit
def _look_back(ring_ptr, flag_ptr, h0_ptr, chain, j, NSEG, last, local, zs, zs_local, offs_ring, offs_k, offs_state,
               m_state, BK: tl.constexpr, BV: tl.constexpr, SLOT: tl.constexpr, HAS_H0: tl.constexpr,
               NORMALIZE: tl.constexpr, INCLUSIVE: tl.constexpr):
    """The decoupled look-back: each segment of a chain has two slots, its own sum (the aggregate, flag 1) and
    its inclusive prefix (flag 2). A segment publishes its aggregate as soon as phase A has it, then walks back
    over its predecessors, adding aggregates until it meets an inclusive prefix, so it waits for predecessors'
    phase A, never for the whole chain before it to hand on one by one; then it publishes its inclusive prefix.
    Segment 0 publishes only its inclusive prefix, so every walk ends. ``INCLUSIVE`` False: only segment 0
    publishes one (a walk then sums every aggregate back to it; the summing path, for tests). Polls of a flag
    still 0 beyond MAX_SPIN poison the state with NaN, as in the serial chain."""
    base = ring_ptr + (chain * NSEG).to(tl.int64) * (2 * SLOT)
    flags = flag_ptr + chain * NSEG
    if j > 0:
        mine = base + (2 * j).to(tl.int64) * SLOT
        if not last:
            _publish(mine, local, zs_local, flags + j, 1, offs_ring, offs_k, BK, BV, NORMALIZE)
        state = tl.zeros([BK, BV], dtype=tl.float32)
        zs = tl.zeros([BK], dtype=tl.float32)
        p = j - 1
        tries = 0
        status = tl.atomic_add(flags + p, 0, sem="acquire", scope="gpu")
        while (status != 2) & (tries < MAX_SPIN):
            if status == 1:
                slot = base + (2 * p).to(tl.int64) * SLOT
                state += tl.load(slot + offs_ring, cache_modifier=".cg")
                if NORMALIZE:
                    zs += tl.load(slot + BK * BV + offs_k, cache_modifier=".cg")
                p -= 1
            else:
                tries += 1
            status = tl.atomic_add(flags + p, 0, sem="acquire", scope="gpu")
        poison = tl.where(status == 2, 1.0, float("nan"))
        slot = base + (2 * p + 1).to(tl.int64) * SLOT
        state = (state + tl.load(slot + offs_ring, cache_modifier=".cg")) * poison
        if NORMALIZE:
            zs = (zs + tl.load(slot + BK * BV + offs_k, cache_modifier=".cg")) * poison
        if INCLUSIVE and not last:
            # this segment's own sum read back from its slot: not kept in registers through the walk
            _publish(mine + SLOT, state + tl.load(mine + offs_ring, cache_modifier=".cg"),
                     zs + tl.load(mine + BK * BV + offs_k, cache_modifier=".cg"), flags + j, 2, offs_ring, offs_k,
                     BK, BV, NORMALIZE)
    else:
        state = _initial(h0_ptr, offs_state, m_state, BK, BV, HAS_H0)
        if not last:
            _publish(base + SLOT, state + local, zs + zs_local, flags, 2, offs_ring, offs_k, BK, BV, NORMALIZE)
    return state, zs


@triton.jit
def _fused_linear_attention_kernel(
    # pointers
    q_ptr, k_ptr, v_ptr, o_ptr, h0_ptr, ht_ptr, z0_ptr, zt_ptr, den_ptr, ring_ptr, flag_ptr, ticket_ptr, cu_ptr,
    seg_ptr, hs_ptr, zs_ptr,
    # sizes
    scale, T, B, H, NSEG,
    # strides (batch, token, head; the last dimension is unit-stride)
    stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh, stride_ob, stride_ot, stride_oh,
    # meta-parameters
    K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BT: tl.constexpr, L: tl.constexpr,
    CHAINED: tl.constexpr, SLOT: tl.constexpr, HAS_H0: tl.constexpr, STORE_HT: tl.constexpr,
    NORMALIZE: tl.constexpr, HAS_Z0: tl.constexpr, STORE_DEN: tl.constexpr, IS_VARLEN: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr, PREFETCH: tl.constexpr, LINE: tl.constexpr, TMA: tl.constexpr,
    QZ_MMA: tl.constexpr, KSUM_MMA: tl.constexpr, KT_LOAD: tl.constexpr, PREFIX: tl.constexpr,
):
    NV: tl.constexpr = (V + BV - 1) // BV
    if CHAINED and PREFIX != 3:
        # Tickets, not program ids: a predecessor (smaller ticket) has always started before its waiter.
        ticket = tl.atomic_add(ticket_ptr, 1)
    else:
        ticket = tl.program_id(0)
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
    if CHAINED:
        t0 = bos + j * L
        t1 = tl.minimum(t0 + L, eos)
    else:
        t0 = bos
        t1 = eos
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
        rows_end = tl.maximum(eos, 1)  # a descriptor has no empty dimension; an empty sequence loads nothing
        q_desc = tl.make_tensor_descriptor(q_base, shape=[rows_end, K], strides=[stride_qt, 1], block_shape=[BT, BK])
        k_desc = tl.make_tensor_descriptor(k_base, shape=[rows_end, K], strides=[stride_kt, 1], block_shape=[BT, BK])
        v_desc = tl.make_tensor_descriptor(v_base, shape=[rows_end, V], strides=[stride_vt, 1], block_shape=[BT, BV])
        o_desc = tl.make_tensor_descriptor(o_base, shape=[rows_end, V], strides=[stride_ot, 1], block_shape=[BT, BV])
    lines_k = tl.arange(0, (BK + LINE - 1) // LINE) * LINE
    lines_v = iv * BV + tl.arange(0, (BV + LINE - 1) // LINE) * LINE

    offs_ring = offs_k[:, None] * BV + tl.arange(0, BV)[None, :]  # [BK, BV]
    offs_state = (n * H + h).to(tl.int64) * K * V + offs_k[:, None] * V + offs_v[None, :]
    m_state = mk[:, None] & mv[None, :]
    offs_z = (n * H + h).to(tl.int64) * K + offs_k  # [BK] into [N, 1, H, K]
    # The running key sum z [BK] in fp32, summed on the CUDA cores: a [BK, 16] tensor-core product in its place
    # gave wrong normalisers on sm_90 (PERF.md, "the normaliser on the H200").
    zs = tl.zeros([BK], dtype=tl.float32)
    if HAS_Z0:
        zs = tl.load(z0_ptr + offs_z, mask=mk, other=0.0).to(tl.float32)
    if CHAINED and PREFIX == 3:
        # The prefix stored by states.py's states kernel before every L tokens (the initial state before the first):
        # no phase A, no wait.
        at = (n * H + h).to(tl.int64) * NSEG + j
        state = tl.load(hs_ptr + at * K * V + offs_k[:, None] * V + offs_v[None, :], mask=m_state,
                        other=0.0).to(tl.float32)
        if NORMALIZE:
            zs = tl.load(zs_ptr + at * K + offs_k, mask=mk, other=0.0)
    elif CHAINED:
        # Phase A: the segment's own Σ kᵀv and Σ k (the last segment of a chain publishes nothing and skips it).
        local = tl.zeros([BK, BV], dtype=tl.float32)
        zs_local = tl.zeros([BK], dtype=tl.float32)
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
            local = tl.dot(tl.trans(kk), vv, local, input_precision=PRECISION)
            if NORMALIZE:
                if KSUM_MMA:
                    zs_local += _key_sum_mma(kk, PRECISION)
                else:
                    zs_local += tl.sum(kk.to(tl.float32), 0)

        if PREFIX == 0:
            # The prefix: the predecessor's published inclusive state (and key sum), or the initial ones. A wait
            # that outlasts MAX_SPIN polls poisons the state with NaN: a broken chain shows as NaN, never a hung GPU.
            ring_base = ring_ptr + (chain * _SLOTS).to(tl.int64) * SLOT
            if j > 0:
                slot = chain * _SLOTS + (j - 1) % _SLOTS
                seen = tl.atomic_add(flag_ptr + slot, 0, sem="acquire", scope="gpu")
                tries = 0
                while (seen != j) & (tries < MAX_SPIN):
                    seen = tl.atomic_add(flag_ptr + slot, 0, sem="acquire", scope="gpu")
                    tries += 1
                poison = tl.where(seen == j, 1.0, float("nan"))
                prev = ring_base + ((j - 1) % _SLOTS) * SLOT
                state = tl.load(prev + offs_ring, cache_modifier=".cg") * poison
                if NORMALIZE:
                    zs = tl.load(prev + BK * BV + offs_k, cache_modifier=".cg") * poison
            else:
                if HAS_H0:
                    state = tl.load(h0_ptr + offs_state, mask=m_state, other=0.0).to(tl.float32)
                else:
                    state = tl.zeros([BK, BV], dtype=tl.float32)
            if not last:
                mine = ring_base + (j % _SLOTS) * SLOT
                tl.store(mine + offs_ring, state + local)
                if NORMALIZE:
                    tl.store(mine + BK * BV + offs_k, zs + zs_local)
                tl.debug_barrier()
                tl.atomic_xchg(flag_ptr + chain * _SLOTS + j % _SLOTS, j + 1, sem="release", scope="gpu")
        else:
            state, zs = _look_back(ring_ptr, flag_ptr, h0_ptr, chain, j, NSEG, last, local, zs, zs_local, offs_ring,
                                   offs_k, offs_state, m_state, BK, BV, SLOT, HAS_H0, NORMALIZE, PREFIX == 1)
    else:
        if HAS_H0:
            state = tl.load(h0_ptr + offs_state, mask=m_state, other=0.0).to(tl.float32)
        else:
            state = tl.zeros([BK, BV], dtype=tl.float32)

    # Phase B: o = scale·(q S + tril(q kᵀ) v), divided by scale·(q·z + rowsum(tril(q kᵀ))) + EPS when
    # normalising; then S += kᵀ v and z += Σ k.
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
            m_qk = mt[:, None] & mk[None, :]
            qq = tl.load(q_base + rows[:, None] * stride_qt + offs_k[None, :], mask=m_qk, other=0.0)
            kk = tl.load(k_base + rows[:, None] * stride_kt + offs_k[None, :], mask=m_qk, other=0.0)
            vv = tl.load(v_base + rows[:, None] * stride_vt + offs_v[None, :], mask=mt[:, None] & mv[None, :],
                         other=0.0)
        if UPCAST:
            qq = qq.to(tl.float32)
            kk = kk.to(tl.float32)
            vv = vv.to(tl.float32)
        scores = tl.where(causal, tl.dot(qq, tl.trans(kk), input_precision=PRECISION), 0.0)  # [BT, BT]
        out = tl.dot(qq, state.to(qq.dtype), input_precision=PRECISION)  # [BT, BV]
        out = tl.dot(scores.to(qq.dtype), vv, out, input_precision=PRECISION)
        if NORMALIZE:
            if QZ_MMA == 1:
                qz = _query_key_sum_mma(qq, zs, PRECISION, 16)
            elif QZ_MMA == 2:
                qz = _query_key_sum_mma(qq, zs, PRECISION, 64)
            elif QZ_MMA == 3:
                qz = _query_key_sum_mma_t(qq, zs, PRECISION)
            elif QZ_MMA == 4:
                qz = _query_key_sum_mma(qq, zs, PRECISION, 32)
            else:
                qz = tl.sum(qq.to(tl.float32) * zs[None, :], 1)
            den = (tl.sum(scores, 1) + qz) * scale + _EPS  # [BT]
            out = out * (scale / den)[:, None]
            if STORE_DEN:
                tl.store(den_ptr + (b.to(tl.int64) * T + rows) * H + h, den, mask=mt & (iv == 0))
            if KSUM_MMA:
                zs += _key_sum_mma(kk, PRECISION)
            else:
                zs += tl.sum(kk.to(tl.float32), 0)
        else:
            out = out * scale
        if TMA:
            o_desc.store([s, iv * BV], out.to(o_ptr.dtype.element_ty))
        else:
            tl.store(o_base + rows[:, None] * stride_ot + offs_v[None, :], out.to(o_ptr.dtype.element_ty),
                     mask=mt[:, None] & mv[None, :])
        if KT_LOAD:
            # kᵀ loaded a second time (from L2) as a [BK, BT] tile: fp32 products need the contracted dimension
            # contiguous in shared memory, the token axis here and the feature axis in q · kᵀ, so one copy of k
            # cannot serve both; a second load keeps both asynchronous (one load written twice through
            # registers, the alternative, waits for k every chunk)
            kt = tl.load(k_base + rows[None, :] * stride_kt + offs_k[:, None], mask=mk[:, None] & mt[None, :],
                         other=0.0)
            if UPCAST:
                kt = kt.to(tl.float32)
        else:
            kt = tl.trans(kk)
        state = tl.dot(kt, vv, state, input_precision=PRECISION)
    if STORE_HT:
        tl.store(ht_ptr + offs_state, state, mask=m_state & last)
    if NORMALIZE and PREFIX != 3:  # with stored prefixes, the states kernel stores the final key sum
        tl.store(zt_ptr + offs_z, zs.to(zt_ptr.dtype.element_ty), mask=mk & last & (iv == 0))


def _segments(lengths: list[int], L: int | None, device) -> tuple[torch.Tensor, int]:
    """The (sequence, segment) of every row of programs, as int32 pairs: segment-major for a chained launch (each
    sequence's segment j before any sequence's j + 1), longest sequence first for whole-sequence programs (the
    longest chains start first). An empty sequence gets one row, which passes its initial state through."""
    if L is None:
        table = [(s, 0) for s in sorted(range(len(lengths)), key=lambda s: -lengths[s])]
    else:
        table = [(s, j) for j, s in sorted((j, s) for s, n in enumerate(lengths) for j in range(max(1, -(-n // L))))]
    return torch.tensor(table, dtype=torch.int32).reshape(-1).to(device), len(table)


def _check_z_state(z_state, N: int, H: int, K: int) -> None:
    check_tensor("z_state", z_state, dtypes=FLOAT_DTYPES, ndim=4, contiguous=True)
    if tuple(z_state.shape) != (N, 1, H, K):
        raise ValueError(f"z_state in initial_state must have shape [N, 1, H, K] = {(N, 1, H, K)}, "
                         f"got {tuple(z_state.shape)}")


def fused_forward(q, k, v, scale, initial_state=None, z_state=None, output_final_state=False, normalize=False,
                  cu_seqlens=None, *, save_norm=False, launch: Launch | None = None) -> Forward:
    """Causal linear attention in one pass: ``o_t = scale · q_tᵀ S_t``, divided by ``scale · q_t · z_t + EPS``
    when normalising (``z_t = z_state + Σ_{s≤t} k_s``, per sequence).

    q, k: [B, T, H, K]; v: [B, T, H, V]; initial_state: [N, H, K, V] (any float dtype, contiguous); z_state:
    [N, 1, H, K], only with ``normalize=True``; cu_seqlens: N + 1 offsets into a batch of one. Returns
    :class:`Forward`: ``o`` in q's dtype (promoted with z_state's when normalising, as fla-core does), the fp32
    final state or None, the ``z_state`` at each sequence's end (k's dtype promoted with z_state's) when
    normalising, and with ``save_norm=True`` the normaliser of every token. ``launch`` overrides the dispatch. A
    launch of the states kernels whose workspace does not fit on the device gives way to the fused kernel's (with a
    ``RuntimeWarning``): the same answer, slower, with no workspace but a chained launch's ring of a few states.
    """
    with offsets_read_once(cu_seqlens):  # one wait for the device for the checks and the segment table
        return _forward(q, k, v, scale, initial_state, z_state, output_final_state, normalize, cu_seqlens, save_norm,
                        launch)


class _Plan(NamedTuple):
    """What the checks and the dispatch decide for one call, all but its tensors: the same for every call of a
    key (:func:`_key`), so kept and reused."""

    sizes: tuple  # B, T, H, K, V, N
    launch: Launch
    odtype: torch.dtype
    zdtype: torch.dtype
    zero_h0: bool  # start from a zeroed final-state buffer (no initial state, a final one, whole sequences)
    grid: tuple | None  # None for a states launch
    slot: int
    chains: int  # chains of a chained launch (their ring and flags), else 0
    nseg: int  # the most segments of one chain (a decoupled look-back's slots a chain), else 0
    constants: dict  # the kernel's meta-parameters, TMA left to the call
    strides: tuple  # q's, k's, v's and o's (batch, token, head)
    seg: torch.Tensor | None = None  # a packed call's segment table on the device (read by the kernel, never written)


#: key -> _Plan of the calls seen.
_PLANS = PlanCache()
#: the same for packed calls, apart: a training run's offsets change every step (its layers share them), and their
#: plans would otherwise empty the dense calls' cache every 256 steps
_PACKED_PLANS = PlanCache(32)


def _meta(t) -> tuple | None:
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


def _key(q, k, v, initial_state, z_state, output_final_state, normalize, save_norm):
    """What every check and the plan depend on, for the calls whose plan is kept: tensors (shape, strides, dtype,
    device: a call that matches a checked one passes the same checks), bools that are bools, no launch given
    (a packed call's key adds its offsets' values, :func:`_forward`); None for the others, which are checked and
    planned every time."""
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
            and (initial_state is None or isinstance(initial_state, torch.Tensor))
            and (z_state is None or isinstance(z_state, torch.Tensor))
            and output_final_state.__class__ is bool and normalize.__class__ is bool):
        return None
    return (_meta(q), _meta(k), _meta(v), _meta(initial_state), _meta(z_state), output_final_state, normalize,
            bool(save_norm), settings())


def _forward(q, k, v, scale, initial_state, z_state, output_final_state, normalize, cu_seqlens, save_norm,
             launch) -> Forward:
    key = _key(q, k, v, initial_state, z_state, output_final_state, normalize, save_norm) if launch is None else None
    if key is not None and cu_seqlens is not None:
        # a packed call's plan (its segment table among it) is kept by its offsets' values, read once for the call:
        # the layers of one step share their offsets, and each would build the same table again after the wait
        key = (key, _meta(cu_seqlens), tuple(host_offsets(cu_seqlens))) \
            if isinstance(cu_seqlens, torch.Tensor) and cu_seqlens.dim() == 1 else None
    plans = _PLANS if cu_seqlens is None else _PACKED_PLANS
    plan = plans.get(key) if key is not None else None
    if plan is None:
        plan = _plan(q, k, v, scale, initial_state, z_state, output_final_state, normalize, cu_seqlens, save_norm,
                     launch)
        if key is not None:
            plans.put(key, plan)
    else:
        check_scale(scale)  # its value is not in the key
    B, T, H, K, V, N = plan.sizes
    launch = plan.launch
    device = q.device
    o = torch.empty(B, T, H, V, dtype=plan.odtype, device=device)
    ht = torch.empty(N, H, K, V, dtype=torch.float32, device=device) if output_final_state else None
    zt = torch.empty(N, 1, H, K, dtype=plan.zdtype, device=device) if normalize else None
    den = torch.empty(B, T, H, dtype=torch.float32, device=device) if normalize and save_norm else None
    h0 = ht.zero_() if plan.zero_h0 else initial_state
    if B * H == 0:
        return Forward(o, ht.zero_() if ht is not None else None, zt.zero_() if zt is not None else None, den,
                       launch)
    if launch.states:  # the two kernels of states.py (dispatch candidate "d256-states")
        try:
            states_pass(q, k, v, o, scale, h0, ht, z_state, zt, den, strides=plan.strides, **plan.constants)
            return Forward(o, ht, zt, den, launch)
        except torch.OutOfMemoryError as e:
            # its workspace (stored states, copies of k and v) is allocated before either kernel writes: where it
            # does not fit, the fused kernel's launch, which needs none, computes the same call
            plan = _plan(q, k, v, scale, initial_state, z_state, output_final_state, normalize, cu_seqlens,
                         save_norm, launch_for(q, v, fused=True))
            launch = plan.launch
            h0 = ht.zero_() if plan.zero_h0 else initial_state
            reason = str(e).splitlines()[0] if str(e) else "out of memory"
            warnings.warn(f"chunk_linear_attn: the states launch's workspace did not fit on {q.device} ({reason}); "
                          "ran the fused kernel, which needs none, instead (slower at this size)", RuntimeWarning,
                          stacklevel=3)
    seg, grid = plan.seg, plan.grid
    hs = zs = None
    if launch.prefix == 3:  # every segment's prefix stored by a states pass first; no ring, no tickets
        hs, zs = stored_prefixes(k, v, h0, ht, z_state, zt, L=launch.L, BT=launch.BT, precision=launch.precision,
                                 upcast=plan.constants["UPCAST"], strides=plan.strides[3:9])
        ring = flags = ticket = None
        if T == 0:  # the states kernel has passed the initial state and key sum through: no output to write
            return Forward(o, ht, zt, den, launch)
    elif plan.chains:
        # the serial chain: a ring of SLOTS states a chain, a flag each; the look-back: a flag for every segment of
        # a chain, and two slots (own sum, inclusive prefix)
        flagged = plan.nseg if launch.prefix else SLOTS
        sync = torch.zeros(1 + plan.chains * flagged, dtype=torch.int32, device=device)
        ring = torch.empty(plan.chains * flagged * (2 if launch.prefix else 1) * plan.slot, dtype=torch.float32,
                           device=device)
        flags, ticket = sync[1:], sync
    else:
        ring = flags = ticket = None
    tma = launch.tma and _tma_ready(q, k, v, o)
    if tma and not INTERPRET:
        ensure_triton_allocator()
    _fused_linear_attention_kernel[grid](
        q, k, v, o, h0, ht, z_state, zt, den, ring, flags, ticket, cu_seqlens, seg, hs, zs,
        float(scale), T, B, H, plan.nseg, *plan.strides,
        TMA=tma, **plan.constants,
    )
    return Forward(o, ht, zt, den, launch)


def _plan(q, k, v, scale, initial_state, z_state, output_final_state, normalize, cu_seqlens, save_norm,
          launch) -> _Plan:
    """Check one call and decide its launch."""
    p = check_inputs(q, k, v, scale, initial_state, output_final_state, cu_seqlens)
    B, T, H, K, V, N = p.B, p.T, p.H, p.K, p.V, p.N
    if not isinstance(normalize, bool):
        raise TypeError(f"normalize must be a bool, got {type(normalize).__name__}")
    if z_state is not None:
        if not normalize:
            raise TypeError("z_state belongs to normalize=True")
        _check_z_state(z_state, N, H, K)
    lengths = None
    if cu_seqlens is not None:
        offsets = host_offsets(cu_seqlens)
        lengths = [e - s for s, e in zip(offsets, offsets[1:])]
    if launch is None:
        launch = launch_for(q, v, lengths)
    launch.check()
    BK = max(16, next_power_of_2(K))
    BV = max(16, min(launch.BV, next_power_of_2(V)))
    NV = cdiv(V, BV)

    zdtype = k.dtype if z_state is None else torch.promote_types(k.dtype, z_state.dtype)
    odtype = torch.promote_types(q.dtype, zdtype) if normalize else q.dtype
    # Start from a loaded zero state, not a constant one: with a constant start and the final state kept for the
    # store, ptxas serialises the loop's wgmma (warning C7515; PERF.md, run 16).
    zero_h0 = output_final_state and initial_state is None and launch.L is None
    chained = launch.L is not None
    seg = None
    if lengths is None:
        grid = (((max(1, cdiv(T, launch.L)) if chained else 1) * B) * H * NV,)
    elif launch.states:
        grid = None  # refused below
    else:
        seg, rows = _segments(lengths, launch.L, q.device)
        grid = (rows * H * NV,)
    slot = BK * BV + (BK if normalize else 0)
    qz_mma, ksum_mma = NORM_MMA_FORMS[launch.norm_mma]
    constants = dict(
        K=K, V=V, BK=BK, BV=BV, BT=launch.BT, L=launch.L or 0, CHAINED=chained, SLOT=slot,
        HAS_H0=initial_state is not None or zero_h0, STORE_HT=bool(output_final_state), NORMALIZE=normalize,
        HAS_Z0=z_state is not None, STORE_DEN=normalize and bool(save_norm), IS_VARLEN=cu_seqlens is not None,
        UPCAST=upcast_for_dot(q.dtype), PRECISION=launch.precision, PREFETCH=0 if INTERPRET else launch.prefetch,
        LINE=128 // q.element_size(), QZ_MMA=qz_mma if normalize else 0, KSUM_MMA=normalize and ksum_mma,
        KT_LOAD=launch.kt, PREFIX=launch.prefix if chained else 0, num_warps=launch.num_warps,
        num_stages=launch.num_stages,
    )
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *contiguous_strides(B, T, H, V)[:3])
    if launch.states:
        if cu_seqlens is not None:
            raise ValueError("a launch with states set does not take packed sequences (cu_seqlens)")
        constants = dict(S=launch.states * launch.BT, BT=launch.BT, BV=BV, num_warps=launch.num_warps,
                         num_stages=launch.num_stages, precision=launch.precision, upcast=upcast_for_dot(q.dtype),
                         qz_mma=bool(qz_mma), loop=launch.states_loop, kv_t=launch.kv_t)
        strides = (q.stride()[:3], k.stride()[:3], v.stride()[:3], contiguous_strides(B, T, H, V)[:3])
        return _Plan((B, T, H, K, V, N), launch, odtype, zdtype, zero_h0, grid, slot, 0, 0, constants, strides)
    nseg = max(cdiv(n, launch.L) for n in (lengths or [T]) + [1]) if chained and launch.prefix else 0
    if chained and launch.prefix == 3:
        if cu_seqlens is not None:
            raise ValueError("a launch with stored prefixes (prefix=3) does not take packed sequences (cu_seqlens)")
        # the states kernel takes the initial state and key sum and stores the final ones
        constants.update(HAS_H0=False, STORE_HT=False, HAS_Z0=False)
    return _Plan((B, T, H, K, V, N), launch, odtype, zdtype, zero_h0, grid, slot, N * H * NV if chained else 0, nseg,
                 constants, strides, seg)



def fused_linear_attention(q, k, v, scale, initial_state=None, output_final_state=False, cu_seqlens=None, *,
                           launch: Launch | None = None):
    """The versions' signature: unnormalised, ``(o, final_state or None)``."""
    f = fused_forward(q, k, v, scale, initial_state, None, output_final_state, False, cu_seqlens, launch=launch)
    return f.o, f.final_state
