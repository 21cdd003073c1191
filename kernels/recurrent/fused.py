"""Fused recurrence: the state stays in registers across all T steps; V is split over programs.

Program ``(i_v, b·H + h)`` owns the ``[K, BV]`` slab of one head's state. It loads the slab once (from
initial_state, or zeros), then per step reads ``q_t, k_t`` (``K`` values), ``v_t`` (``BV`` values), updates the slab
in registers and writes ``BV`` outputs; the final state is written once at the end. State traffic drops from
``2·K·V·4`` bytes per step to nothing, and ``B·H·cdiv(V, BV)`` programs share the work; the price is that each
program re-reads q and k, and the steps still run one after another.
"""

import torch
import triton
import triton.language as tl

from ._checks import check_inputs, output

__all__ = ["fused_recurrent", "bytes_moved"]


@triton.jit
def _fused_recurrent_kernel(
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
    for _ in range(T):
        q = tl.load(q_ptrs, mask=mask_k, other=0.0).to(tl.float32) * scale  # [BK]
        k = tl.load(k_ptrs, mask=mask_k, other=0.0).to(tl.float32)  # [BK]
        v = tl.load(v_ptrs, mask=mask_v, other=0.0).to(tl.float32)  # [BV]
        s += k[:, None] * v[None, :]
        o = tl.sum(q[:, None] * s, axis=0)  # [BV]
        tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=mask_v)
        q_ptrs += stride_qt
        k_ptrs += stride_kt
        v_ptrs += stride_vt
        o_ptrs += stride_ot
    if STORE_FINAL_STATE:
        tl.store(ht_ptr + s_offs, s, mask=mask_s)


def bytes_moved(B: int, T: int, H: int, K: int, V: int, itemsize: int = 2, *, block_v: int = 32,
                initial_state: bool = False, output_final_state: bool = False, state_itemsize: int = 4) -> int:
    """HBM bytes: q and k once per V block, v and o once, the states once each (if used)."""
    n_v = -(-V // block_v)
    io = B * T * H * (2 * K * n_v + 2 * V) * itemsize
    return io + B * H * K * V * (state_itemsize * int(initial_state) + 4 * int(output_final_state))


def fused_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None,
                    initial_state: torch.Tensor | None = None, output_final_state: bool = False,
                    block_v: int | None = None, num_warps: int = 4, out: torch.Tensor | None = None,
                    final_state_out: torch.Tensor | None = None):
    """Causal linear attention by the recurrence with the state in registers; returns ``(o, final_state or None)``.

    Same contract as :func:`kernels.recurrent.naive_recurrent`; ``block_v`` (a power of two, 16 to 256) sets how
    many columns of V each program owns; ``out`` and ``final_state_out`` may supply the output buffers.
    """
    return launch(_fused_recurrent_kernel, q, k, v, scale, initial_state, output_final_state, block_v, num_warps,
                  out, final_state_out)


def launch(kernel, q, k, v, scale, initial_state, output_final_state, block_v, num_warps, out, final_state_out):
    """Check the inputs, make the outputs and launch ``kernel`` (one of the V-blocked recurrent kernels, which share
    their parameters and grid); returns ``(o, final_state or None)``."""
    B, T, H, K, V, scale, BK, BV = check_inputs(q, k, v, scale, initial_state, block_v)
    o = output("out", out, tuple(v.shape), v.dtype, v)
    final = None
    if output_final_state:
        final = output("final_state_out", final_state_out, (B, H, K, V), torch.float32, v)
        if not final.is_contiguous():
            raise ValueError(f"final_state_out must be contiguous (strides {final.stride()})")
    grid = (triton.cdiv(V, BV), B * H)
    kernel[grid](
        q, k, v, o, initial_state, final,
        scale, T, H, K, V,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        BK=BK, BV=BV,
        USE_INITIAL_STATE=initial_state is not None, STORE_FINAL_STATE=output_final_state,
        num_warps=num_warps,
    )
    return o, final
