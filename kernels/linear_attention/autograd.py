"""Autograd for chunked linear attention: the fused forward, and ``chunked_bwd.py``'s two passes as its backward.

The forward saves q, k, v and the initial state, which the caller holds anyway, and nothing it computes: the
backward rebuilds the states chunk by chunk on-chip, so no ``[T/C, K, V]`` tensor is kept between the two
(``PERF.md``, "The backward pass", measures what this costs in time and saves in memory). With
``normalize=True`` the division by ``scale · q_t · z_t + EPS`` runs in torch on top of the unnormalised output,
so autograd differentiates it (and ``z_state``) itself.
"""

from __future__ import annotations

import torch

from .checks import offsets_read_once
from .chunked_bwd import chunked_backward
from .fused import fused_forward
from .reference import normalize_linear_attention

__all__ = ["LinearAttentionFunction", "linear_attention_with_grad"]


class LinearAttentionFunction(torch.autograd.Function):
    """``(o, final_state) = f(q, k, v, scale, initial_state, output_final_state, cu_seqlens)``, unnormalised;
    gradients for q, k, v and the initial state, with the final state's gradient flowing back into all four."""

    @staticmethod
    def forward(ctx, q, k, v, scale, initial_state, output_final_state, cu_seqlens):
        with offsets_read_once(cu_seqlens):
            f = fused_forward(q, k, v, scale, initial_state, None, output_final_state, False, cu_seqlens)
        ctx.save_for_backward(q, k, v, initial_state)
        ctx.scale = scale
        ctx.cu_seqlens = cu_seqlens
        return f.o, f.final_state

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, initial_state = ctx.saved_tensors
        need_dh0 = initial_state is not None and ctx.needs_input_grad[4]
        with offsets_read_once(ctx.cu_seqlens):
            dq, dk, dv, dh0 = chunked_backward(q, k, v, do.contiguous(), ctx.scale, initial_state, dht,
                                               ctx.cu_seqlens, need_dh0=need_dh0)
        if dh0 is not None:
            dh0 = dh0.to(initial_state.dtype)
        return dq, dk, dv, None, dh0, None, None


def linear_attention_with_grad(q, k, v, scale, kv_init, z_init, output_final_state, normalize, cu_seqlens):
    """``chunk_linear_attn``'s results for inputs that need gradients (``__init__.py`` routes them here)."""
    o, ht = LinearAttentionFunction.apply(q, k, v, scale, kv_init, output_final_state, cu_seqlens)
    if not normalize:
        return o, ht
    o, z_state = normalize_linear_attention(o, q, k, scale, z_init, cu_seqlens)
    return o, (ht, z_state)
