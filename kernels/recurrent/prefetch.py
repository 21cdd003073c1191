"""Fused recurrence with the next step's loads issued early: the same loop as ``fused``, software-pipelined by hand.

Step ``t``'s arithmetic waits on its own loads of ``q_t, k_t, v_t``, and in ``fused`` those loads are issued at the
top of the step, so every step pays a full global-memory latency before it can start. None of them depends on the
state, so this version issues the loads for step ``t + 1`` before it computes step ``t``: the memory latency of
the next step overlaps the arithmetic of this one. The bytes moved are those of ``fused``; only their timing
changes. The state update itself stays sequential.
"""

import torch
import triton
import triton.language as tl

from .fused import bytes_moved, launch

__all__ = ["prefetch_recurrent", "bytes_moved"]


@triton.jit
def _prefetch_recurrent_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, h0_ptr, ht_ptr,
    scale, T, H, K, V,
    stride_qb, stride_qt, stride_qh,
    stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh,
    stride_ob, stride_ot, stride_oh,
    BK: tl.constexpr, BV: tl.constexpr,
    USE_INITIAL_STATE: tl.constexpr, STORE_FINAL_STATE: tl.constexpr,
):
    i_v, i_bh = tl.program_id(axis=0), tl.program_id(axis=1)
    i_b, i_h = i_bh // H, i_bh % H
    offs_k = tl.arange(0, BK)  # [BK]
    offs_v = i_v * BV + tl.arange(0, BV)  # [BV]
    mask_k = offs_k < K
    mask_v = offs_v < V
    mask_s = mask_k[:, None] & mask_v[None, :]
    s_offs = i_bh.to(tl.int64) * K * V + offs_k[:, None] * V + offs_v[None, :]  # [BK, BV]
    if USE_INITIAL_STATE:
        s = tl.load(h0_ptr + s_offs, mask=mask_s, other=0.0).to(tl.float32)
    else:
        s = tl.zeros([BK, BV], dtype=tl.float32)
    q_ptrs = q_ptr + i_b * stride_qb + i_h * stride_qh + offs_k
    k_ptrs = k_ptr + i_b * stride_kb + i_h * stride_kh + offs_k
    v_ptrs = v_ptr + i_b * stride_vb + i_h * stride_vh + offs_v
    o_ptrs = o_ptr + i_b * stride_ob + i_h * stride_oh + offs_v
    # step 0's loads, before the loop
    q_next = tl.load(q_ptrs, mask=mask_k, other=0.0)  # [BK]
    k_next = tl.load(k_ptrs, mask=mask_k, other=0.0)  # [BK]
    v_next = tl.load(v_ptrs, mask=mask_v, other=0.0)  # [BV]
    for t in range(T):
        q = q_next.to(tl.float32) * scale
        k = k_next.to(tl.float32)
        v = v_next.to(tl.float32)
        more = t + 1 < T
        q_ptrs += stride_qt
        k_ptrs += stride_kt
        v_ptrs += stride_vt
        # step t + 1's loads go out now; nothing below waits for them
        q_next = tl.load(q_ptrs, mask=mask_k & more, other=0.0)
        k_next = tl.load(k_ptrs, mask=mask_k & more, other=0.0)
        v_next = tl.load(v_ptrs, mask=mask_v & more, other=0.0)
        s += k[:, None] * v[None, :]
        o = tl.sum(q[:, None] * s, axis=0)  # [BV]
        tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=mask_v)
        o_ptrs += stride_ot
    if STORE_FINAL_STATE:
        tl.store(ht_ptr + s_offs, s, mask=mask_s)


def prefetch_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None,
                       initial_state: torch.Tensor | None = None, output_final_state: bool = False,
                       block_v: int | None = None, num_warps: int = 4, out: torch.Tensor | None = None,
                       final_state_out: torch.Tensor | None = None):
    """Causal linear attention by the recurrence, state in registers, next step's loads issued early; returns
    ``(o, final_state or None)``. Same contract as :func:`kernels.recurrent.fused_recurrent`."""
    return launch(_prefetch_recurrent_kernel, q, k, v, scale, initial_state, output_final_state, block_v,
                  num_warps, out, final_state_out)
