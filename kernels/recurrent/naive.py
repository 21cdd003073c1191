"""Naive recurrence: one program per (batch, head); the state lives in an fp32 HBM buffer.

Every step reads the whole ``K×V`` state from memory, adds ``k_t v_tᵀ``, writes it back and forms
``o_t = scale · q_tᵀ S_t``, a ``BV``-column slab at a time. The state traffic, ``2·K·V·4`` bytes per step and head,
dwarfs the ``(2K + 2V)·itemsize`` bytes of q, k, v, o, and only ``B·H`` programs run, so most of the GPU idles.
"""

import torch
import triton
import triton.language as tl

from ._checks import check_inputs, output

__all__ = ["naive_recurrent", "bytes_moved"]


@triton.jit
def _naive_recurrent_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, s_ptr,
    scale, T, H, K, V,
    stride_qb, stride_qt, stride_qh,
    stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh,
    stride_ob, stride_ot, stride_oh,
    BK: tl.constexpr, BV: tl.constexpr,
):
    i_bh = tl.program_id(axis=0)
    i_b, i_h = i_bh // H, i_bh % H
    offs_k = tl.arange(0, BK)  # [BK]
    mask_k = offs_k < K
    q_base = q_ptr + i_b * stride_qb + i_h * stride_qh
    k_base = k_ptr + i_b * stride_kb + i_h * stride_kh
    v_base = v_ptr + i_b * stride_vb + i_h * stride_vh
    o_base = o_ptr + i_b * stride_ob + i_h * stride_oh
    s_base = s_ptr + i_bh.to(tl.int64) * K * V
    for t in range(T):
        q = tl.load(q_base + t * stride_qt + offs_k, mask=mask_k, other=0.0).to(tl.float32) * scale  # [BK]
        k = tl.load(k_base + t * stride_kt + offs_k, mask=mask_k, other=0.0).to(tl.float32)  # [BK]
        for v0 in range(0, V, BV):
            offs_v = v0 + tl.arange(0, BV)  # [BV]
            mask_v = offs_v < V
            v = tl.load(v_base + t * stride_vt + offs_v, mask=mask_v, other=0.0).to(tl.float32)  # [BV]
            s_ptrs = s_base + offs_k[:, None] * V + offs_v[None, :]  # [BK, BV]
            mask_s = mask_k[:, None] & mask_v[None, :]
            s = tl.load(s_ptrs, mask=mask_s, other=0.0) + k[:, None] * v[None, :]  # [BK, BV]
            tl.store(s_ptrs, s, mask=mask_s)
            # a replicated layout may have another thread reload this slab next step: make the store visible
            tl.debug_barrier()
            o = tl.sum(q[:, None] * s, axis=0)  # [BV]
            tl.store(o_base + t * stride_ot + offs_v, o.to(o_ptr.dtype.element_ty), mask=mask_v)


def bytes_moved(B: int, T: int, H: int, K: int, V: int, itemsize: int = 2, *, initial_state: bool = False,
                output_final_state: bool = False) -> int:
    """Bytes through the memory system: q, k, v, o once, the fp32 state read and written every step.

    At the workbook's GPU sizes the whole state buffer (``B·H·K·V·4`` bytes) fits in L2, so much of that traffic is
    served there rather than by HBM; the count is what the kernel asks of memory.
    """
    io = B * T * H * (2 * K + 2 * V) * itemsize
    state = B * H * T * 2 * K * V * 4
    return io + state + B * H * K * V * 4 * (int(initial_state) + int(output_final_state))


def naive_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None,
                    initial_state: torch.Tensor | None = None, output_final_state: bool = False,
                    block_v: int | None = None, out: torch.Tensor | None = None):
    """Causal linear attention by the recurrence; returns ``(o, final_state or None)``.

    q, k: ``[B, T, H, K]``; v: ``[B, T, H, V]`` (one float dtype, unit stride in the last dimension); scale
    defaults to ``K**-0.5``; initial_state: ``[B, H, K, V]``. o has v's shape and dtype (written into ``out`` if
    given); final_state is fp32.
    """
    B, T, H, K, V, scale, BK, BV = check_inputs(q, k, v, scale, initial_state, block_v)
    if initial_state is None:
        state = torch.zeros(B, H, K, V, dtype=torch.float32, device=q.device)
    else:
        state = initial_state.to(torch.float32, copy=True)
    o = output("out", out, tuple(v.shape), v.dtype, v)
    _naive_recurrent_kernel[(B * H,)](
        q, k, v, o, state,
        scale, T, H, K, V,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        BK=BK, BV=BV,
    )
    return o, (state if output_final_state else None)
