"""Chunked causal linear attention: one program per (sequence, head, V-block) walks its chunks in order.

The rung adds the chunked form: within a chunk of BT tokens the causal part is a masked matmul,
``causal(q_c k_cᵀ) v_c``; everything earlier arrives through the fp32 state ``S`` [K, BV] held on-chip,
``o_c = scale · (q_c S + causal(q_c k_cᵀ) v_c)`` and then ``S += k_cᵀ v_c``. Q, K, V are read once and O written
once. Limits: the whole key head (K ≤ 256) stays on-chip, and a sequence's chunks run one after another, so short
batches with few heads leave most of the GPU idle (the lookback rung splits the sequence).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..device import INTERPRET, upcast_for_dot
from ..validate import check_power_of_two
from .checks import check_inputs

__all__ = ["chunked_linear_attention"]


@triton.jit
def _chunked_linear_attention_kernel(
    # pointers
    q_ptr, k_ptr, v_ptr, o_ptr, h0_ptr, ht_ptr, cu_ptr,
    # sizes
    T, H, K, V, scale,
    # strides (the last dimension has unit stride)
    stride_qb, stride_qt, stride_qh,
    stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh,
    stride_ob, stride_ot, stride_oh,
    # meta-parameters
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    USE_H0: tl.constexpr, STORE_HT: tl.constexpr, IS_VARLEN: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr,
):
    pid_v = tl.program_id(0)
    pid_nh = tl.program_id(1).to(tl.int64)
    i_n = pid_nh // H
    i_h = pid_nh % H
    if IS_VARLEN:
        i_b = 0
        bos = tl.load(cu_ptr + i_n).to(tl.int32)
        eos = tl.load(cu_ptr + i_n + 1).to(tl.int32)
    else:
        i_b = i_n
        bos = 0
        eos = T
    q_base = q_ptr + i_b * stride_qb + i_h * stride_qh
    k_base = k_ptr + i_b * stride_kb + i_h * stride_kh
    v_base = v_ptr + i_b * stride_vb + i_h * stride_vh
    o_base = o_ptr + i_b * stride_ob + i_h * stride_oh

    offs_c = tl.arange(0, BT)
    offs_k = tl.arange(0, BK)
    offs_v = pid_v * BV + tl.arange(0, BV)
    mask_k = offs_k < K
    mask_v = offs_v < V
    causal = offs_c[:, None] >= offs_c[None, :]  # [BT, BT]

    state = tl.zeros([BK, BV], dtype=tl.float32)
    offs_s = pid_nh * K * V + offs_k[:, None] * V + offs_v[None, :]  # [BK, BV]
    mask_s = mask_k[:, None] & mask_v[None, :]
    if USE_H0:
        state += tl.load(h0_ptr + offs_s, mask=mask_s, other=0.0).to(tl.float32)

    for i in range(0, tl.cdiv(eos - bos, BT)):
        offs_t = bos + i * BT + offs_c
        mask_t = offs_t < eos
        offs_t = offs_t.to(tl.int64)
        mask_qk = mask_t[:, None] & mask_k[None, :]
        mask_vo = mask_t[:, None] & mask_v[None, :]
        q = tl.load(q_base + offs_t[:, None] * stride_qt + offs_k[None, :], mask=mask_qk, other=0.0)  # [BT, BK]
        k = tl.load(k_base + offs_t[:, None] * stride_kt + offs_k[None, :], mask=mask_qk, other=0.0)  # [BT, BK]
        v = tl.load(v_base + offs_t[:, None] * stride_vt + offs_v[None, :], mask=mask_vo, other=0.0)  # [BT, BV]
        if UPCAST:
            q, k, v = q.to(tl.float32), k.to(tl.float32), v.to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION)  # [BT, BT]
        scores = tl.where(causal, scores, 0.0)
        acc = tl.dot(q, state.to(q.dtype), input_precision=PRECISION)  # [BT, BV]
        acc = tl.dot(scores.to(v.dtype), v, acc, input_precision=PRECISION)
        o = (acc * scale).to(o_ptr.dtype.element_ty)
        tl.store(o_base + offs_t[:, None] * stride_ot + offs_v[None, :], o, mask=mask_vo)
        state = tl.dot(tl.trans(k), v, state, input_precision=PRECISION)

    if STORE_HT:
        tl.store(ht_ptr + offs_s, state, mask=mask_s)


def _blocks(K: int, V: int) -> tuple[int, int, int]:
    """``BK`` covers the key head; ``BV`` splits V over programs (small under the interpreter, to test the split)."""
    BK = max(16, triton.next_power_of_2(K))
    BV = min(max(16, triton.next_power_of_2(V)), 32 if INTERPRET or BK > 128 else 64)
    return BK, BV, 4 if BK * BV <= 128 * 64 else 8


def _stages(BT: int, BK: int, BV: int, itemsize: int) -> int:
    """Three buffered loads of q, k, v tiles fit in an H100/H200's 227 KiB of shared memory unless fp32 K > 128."""
    return 3 if BT * (2 * BK + BV) * itemsize <= 96 * 1024 else 2


