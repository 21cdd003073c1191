"""The backward pass of chunked causal linear attention: two Triton passes, one forward in time, one backward.

With ``S_t = S_0 + Σ_{s≤t} k_s v_sᵀ``, ``o_t = scale · S_tᵀ q_t`` and ``dH_t = dS_T + scale · Σ_{u≥t} q_u do_uᵀ``
(the gradient reaching ``S_t`` from every later output and from the final state): ``dq_t = scale · S_t do_t``,
``dk_s = dH_s v_s``, ``dv_s = dH_sᵀ k_s`` and ``dS_0 = dH_1``. Chunked, each is an inter-chunk matmul with a carried
state plus a masked intra-chunk one. The dq pass walks chunks forward, rebuilding ``S`` on-chip; the dk/dv pass
walks them from the last to the first carrying ``dH``, used for a chunk before the chunk's own ``scale · q_cᵀ do_c``
is added. The three are one scan, ``out = A·G + (A·Bᵀ ⊙ mask)·C`` with ``G += Bᵀ·C``, over different operands
(README.md, "The backward pass"). Nothing is stored between the passes; each reads its inputs once.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..device import INTERPRET, upcast_for_dot
from .checks import check_inputs, check_scale
from .dispatch import PlanCache, cdiv, contiguous_strides, float32_precision, next_power_of_2

__all__ = ["chunked_backward"]


@triton.jit
def _chunk_scan(
    a_base, b_base, c_base, o_base, g0_ptr, gt_ptr, g_off, gt_on,
    stride_a, stride_b, stride_c, stride_o, stride_ga, stride_gc,
    bos, eos, c0, scale, DA: tl.constexpr, DC: tl.constexpr,
    BT: tl.constexpr, BA: tl.constexpr, BC: tl.constexpr, REVERSE: tl.constexpr,
    USE_G0: tl.constexpr, STORE_GT: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
):
    """One program's scan over a sequence's chunks: ``A, B`` [BT, DA] whole, ``C``, ``out`` [BT, BC] from column
    ``c0``; the state ``G`` [BA, BC] in fp32. Forward (dq): ``out = scale·(A·G + causal(A·Bᵀ)·C)``, then
    ``G += Bᵀ·C``. Reverse (dk, dv): ``out = A·G + scale·anticausal(A·Bᵀ)·C``, then ``G += scale·Bᵀ·C``. The last
    ``G`` is stored where ``STORE_GT`` and ``gt_on``."""
    offs_c = tl.arange(0, BT)
    offs_a = tl.arange(0, BA)
    offs_n = c0 + tl.arange(0, BC)
    mask_a = offs_a < DA
    mask_n = offs_n < DC
    if REVERSE:
        keep = offs_c[:, None] <= offs_c[None, :]  # [BT, BT]: token s sees u ≥ s
    else:
        keep = offs_c[:, None] >= offs_c[None, :]  # [BT, BT]: token t sees s ≤ t
    offs_g = offs_a[:, None] * stride_ga + offs_n[None, :] * stride_gc  # [BA, BC]
    mask_g = mask_a[:, None] & mask_n[None, :]
    g = tl.zeros([BA, BC], dtype=tl.float32)
    if USE_G0:
        g += tl.load(g0_ptr + g_off + offs_g, mask=mask_g, other=0.0).to(tl.float32)
    n_chunks = tl.cdiv(eos - bos, BT)
    for i in range(0, n_chunks):
        if REVERSE:
            start = bos + (n_chunks - 1 - i) * BT
        else:
            start = bos + i * BT
        offs_t = start + offs_c
        mask_t = offs_t < eos
        offs_t = offs_t.to(tl.int64)
        mask_ta = mask_t[:, None] & mask_a[None, :]
        mask_tn = mask_t[:, None] & mask_n[None, :]
        a = tl.load(a_base + offs_t[:, None] * stride_a + offs_a[None, :], mask=mask_ta, other=0.0)  # [BT, BA]
        b = tl.load(b_base + offs_t[:, None] * stride_b + offs_a[None, :], mask=mask_ta, other=0.0)  # [BT, BA]
        c = tl.load(c_base + offs_t[:, None] * stride_c + offs_n[None, :], mask=mask_tn, other=0.0)  # [BT, BC]
        if UPCAST:
            a, b, c = a.to(tl.float32), b.to(tl.float32), c.to(tl.float32)
        p = tl.dot(a, tl.trans(b), input_precision=PRECISION)  # [BT, BT]
        p = tl.where(keep, p, 0.0).to(c.dtype)
        if REVERSE:
            acc = tl.dot(p, c, input_precision=PRECISION) * scale  # [BT, BC]
            acc = tl.dot(a, g.to(a.dtype), acc, input_precision=PRECISION)
            g += tl.dot(tl.trans(b), c, input_precision=PRECISION) * scale
        else:
            acc = tl.dot(a, g.to(a.dtype), input_precision=PRECISION)  # [BT, BC]
            acc = tl.dot(p, c, acc, input_precision=PRECISION) * scale
            g = tl.dot(tl.trans(b), c, g, input_precision=PRECISION)
        tl.store(o_base + offs_t[:, None] * stride_o + offs_n[None, :], acc.to(o_base.dtype.element_ty), mask=mask_tn)
    if STORE_GT:
        tl.store(gt_ptr + g_off + offs_g, g, mask=mask_g & gt_on)


@triton.jit
def _sequence(cu_ptr, pid_nh, H, T, IS_VARLEN: tl.constexpr):
    """(batch row, head, first token, end) of the program's (sequence, head)."""
    i_n = pid_nh // H
    i_h = pid_nh % H
    if IS_VARLEN:
        i_b = i_n * 0
        bos = tl.load(cu_ptr + i_n).to(tl.int32)
        eos = tl.load(cu_ptr + i_n + 1).to(tl.int32)
    else:
        i_b = i_n
        bos = T * 0
        eos = T
    return i_b, i_h, bos, eos


