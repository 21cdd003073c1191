"""The chunked form in eager torch: every chunk at once, in fp32, the baseline the Triton rungs must beat.

Per chunk c of C tokens it forms ``k_cᵀ v_c`` [K, V], takes an exclusive prefix sum over chunks for the state
each chunk starts from, and adds the causal intra-chunk matmul: ``o_c = scale · (q_c S_c + causal(q_c k_cᵀ) v_c)``.
Each step is a separate kernel and every per-chunk state [B, H, T/C, K, V] goes through HBM, which is what a
fused kernel avoids. ``torch.compile`` of this function is the compiled baseline.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .checks import check_inputs

__all__ = ["torch_chunked_linear_attention", "chunked_forward"]


def chunked_forward(q, k, v, scale: float, h0=None, chunk_size: int = 64):
    """Equal-length sequences [B, T, H, *]; returns ``(o in q's dtype, final state fp32 [B, H, K, V])``."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    pad = -T % chunk_size
    n = (T + pad) // chunk_size
    qc, kc, vc = (F.pad(x.float().transpose(1, 2), (0, 0, 0, pad)).unflatten(2, (n, chunk_size))
                  for x in (q, k, v))  # [B, H, NC, C, *]
    kv = kc.transpose(-1, -2) @ vc  # [B, H, NC, K, V]
    seen = kv.cumsum(2)
    start = seen - kv  # [B, H, NC, K, V], the state before each chunk
    if h0 is not None:
        start = start + h0.float()[:, :, None]
    scores = (qc @ kc.transpose(-1, -2)).tril()  # [B, H, NC, C, C]
    o = scale * (qc @ start + scores @ vc)  # [B, H, NC, C, V]
    o = o.flatten(2, 3)[:, :, :T].transpose(1, 2).to(q.dtype)
    ht = seen[:, :, -1] if n else q.new_zeros(B, H, K, V, dtype=torch.float32)
    if h0 is not None:
        ht = ht + h0.float()
    return o, ht


def torch_chunked_linear_attention(q, k, v, scale, initial_state=None, output_final_state=False, cu_seqlens=None,
                                   *, chunk_size: int = 64):
    """The versions' signature and results, in eager torch (sequences of a varlen batch one after another)."""
    check_inputs(q, k, v, scale, initial_state, output_final_state, cu_seqlens)
    if cu_seqlens is None:
        o, ht = chunked_forward(q, k, v, scale, initial_state, chunk_size)
    else:
        offsets = cu_seqlens.tolist()
        o = torch.empty(*q.shape[:3], v.shape[-1], dtype=q.dtype, device=q.device)
        states = []
        for n, (bos, eos) in enumerate(zip(offsets, offsets[1:])):
            h0 = None if initial_state is None else initial_state[n:n + 1]
            o[:, bos:eos], s = chunked_forward(q[:, bos:eos], k[:, bos:eos], v[:, bos:eos], scale, h0, chunk_size)
            states.append(s)
        ht = torch.cat(states)
    return o, (ht if output_final_state else None)
