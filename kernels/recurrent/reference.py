"""Oracles for causal linear attention as a recurrence, in float64 by default.

``S_t = S_{t-1} + k_t v_tᵀ`` (``S_0`` the initial state or zeros), ``o_t = scale · q_tᵀ S_t``; q, k are
``[B, T, H, K]``, v and o ``[B, T, H, V]``, states ``[B, H, K, V]``. :func:`reference_recurrent` is the vectorised
form (cumulative sums of outer products, a chunk of steps at a time); :func:`reference_recurrent_loop` is the
recurrence written out step by step. The tests check that they agree.
"""

import torch

__all__ = ["reference_recurrent", "reference_recurrent_loop"]


def _prepare(q, k, v, scale, initial_state, dtype):
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # [B, H, T, K|V]
    if initial_state is None:
        s = torch.zeros(B, H, K, V, dtype=dtype, device=q.device)
    else:
        s = initial_state.to(dtype).clone()
    return q, k, v, scale, s


def reference_recurrent(q, k, v, *, scale: float | None = None, initial_state=None, output_final_state=False,
                        dtype=torch.float64, chunk: int = 64):
    """``(o, final_state or None)``: per chunk of steps, ``S = S_prev + cumsum(k ⊗ v)`` and ``o = scale · q·S``."""
    q, k, v, scale, s = _prepare(q, k, v, scale, initial_state, dtype)
    T = q.shape[2]
    outs = []
    for t0 in range(0, T, chunk):
        sl = slice(t0, min(t0 + chunk, T))
        kv = torch.einsum("bhtk,bhtv->bhtkv", k[:, :, sl], v[:, :, sl])  # [B, H, C, K, V]
        states = s[:, :, None] + kv.cumsum(dim=2)
        outs.append(scale * torch.einsum("bhtk,bhtkv->bhtv", q[:, :, sl], states))
        s = states[:, :, -1]
    o = torch.cat(outs, dim=2).transpose(1, 2)  # [B, T, H, V]
    return o, (s if output_final_state else None)


def reference_recurrent_loop(q, k, v, *, scale: float | None = None, initial_state=None, output_final_state=False,
                             dtype=torch.float64):
    """``(o, final_state or None)`` by the recurrence, one step at a time."""
    q, k, v, scale, s = _prepare(q, k, v, scale, initial_state, dtype)
    T = q.shape[2]
    o = torch.empty(*v.shape, dtype=dtype, device=v.device)  # [B, H, T, V]
    for t in range(T):
        s = s + k[:, :, t, :, None] * v[:, :, t, None, :]
        o[:, :, t] = scale * (q[:, :, t, :, None] * s).sum(dim=2)
    return o.transpose(1, 2), (s if output_final_state else None)