@triton.jit
def _chunked_dq_kernel(
    # pointers
    k_ptr, v_ptr, do_ptr, dq_ptr, h0_ptr, cu_ptr,
    # sizes
    T, H, scale,
    # strides of [B, T, H, *] (the last dimension has unit stride)
    stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
    stride_ob, stride_ot, stride_oh, stride_qb, stride_qt, stride_qh,
    # meta-parameters
    K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BVA: tl.constexpr,
    USE_H0: tl.constexpr, IS_VARLEN: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr,
):
    """Program (K block, sequence·head): ``dq[:, kb] = scale · (do S[kb]ᵀ + causal(do vᵀ) k[:, kb])``, with the
    state block ``S[kb]ᵀ`` [V, BK] rebuilt chunk by chunk from ``S_0``."""
    pid_k = tl.program_id(0)
    pid_nh = tl.program_id(1).to(tl.int64)
    i_b, i_h, bos, eos = _sequence(cu_ptr, pid_nh, H, T, IS_VARLEN)
    _chunk_scan(do_ptr + i_b * stride_ob + i_h * stride_oh, v_ptr + i_b * stride_vb + i_h * stride_vh,
                k_ptr + i_b * stride_kb + i_h * stride_kh, dq_ptr + i_b * stride_qb + i_h * stride_qh,
                h0_ptr, h0_ptr, pid_nh * K * V, False, stride_ot, stride_vt, stride_kt, stride_qt, 1, V,
                bos, eos, pid_k * BK, scale, V, K,
                BT=BT, BA=BVA, BC=BK, REVERSE=False, USE_G0=USE_H0, STORE_GT=False, UPCAST=UPCAST,
                PRECISION=PRECISION)


