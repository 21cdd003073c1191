"""The oracle: causal linear attention in pure torch, float64-capable, with fla-core 0.6.0's semantics.

``reference_linear_attention`` has ``fla.ops.linear_attn.chunk_linear_attn``'s signature, defaults and return
values. It runs the chunked form one chunk at a time (exact algebra, so in float64 it is exact up to rounding);
``recurrent_linear_attention`` is the plain token-by-token loop that checks it. Both compute in float64 when
``q`` is float64 and in float32 otherwise.
"""

from __future__ import annotations

import torch

from ..recurrent.reference import reference_recurrent_loop
from .checks import host_offsets

__all__ = ["reference_linear_attention", "recurrent_linear_attention", "reference_backward",
           "normalize_linear_attention", "normalizer", "split_initial_state", "EPS", "FLOPS_CHUNK",
           "forward_flops"]

#: Added to the normaliser ``scale · q_t · z_t``, as fla does.
EPS = 1e-10
#: The chunk length the FLOP count assumes: per token and head 4·K·V (state update and readout) plus C·(K+V),
#: the causal half of the 2·C·(K+V) that the intra-chunk scores and their product with V take.
FLOPS_CHUNK = 64


def forward_flops(B: int, T: int, H: int, K: int, V: int) -> int:
    """The FLOPs the benchmarks credit one forward call with (a backward pass: three times as many)."""
    return B * T * H * (4 * K * V + FLOPS_CHUNK * (K + V))