def chunked_linear_attention(q, k, v, scale, initial_state=None, output_final_state=False, cu_seqlens=None, *,
                             chunk_size: int = 64, num_warps: int | None = None, block_v: int | None = None):
    """Causal linear attention, unnormalised: ``(o [B, T, H, V], final_state [N, H, K, V] fp32 or None)``.

    q, k: [B, T, H, K]; v: [B, T, H, V] (fp32, fp16 or bf16; last dimension contiguous); initial_state:
    [N, H, K, V], contiguous; cu_seqlens: N+1 offsets (int32/int64) into a batch of one. ``num_warps`` and
    ``block_v`` (the V columns one program owns) override the defaults for measurements (``PERF.md``).
    """
    p = check_inputs(q, k, v, scale, initial_state, output_final_state, cu_seqlens)
    if chunk_size not in (16, 32, 64, 128):
        raise ValueError(f"chunk_size={chunk_size} must be 16, 32, 64 or 128")
    if chunk_size == 128 and (p.K > 128 or q.dtype == torch.float32):
        raise ValueError(f"chunk_size=128 needs fp16/bf16 inputs and K <= 128 (got {q.dtype}, K={p.K}): its "
                         "[128, K] tiles do not fit on-chip otherwise; use 64")
    o = torch.empty(*q.shape[:3], p.V, dtype=q.dtype, device=q.device)
    ht = None
    if output_final_state:
        ht = torch.empty(p.N, p.H, p.K, p.V, dtype=torch.float32, device=q.device)
        if initial_state is None:
            # Start from a loaded zero state, not a constant one: with a constant start and the final state kept
            # for the store, ptxas serialises the loop's wgmma instructions (warning C7515); from a loaded state
            # it does not (PERF.md, run 16). Each program reads its slice of the buffer before writing it.
            initial_state = ht.zero_()
    BK, BV, warps = _blocks(p.K, p.V)
    if num_warps is not None:  # a measurement's override (PERF.md, run 13: 8 warps is slower at D=128)
        check_power_of_two("num_warps", num_warps, lo=1, hi=16)
        warps = num_warps
    if block_v is not None:  # a measurement's override (PERF.md, run 17: BV = 32 is slower at D=128)
        check_power_of_two("block_v", block_v, lo=16, hi=64)
        BV = block_v
    grid = (triton.cdiv(p.V, BV), p.N * p.H)
    _chunked_linear_attention_kernel[grid](
        q, k, v, o, initial_state, ht, cu_seqlens,
        p.T, p.H, p.K, p.V, float(scale),
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        BT=chunk_size, BK=BK, BV=BV,
        USE_H0=initial_state is not None, STORE_HT=output_final_state, IS_VARLEN=cu_seqlens is not None,
        UPCAST=upcast_for_dot(q.dtype), PRECISION="ieee" if q.dtype == torch.float32 else None,
        num_warps=warps, num_stages=_stages(chunk_size, BK, BV, q.element_size()),
    )
    return o, ht