@triton.jit
def _chunked_dkdv_kernel(
    # pointers
    q_ptr, k_ptr, v_ptr, do_ptr, dk_ptr, dv_ptr, dht_ptr, dh0_ptr, cu_ptr,
    # sizes
    T, H, scale,
    # strides of [B, T, H, *] (the last dimension has unit stride)
    stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh, stride_ob, stride_ot, stride_oh,
    stride_dkb, stride_dkt, stride_dkh, stride_dvb, stride_dvt, stride_dvh,
    # meta-parameters
    K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    BKA: tl.constexpr, BVA: tl.constexpr,
    NK: tl.constexpr, SHARED: tl.constexpr, USE_DHT: tl.constexpr, STORE_DH0: tl.constexpr, IS_VARLEN: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr,
):
    """Programs 0..NK-1 of axis 0: ``dk[:, kb] = v dH[kb]ᵀ + scale·anticausal(v doᵀ) q[:, kb]`` carrying
    ``dH[kb, :]ᵀ`` [V, BK]; the rest: ``dv[:, vb] = k dH[:, vb] + scale·anticausal(k qᵀ) do[:, vb]`` carrying
    ``dH[:, vb]`` [K, BV], whose last value is ``dS_0``. Both walk from the last chunk to the first."""
    pid = tl.program_id(0)
    pid_nh = tl.program_id(1).to(tl.int64)
    i_b, i_h, bos, eos = _sequence(cu_ptr, pid_nh, H, T, IS_VARLEN)
    q_base = q_ptr + i_b * stride_qb + i_h * stride_qh
    k_base = k_ptr + i_b * stride_kb + i_h * stride_kh
    v_base = v_ptr + i_b * stride_vb + i_h * stride_vh
    do_base = do_ptr + i_b * stride_ob + i_h * stride_oh
    state = pid_nh * K * V
    dk_base = dk_ptr + i_b * stride_dkb + i_h * stride_dkh
    dv_base = dv_ptr + i_b * stride_dvb + i_h * stride_dvh
    is_dk = pid < NK
    if SHARED:
        # K = V: one copy of the loop with the operands picked per program, so the pass needs the shared memory
        # of one scan, not two, and two of its programs fit on an SM
        _chunk_scan(tl.where(is_dk, v_base, k_base), tl.where(is_dk, do_base, q_base),
                    tl.where(is_dk, q_base, do_base), tl.where(is_dk, dk_base, dv_base),
                    dht_ptr, dh0_ptr, state, not is_dk, tl.where(is_dk, stride_vt, stride_kt),
                    tl.where(is_dk, stride_ot, stride_qt), tl.where(is_dk, stride_qt, stride_ot),
                    tl.where(is_dk, stride_dkt, stride_dvt), tl.where(is_dk, 1, V), tl.where(is_dk, V, 1),
                    bos, eos, tl.where(is_dk, pid, pid - NK) * BK, scale, K, K,
                    BT=BT, BA=BKA, BC=BK, REVERSE=True, USE_G0=USE_DHT, STORE_GT=STORE_DH0, UPCAST=UPCAST,
                    PRECISION=PRECISION)
    elif is_dk:
        _chunk_scan(v_base, do_base, q_base, dk_base, dht_ptr, dh0_ptr, state, False,
                    stride_vt, stride_ot, stride_qt, stride_dkt, 1, V, bos, eos, pid * BK, scale, V, K,
                    BT=BT, BA=BVA, BC=BK, REVERSE=True, USE_G0=USE_DHT, STORE_GT=False, UPCAST=UPCAST,
                    PRECISION=PRECISION)
    else:
        _chunk_scan(k_base, q_base, do_base, dv_base, dht_ptr, dh0_ptr, state, True,
                    stride_kt, stride_qt, stride_ot, stride_dvt, V, 1, bos, eos, (pid - NK) * BV, scale, K, V,
                    BT=BT, BA=BKA, BC=BV, REVERSE=True, USE_G0=USE_DHT, STORE_GT=STORE_DH0, UPCAST=UPCAST,
                    PRECISION=PRECISION)