def _acc(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _sequences(T: int, cu_seqlens) -> list[tuple[int, int]]:
    if cu_seqlens is None:
        return [(0, T)]
    offsets = [int(x) for x in host_offsets(cu_seqlens)]
    return list(zip(offsets, offsets[1:]))


def split_initial_state(initial_state, normalize: bool):
    """``(kv_state, z_state)``: the tuple form belongs to ``normalize=True``; a lone tensor is the kv state."""
    if isinstance(initial_state, tuple):
        if not normalize:
            raise TypeError("initial_state is a (kv_state, z_state) tuple, which needs normalize=True; "
                            "with normalize=False pass the kv state tensor [N, H, K, V] alone")
        if len(initial_state) != 2:
            raise ValueError(f"initial_state tuple must be (kv_state, z_state), got {len(initial_state)} items")
        return initial_state
    return initial_state, None


def _check_varlen(q, kv_init, cu_seqlens) -> None:
    if cu_seqlens is None:
        return
    if q.shape[0] != 1:
        raise ValueError(f"with cu_seqlens the batch size must be 1 (sequences packed along T), got B={q.shape[0]}")
    if kv_init is not None and kv_init.shape[0] != len(cu_seqlens) - 1:
        raise ValueError(f"initial_state must hold one state per sequence, len(cu_seqlens) - 1 = "
                         f"{len(cu_seqlens) - 1}, got {kv_init.shape[0]}")


def _chunked_one(q, k, v, scale, h0, chunk):
    """One batch of equal-length sequences [B, T, H, *] in the accumulation dtype; returns o, final state."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))  # [B, H, T, *]
    state = q.new_zeros(B, H, K, V) if h0 is None else h0.clone()  # [B, H, K, V]
    o = q.new_empty(B, H, T, V)
    for t0 in range(0, T, chunk):
        qc, kc, vc = (x[:, :, t0:t0 + chunk] for x in (q, k, v))  # [B, H, C, *]
        scores = (qc @ kc.transpose(-1, -2)).tril()  # [B, H, C, C]
        o[:, :, t0:t0 + chunk] = scale * (qc @ state + scores @ vc)
        state = state + kc.transpose(-1, -2) @ vc
    return o.transpose(1, 2), state


def _recurrent_one(q, k, v, scale, h0):
    o, state = reference_recurrent_loop(q, k, v, scale=scale, initial_state=h0, output_final_state=True,
                                        dtype=q.dtype)
    return o.contiguous(), state


def _run(one, q, k, v, scale, kv_init, output_final_state, cu_seqlens, **kw):
    acc = _acc(q.dtype)
    q, k, v = (x.to(acc) for x in (q, k, v))
    h0 = None if kv_init is None else kv_init.to(acc)
    if cu_seqlens is None:
        o, ht = one(q, k, v, scale, h0, **kw)
    else:
        o = q.new_empty(*q.shape[:3], v.shape[-1])
        states = []
        for n, (bos, eos) in enumerate(_sequences(q.shape[1], cu_seqlens)):
            hn = None if h0 is None else h0[n:n + 1]
            o[:, bos:eos], s = one(q[:, bos:eos], k[:, bos:eos], v[:, bos:eos], scale, hn, **kw)
            states.append(s)
        ht = torch.cat(states)
    return o, (ht if output_final_state else None)


def normalizer(q, k, scale, z_init=None, cu_seqlens=None):
    """The normaliser ``scale · q_t · z_t + EPS`` of every token [B, T, H] and the running key sum ``z_t =
    z_init + Σ_{s≤t} k_s`` [B, T, H, K] per sequence, in float64 for float64 inputs and float32 otherwise."""
    acc = _acc(q.dtype)
    B, T, H, K = k.shape
    spans = _sequences(T, cu_seqlens)
    N = B if cu_seqlens is None else len(spans)
    if z_init is not None and tuple(z_init.shape) != (N, 1, H, K):
        raise ValueError(f"z_state in initial_state must have shape [N, 1, H, K] = {(N, 1, H, K)}, "
                         f"got {tuple(z_init.shape)}")
    z = k.to(acc).cumsum(1)  # [B, T, H, K]
    if cu_seqlens is not None:
        lens = torch.tensor([e - b for b, e in spans], device=k.device)
        before = torch.cat([z.new_zeros(1, 1, H, K), z], 1)[0, cu_seqlens[:-1].long()]  # [N, H, K], z before each
        z = z - before.repeat_interleave(lens, 0)[None]
        if z_init is not None:
            z = z + z_init[:, 0].to(acc).repeat_interleave(lens, 0)[None]
    elif z_init is not None:
        z = z + z_init.to(acc)
    return (q.to(acc) * scale * z).sum(-1) + EPS, z


def normalize_linear_attention(o, q, k, scale, z_init=None, cu_seqlens=None):
    """Divide ``o_t`` by ``scale · q_t · z_t + EPS`` with ``z_t = z_init + Σ_{s≤t} k_s`` per sequence.

    Returns the normalised output and the running key sum at each sequence's end, ``z_state`` [N, 1, H, K]
    (an empty sequence keeps ``z_init``, or zeros). Dtypes follow fla-core 0.6.0, which divides in the promoted
    type: ``z_state`` in ``k``'s dtype promoted with ``z_init``'s, the output in ``o``'s promoted with ``q``'s
    and ``z_state``'s (so bf16 inputs with an fp32 ``z_init`` give an fp32 output). Sums run in float64 for
    float64 inputs, float32 otherwise.
    """
    acc = _acc(q.dtype)
    B, T, H, K = k.shape
    spans = _sequences(T, cu_seqlens)
    N = B if cu_seqlens is None else len(spans)
    denom, z = normalizer(q, k, scale, z_init, cu_seqlens)
    zdtype = k.dtype if z_init is None else torch.promote_types(k.dtype, z_init.dtype)
    out = (o.to(acc) / denom[..., None]).to(torch.promote_types(torch.promote_types(o.dtype, q.dtype), zdtype))
    start = z.new_zeros(N, 1, H, K) if z_init is None else z_init.to(acc)
    if cu_seqlens is None:
        z_state = z[:, -1:] if T else start
    else:
        ends = torch.tensor([max(e - 1, 0) for _, e in spans], device=k.device)
        full = torch.tensor([e > b for b, e in spans], device=k.device)[:, None, None, None]
        z_state = torch.where(full, z[0, ends][:, None], start) if T else start
    return out, z_state.to(zdtype).contiguous()


def _recurrent_normalize(o, q, k, scale, z_init=None, cu_seqlens=None):
    """:func:`normalize_linear_attention` token by token: ``z_t = z_{t-1} + k_t``."""
    acc = _acc(q.dtype)
    B, T, H, K = k.shape
    out = o.to(acc).clone()
    states = []
    for n, (bos, eos) in enumerate(_sequences(T, cu_seqlens)):
        if z_init is None:
            z = k.new_zeros(B if cu_seqlens is None else 1, H, K, dtype=acc)  # [B, H, K]
        else:
            z = (z_init[:, 0] if cu_seqlens is None else z_init[n:n + 1, 0]).to(acc)
        for t in range(bos, eos):
            z = z + k[:, t].to(acc)
            out[:, t] /= (q[:, t].to(acc) * scale * z).sum(-1, keepdim=True) + EPS
        states.append(z[:, None])
    zdtype = k.dtype if z_init is None else torch.promote_types(k.dtype, z_init.dtype)
    return out.to(o.dtype), torch.cat(states).to(zdtype)


def _api(one, norm, q, k, v, scale, initial_state, output_final_state, normalize, cu_seqlens, **kw):
    kv_init, z_init = split_initial_state(initial_state, normalize)
    _check_varlen(q, kv_init, cu_seqlens)
    if scale is None:
        scale = k.shape[-1] ** -0.5
    o, ht = _run(one, q, k, v, scale, kv_init, output_final_state, cu_seqlens, **kw)
    if normalize:
        o, z_state = norm(o, q, k, scale, z_init, cu_seqlens)
        return o.to(q.dtype), (ht, z_state)
    return o.to(q.dtype), ht


def reference_linear_attention(q, k, v, scale=None, initial_state=None, output_final_state=False, normalize=True,
                               cu_seqlens=None, *, chunk_size: int = 64):
    """``o_t = scale · q_t S_t`` with ``S_t = S_0 + Σ_{s≤t} k_s v_sᵀ``, chunk by chunk; fla's return values.

    q, k: [B, T, H, K]; v: [B, T, H, V]; initial_state: [N, H, K, V], or ``(kv_state, z_state [N, 1, H, K])``
    with ``normalize=True``; cu_seqlens: N+1 offsets into a batch of one. Returns ``(o, final_state)`` where
    final_state is the [N, H, K, V] state (float32, or float64 for float64 inputs) or None; with
    ``normalize=True`` it is the tuple ``(final_state_or_None, z_state)``.
    """
    return _api(_chunked_one, normalize_linear_attention, q, k, v, scale, initial_state, output_final_state,
                normalize, cu_seqlens, chunk=chunk_size)


def recurrent_linear_attention(q, k, v, scale=None, initial_state=None, output_final_state=False, normalize=True,
                               cu_seqlens=None):
    """The same computation token by token (``S_t = S_{t-1} + k_t v_tᵀ``); slow, and it checks the oracle."""
    return _api(_recurrent_one, _recurrent_normalize, q, k, v, scale, initial_state, output_final_state,
                normalize, cu_seqlens)


def reference_backward(q, k, v, do, scale=None, initial_state=None, dht=None, cu_seqlens=None, *,
                       recurrent: bool = False, chunk_size: int = 64, with_output: bool = False):
    """Gradients of the unnormalised attention by float64 autograd: ``(dq, dk, dv, dh0)`` for the loss
    ``Σ o·do + Σ final_state·dht`` (``dh0`` None without an initial state). ``recurrent=True`` differentiates the
    token-by-token loop (slow: small sizes), otherwise the chunked oracle. ``with_output=True`` appends the float64
    output ``o`` of the same forward (no second forward pass for a caller that needs both)."""
    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    h0 = None if initial_state is None else initial_state.detach().double().requires_grad_()
    with torch.enable_grad():
        if recurrent:
            o, ht = recurrent_linear_attention(*leaves, scale, h0, True, False, cu_seqlens)
        else:
            o, ht = reference_linear_attention(*leaves, scale, h0, True, False, cu_seqlens, chunk_size=chunk_size)
        loss = (o * do.double()).sum()
        if dht is not None:
            loss = loss + (ht * dht.double()).sum()
        grads = torch.autograd.grad(loss, leaves + ([h0] if h0 is not None else []))
    out = (*grads[:3], grads[3] if h0 is not None else None)
    return (*out, o.detach()) if with_output else out
