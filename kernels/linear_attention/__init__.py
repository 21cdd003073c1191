"""Chunked causal linear attention: the oracle, the ladder of versions and fla's public entry point.

Every version has one signature, ``<version>_linear_attention(q, k, v, scale, initial_state=None,
output_final_state=False, cu_seqlens=None) -> (o, final_state_or_None)``, unnormalised, and is listed in
:data:`VERSIONS`. A version that handles only some cases carries ``supports(q, k, v, initial_state=None,
cu_seqlens=None) -> str | None`` (None: it handles the call; otherwise why not). :func:`chunk_linear_attn` is a
drop-in for fla-core 0.6.0's ``fla.ops.linear_attn.chunk_linear_attn``, differentiable (``autograd.py``); it runs
:func:`fused.fused_forward` (normaliser in the kernel) unless a version registered ahead of ``fused`` takes the call.
"""

from __future__ import annotations

import torch

from .autograd import linear_attention_with_grad
from .checks import offsets_read_once
from .chunked import chunked_linear_attention
from .fused import fused_forward, fused_linear_attention
from .lookback import lookback_linear_attention
from .reference import normalize_linear_attention, reference_linear_attention, split_initial_state

__all__ = ["VERSIONS", "chunk_linear_attn", "chunked_linear_attention", "fused_forward", "fused_linear_attention",
           "lookback_linear_attention", "pick_version", "reference_linear_attention"]

#: Every version, in order of preference: the first whose ``supports`` accepts a call runs it. ``fused`` takes
#: every call (it picks its own launch, ``dispatch.py``); the two rungs it grew from stay on the ladder for the
#: tests and the benchmark (the lookback's own rule would decline calls whose chains already fill the GPU).
VERSIONS: dict = {"fused": fused_linear_attention, "lookback": lookback_linear_attention,
                  "chunked": chunked_linear_attention}


def pick_version(q, k, v, initial_state=None, cu_seqlens=None) -> str:
    """The name of the fastest registered version that handles this call."""
    reasons = []
    for name, fn in VERSIONS.items():
        supports = getattr(fn, "supports", None)
        why = supports(q, k, v, initial_state=initial_state, cu_seqlens=cu_seqlens) if supports else None
        if why is None:
            return name
        reasons.append(f"{name}: {why}")
    raise ValueError("no linear-attention version handles this call (" + "; ".join(reasons) + ")")


def _unit_last(x):
    """fla accepts any layout; the kernels want a unit-stride last dimension."""
    if isinstance(x, torch.Tensor) and x.dim() and x.shape[-1] > 1 and x.stride(-1) != 1:
        return x.contiguous()
    return x


def _any_requires_grad(*xs) -> bool:
    for x in xs:
        if isinstance(x, torch.Tensor) and x.requires_grad:
            return True
    return False


@torch.compiler.disable
def chunk_linear_attn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | tuple | None = None,
    output_final_state: bool = False,
    normalize: bool = True,
    cu_seqlens: torch.LongTensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal linear attention with fla-core 0.6.0's ``chunk_linear_attn`` signature and return values.

    q, k: [B, T, H, K]; v: [B, T, H, V]; scale defaults to ``K ** -0.5``. initial_state: [N, H, K, V], or with
    ``normalize=True`` the tuple ``(kv_state, z_state [N, 1, H, K])``; N is B, or ``len(cu_seqlens) - 1`` for
    sequences packed into a batch of one. ``normalize=True`` divides ``o_t`` by ``scale · q_t · Σ_{s≤t} k_s``
    (+1e-10). Differentiable: inputs that require grad (with grad mode on) take ``autograd.py``'s path, with
    gradients for q, k, v and both parts of ``initial_state``, and from the final state. Returns
    ``(o [B, T, H, V] in q's dtype, final_state)``: the fp32 state [N, H, K, V] or None, and with
    ``normalize=True`` the tuple ``(state_or_None, z_state)``; as in fla-core, a ``z_state`` passed in a
    wider dtype than q's widens the normalised ``o`` and the returned ``z_state`` to it.
    """
    kv_init, z_init = split_initial_state(initial_state, normalize)
    if scale is None and isinstance(k, torch.Tensor):
        scale = k.shape[-1] ** -0.5
    q, k, v = _unit_last(q), _unit_last(k), _unit_last(v)
    if isinstance(kv_init, torch.Tensor):
        kv_init = kv_init.contiguous()
    if isinstance(z_init, torch.Tensor):
        z_init = z_init.contiguous()
    with offsets_read_once(cu_seqlens):  # one wait for the device, not one per use of the offsets
        if torch.is_grad_enabled() and _any_requires_grad(q, k, v, kv_init, z_init):
            return linear_attention_with_grad(q, k, v, scale, kv_init, z_init, output_final_state, bool(normalize),
                                              cu_seqlens)
        version = VERSIONS[pick_version(q, k, v, initial_state=kv_init, cu_seqlens=cu_seqlens)]
        if version is fused_linear_attention:
            f = fused_forward(q, k, v, scale, kv_init, z_init, output_final_state, bool(normalize), cu_seqlens)
            return f.o, ((f.final_state, f.z_state) if normalize else f.final_state)
        o, final_state = version(q, k, v, scale, kv_init, output_final_state, cu_seqlens)
        if normalize:
            o, z_state = normalize_linear_attention(o, q, k, scale, z_init, cu_seqlens)
            return o, (final_state, z_state)
    return o, final_state