def _blocks(K: int, V: int, dtype: torch.dtype) -> tuple[int, int, int, int, int, int]:
    """``(BT, BK, BV, BKA, BVA, warps)``: chunk, the split blocks of K and V, the whole heads (powers of two)."""
    BKA = max(16, next_power_of_2(K))
    BVA = max(16, next_power_of_2(V))
    if INTERPRET:
        return 16, 16, 16, BKA, BVA, 4
    wide = max(BKA, BVA) > 128 or dtype == torch.float32
    BT = 32 if wide and max(BKA, BVA) > 128 else 64
    BK = min(BKA, 32 if max(BKA, BVA) > 128 else 64)
    BV = min(BVA, 32 if max(BKA, BVA) > 128 else 64)
    return BT, BK, BV, BKA, BVA, 8 if wide else 4


def _strides(x: torch.Tensor) -> tuple[int, int, int]:
    return x.stride()[:3]


class _Plan(NamedTuple):
    """What the checks and the block choice decide for one call, all but its tensors (kept per key)."""

    sizes: tuple  # N, T, H, K, V
    dq_grid: tuple
    dq_constants: dict
    dkdv_grid: tuple
    dkdv_constants: dict
    strides: tuple  # q's, k's, v's, do's and the gradients' (batch, token, head), each three


#: key -> _Plan of the unpacked calls seen with the default launch settings.
_PLANS = PlanCache()


def _meta(t) -> tuple | None:
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


def chunked_backward(q, k, v, do, scale, initial_state=None, dht=None, cu_seqlens=None, *,
                     need_dh0: bool = False, num_stages: int | None = None, num_warps: int | None = None,
                     maxnreg: int | None = None, block: int | None = None, passes: tuple[str, ...] = ("dq", "dkdv")):
    """Gradients of ``o = chunked_linear_attention(q, k, v, scale, initial_state)`` (unnormalised) and of its
    final state: ``(dq, dk, dv, dh0)``, dq/dk/dv in q's dtype and ``dh0`` [N, H, K, V] fp32 (None unless
    ``need_dh0``). do: [B, T, H, V]; dht: the final state's gradient [N, H, K, V] or None (zero).
    ``num_stages``, ``num_warps``, ``maxnreg`` (registers a thread may use), ``block`` (the K and V columns a
    program owns, a power of two; whole heads at their size or more) and ``passes`` (which of the two run; the
    other's outputs stay unwritten) are for measurements (``scripts/gpu_backward_probe.py``).

    A call like one seen before (tensors of the same shapes, strides, dtypes and devices, no offsets, the default
    launch settings) passes the same checks and takes the same blocks: those are kept per key and reused."""
    key = None
    if (cu_seqlens is None and num_stages is None and num_warps is None and maxnreg is None and block is None
            and passes == ("dq", "dkdv") and isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)
            and isinstance(v, torch.Tensor) and isinstance(do, torch.Tensor)
            and (initial_state is None or isinstance(initial_state, torch.Tensor))
            and (dht is None or isinstance(dht, torch.Tensor))):
        key = (_meta(q), _meta(k), _meta(v), _meta(do), _meta(initial_state), _meta(dht), bool(need_dh0), INTERPRET,
               torch.get_float32_matmul_precision())
        plan = _PLANS.get(key)
        if plan is not None:
            check_scale(scale)  # its value is not in the key
            return _run(plan, q, k, v, do, scale, initial_state, dht, None, need_dh0, passes)
    plan = _plan(q, k, v, do, scale, initial_state, dht, cu_seqlens, need_dh0, num_stages, num_warps, maxnreg, block)
    if key is not None:
        _PLANS.put(key, plan)
    return _run(plan, q, k, v, do, scale, initial_state, dht, cu_seqlens, need_dh0, passes)


def _plan(q, k, v, do, scale, initial_state, dht, cu_seqlens, need_dh0, num_stages, num_warps, maxnreg,
          block) -> _Plan:
    """Check one call and pick its blocks and launch settings."""
    p = check_inputs(q, k, v, scale, initial_state, False, cu_seqlens)
    if do.shape != v.shape or do.dtype != q.dtype:
        raise ValueError(f"do must match v's shape {tuple(v.shape)} and q's dtype {q.dtype}, got "
                         f"{tuple(do.shape)} {do.dtype}")
    if dht is not None and tuple(dht.shape) != (p.N, p.H, p.K, p.V):
        raise ValueError(f"dht must have the final state's shape {(p.N, p.H, p.K, p.V)}, got {tuple(dht.shape)}")
    BT, BK, BV, BKA, BVA, warps = _blocks(p.K, p.V, q.dtype)
    if block is not None:
        BK, BV = min(BKA, block), min(BVA, block)
    warps = num_warps or warps
    # the dq pass has one program per K block and sequence·head, the dk/dv pass twice as many at K = V: two
    # stages let two of its programs share an SM, so all of them are resident at once (PERF.md; whole heads at 8
    # warps and 3 stages, block=128, measured 6-7% slower on the H200)
    stages_dq = num_stages or (1 if INTERPRET else 2 if warps == 8 else 3)
    stages_dkdv = num_stages or (1 if INTERPRET else 2)
    precision = float32_precision() if q.dtype == torch.float32 else None
    upcast = upcast_for_dot(q.dtype)
    varlen = cu_seqlens is not None
    extra = {} if maxnreg is None else {"maxnreg": maxnreg}
    nk = cdiv(p.K, BK)
    dq_constants = dict(K=p.K, V=p.V, BT=BT, BK=BK, BVA=BVA, USE_H0=initial_state is not None, IS_VARLEN=varlen,
                        UPCAST=upcast, PRECISION=precision, num_warps=warps, num_stages=stages_dq, **extra)
    dkdv_constants = dict(K=p.K, V=p.V, BT=BT, BK=BK, BV=BV, BKA=BKA, BVA=BVA, NK=nk, SHARED=p.K == p.V and BK == BV,
                          USE_DHT=dht is not None, STORE_DH0=bool(need_dh0), IS_VARLEN=varlen, UPCAST=upcast,
                          PRECISION=precision, num_warps=warps, num_stages=stages_dkdv, **extra)
    strides = (_strides(q), _strides(k), _strides(v), _strides(do), contiguous_strides(*q.shape)[:3],
               contiguous_strides(*v.shape)[:3])
    return _Plan((p.N, p.T, p.H, p.K, p.V), (nk, p.N * p.H), dq_constants, (nk + cdiv(p.V, BV), p.N * p.H),
                 dkdv_constants, strides)


def _run(plan: _Plan, q, k, v, do, scale, initial_state, dht, cu_seqlens, need_dh0, passes):
    N, T, H, K, V = plan.sizes
    device = q.device
    dq = torch.empty(q.shape, dtype=q.dtype, device=device)
    dk = torch.empty(k.shape, dtype=q.dtype, device=device)
    dv = torch.empty(v.shape, dtype=q.dtype, device=device)
    dh0 = torch.empty(N, H, K, V, dtype=torch.float32, device=device) if need_dh0 else None
    if T == 0:
        if need_dh0:
            dh0.copy_(dht if dht is not None else torch.zeros_like(dh0))
        return dq, dk, dv, dh0
    scale = float(scale)
    st_q, st_k, st_v, st_do, st_dqk, st_dv = plan.strides  # dq and dk are made as q is shaped, dv as v
    if "dq" in passes:
        _chunked_dq_kernel[plan.dq_grid](
            k, v, do, dq, initial_state, cu_seqlens,
            T, H, scale, *st_k, *st_v, *st_do, *st_dqk,
            **plan.dq_constants,
        )
    if "dkdv" not in passes:
        return dq, dk, dv, dh0
    dht = dht.contiguous() if dht is not None else None
    _chunked_dkdv_kernel[plan.dkdv_grid](
        q, k, v, do, dk, dv, dht, dh0, cu_seqlens,
        T, H, scale, *st_q, *st_k, *st_v, *st_do, *st_dqk, *st_dv,
        **plan.dkdv_constants,
    )
    return dq, dk, dv, dh0
