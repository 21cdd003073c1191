"""States: the forward in two kernels, the chunk states materialised (the dispatch's 16-bit D=256 launch: "d256-states",
with output V blocks of 128, "d256-states-bv128").

At K = V = 256 the fused kernel's time is its sequential chain of chunks (PERF.md, "D=256 by materialised chunk
states"). Here the chain only sums states: :func:`_states_kernel` walks a head's chunks with a [BK, BV] tile of the
state a program and writes the state before every ``S`` tokens to a workspace (in the inputs' dtype); then
:func:`_states_output_kernel` computes every block of ``S`` tokens at once, ``o = scale · (q h + tril(q kᵀ) v)``,
divided by ``scale · (q · z + rowsum(tril(q kᵀ))) + EPS`` when normalising (``z``: the key sum, stored beside each
state). ``fused.fused_forward`` runs it for a launch with ``Launch.states`` set; packed sequences stay on the fused
kernel (the dispatch never routes them here).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..device import INTERPRET
from .reference import EPS
from .sums import _query_key_sum_mma

__all__ = ["TILE", "STATE_WARPS", "STATE_STAGES", "states_pass", "stored_prefixes", "output_stages", "loop_above",
           "token_major"]

_EPS = tl.constexpr(EPS)
#: The states kernel's [TILE, TILE] piece of the state a program and the output kernel's K slice on a GPU (K = V =
#: 256: 16 programs a head, 256 at B=2 H=8); 16 under the interpreter, so small test sizes cross several tiles.
TILE = 64
#: The states kernel's warps and pipeline stages (PERF.md's sm_90 compile).
STATE_WARPS = 4
STATE_STAGES = 3


@triton.jit
def _state_step(state, zs, k_base, v_base, rows, T, offs_k, offs_v, mk, mv, stride_kt, stride_vt,
                NORMALIZE: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr, KV_T: tl.constexpr):
    """One step of the walk: the tokens ``rows`` (a [BT] range) added to the state tile and the key sum. ``KV_T``:
    k and v come token-contiguous ([D, T] a head, ``stride_kt`` / ``stride_vt`` then their D axis's stride)."""
    rows = rows.to(tl.int64)
    if KV_T:  # tokens contiguous, zero-padded to whole blocks: masked by K and V alone, so copied 16 bytes a piece
        kk = tl.load(k_base + offs_k[None, :] * stride_kt + rows[:, None], mask=mk[None, :],
                     other=0.0)  # [BT, BK]: the K-major operand TF32 products read
        vv = tl.load(v_base + offs_v[None, :] * stride_vt + rows[:, None], mask=mv[None, :], other=0.0)  # [BT, BV]
    else:
        mt = rows < T
        kk = tl.load(k_base + rows[:, None] * stride_kt + offs_k[None, :], mask=mt[:, None] & mk[None, :],
                     other=0.0)  # [BT, BK]
        vv = tl.load(v_base + rows[:, None] * stride_vt + offs_v[None, :], mask=mt[:, None] & mv[None, :],
                     other=0.0)  # [BT, BV]
    if UPCAST:
        kk = kk.to(tl.float32)
        vv = vv.to(tl.float32)
    state = tl.dot(tl.trans(kk), vv, state, input_precision=PRECISION)
    if NORMALIZE:
        zs += tl.sum(kk.to(tl.float32), 0)
    return state, zs


@triton.jit
def _states_kernel(
    # pointers
    k_ptr, v_ptr, h_ptr, z_ptr, h0_ptr, ht_ptr, z0_ptr, zt_ptr,
    # sizes
    T, H, NS,
    # strides (batch, token, head; the last dimension is unit-stride)
    stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
    # meta-parameters
    K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BT: tl.constexpr, S: tl.constexpr,
    HAS_H0: tl.constexpr, STORE_HT: tl.constexpr, NORMALIZE: tl.constexpr, HAS_Z0: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr, LOOP_ABOVE: tl.constexpr, KV_T: tl.constexpr,
):
    """Program (K tile · V tile, batch · head): the state's [BK, BV] tile before tokens ``i·S`` into ``h[b, h, i]``
    for i < NS, and with it (V tile 0) the key sum into ``z[b, h, i]``; then the final ones where asked. A stored
    state's S / BT steps are walked in a loop when there are more than ``LOOP_ABOVE`` of them, else unrolled.
    ``KV_T``: k and v token-contiguous ([B, H, D, T'], the token strides then their D axis's), and the stored
    states K-contiguous ([V, K] a state), the layouts whose tiles TF32 products read as they are copied."""
    NV: tl.constexpr = (V + BV - 1) // BV
    ik = tl.program_id(0) // NV
    iv = tl.program_id(0) % NV
    bh = tl.program_id(1).to(tl.int64)
    b = bh // H
    h = bh % H
    offs_t = tl.arange(0, BT)
    offs_k = ik * BK + tl.arange(0, BK)
    offs_v = iv * BV + tl.arange(0, BV)
    mk = offs_k < K
    mv = offs_v < V
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh
    offs_h = offs_k[:, None] * V + offs_v[None, :]  # [BK, BV] of the [K, V] states in and out
    if KV_T:
        offs_w = offs_k[:, None] + offs_v[None, :] * K  # the workspace's states K-contiguous
    else:
        offs_w = offs_h
    m_h = mk[:, None] & mv[None, :]
    if HAS_H0:
        state = tl.load(h0_ptr + bh * K * V + offs_h, mask=m_h, other=0.0).to(tl.float32)
    else:
        state = tl.zeros([BK, BV], dtype=tl.float32)
    zs = tl.zeros([BK], dtype=tl.float32)
    if HAS_Z0:
        zs = tl.load(z0_ptr + bh * K + offs_k, mask=mk, other=0.0).to(tl.float32)
    for i in range(0, NS):
        tl.store(h_ptr + (bh * NS + i) * K * V + offs_w, state.to(h_ptr.dtype.element_ty), mask=m_h)
        if NORMALIZE:
            tl.store(z_ptr + (bh * NS + i) * K + offs_k, zs, mask=mk & (iv == 0))
        if S // BT > LOOP_ABOVE:
            # a loop the pipeliner buffers a few steps of; unrolled, its stages hold a set of k and v tiles for every
            # step (392 KiB at S=512 for a segment of the fused kernel's, Launch.prefix 3; 208 KiB against 96 at
            # S=128 in fp32, Launch.states_loop)
            for r in range(0, S // BT):
                state, zs = _state_step(state, zs, k_base, v_base, i * S + r * BT + offs_t, T, offs_k, offs_v, mk, mv,
                                        stride_kt, stride_vt, NORMALIZE, UPCAST, PRECISION, KV_T)
        else:
            for r in tl.static_range(S // BT):
                state, zs = _state_step(state, zs, k_base, v_base, i * S + r * BT + offs_t, T, offs_k, offs_v, mk, mv,
                                        stride_kt, stride_vt, NORMALIZE, UPCAST, PRECISION, KV_T)
    if STORE_HT:
        tl.store(ht_ptr + bh * K * V + offs_h, state, mask=m_h)
    if NORMALIZE:
        tl.store(zt_ptr + bh * K + offs_k, zs.to(zt_ptr.dtype.element_ty), mask=mk & (iv == 0))


@triton.jit
def _states_output_kernel(
    # pointers
    q_ptr, k_ptr, v_ptr, o_ptr, h_ptr, z_ptr, den_ptr, vt_ptr,
    # sizes
    scale, T, H, NS,
    # strides (batch, token, head; the last dimension is unit-stride); vt's D axis (KV_T)
    stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh, stride_ob, stride_ot, stride_oh, stride_vtd,
    # meta-parameters
    K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, S: tl.constexpr,
    NORMALIZE: tl.constexpr, STORE_DEN: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    QZ_MMA: tl.constexpr, KV_T: tl.constexpr,
):
    """Program (V block, block of S tokens, batch · head): the block's output from the state stored before it,
    the K axis in slices of BK; ``q · z`` on the CUDA cores, or (QZ_MMA) as the product ``q · [z_hi | z_lo | 0]``
    that the fused kernel's adopted form runs (``sums.py``). ``KV_T``: the stored states K-contiguous, and v read
    from ``vt`` ([B, H, V, T'], token-contiguous, rows ``stride_vtd`` apart) for ``scores · v``."""
    iv = tl.program_id(0)
    i = tl.program_id(1)
    bh = tl.program_id(2).to(tl.int64)
    b = bh // H
    h = bh % H
    offs_t = tl.arange(0, S)
    rows = i * S + offs_t
    mt = rows < T
    rows = rows.to(tl.int64)
    offs_v = iv * BV + tl.arange(0, BV)
    mv = offs_v < V
    q_base = q_ptr + b * stride_qb + h * stride_qh
    k_base = k_ptr + b * stride_kb + h * stride_kh
    h_base = h_ptr + (bh * NS + i) * K * V
    out = tl.zeros([S, BV], dtype=tl.float32)
    scores = tl.zeros([S, S], dtype=tl.float32)
    qz = tl.zeros([S], dtype=tl.float32)
    for k0 in range(0, K, BK):
        offs_k = k0 + tl.arange(0, BK)
        mk = offs_k < K
        m_qk = mt[:, None] & mk[None, :]
        qq = tl.load(q_base + rows[:, None] * stride_qt + offs_k[None, :], mask=m_qk, other=0.0)  # [S, BK]
        kk = tl.load(k_base + rows[:, None] * stride_kt + offs_k[None, :], mask=m_qk, other=0.0)  # [S, BK]
        if KV_T:
            h_at = h_base + offs_k[:, None] + offs_v[None, :] * K  # stored K-contiguous
        else:
            h_at = h_base + offs_k[:, None] * V + offs_v[None, :]
        hh = tl.load(h_at, mask=mk[:, None] & mv[None, :],
                     other=0.0)  # [BK, BV]
        if UPCAST:
            qq = qq.to(tl.float32)
            kk = kk.to(tl.float32)
            hh = hh.to(tl.float32)
        out = tl.dot(qq, hh, out, input_precision=PRECISION)
        scores = tl.dot(qq, tl.trans(kk), scores, input_precision=PRECISION)
        if NORMALIZE:
            zz = tl.load(z_ptr + (bh * NS + i) * K + offs_k, mask=mk, other=0.0)  # [BK] fp32
            if QZ_MMA:
                qz += _query_key_sum_mma(qq, zz, PRECISION, 64)
            else:
                qz += tl.sum(qq.to(tl.float32) * zz[None, :], 1)
    scores = tl.where(offs_t[:, None] >= offs_t[None, :], scores, 0.0)  # [S, S]
    if KV_T:  # v token-contiguous ([B, H, V, T']): the K-major operand of `scores · v` under TF32
        vt_base = vt_ptr + bh * V * stride_vtd
        vv = tl.load(vt_base + offs_v[None, :] * stride_vtd + rows[:, None], mask=mv[None, :], other=0.0)
    else:
        v_base = v_ptr + b * stride_vb + h * stride_vh
        vv = tl.load(v_base + rows[:, None] * stride_vt + offs_v[None, :], mask=mt[:, None] & mv[None, :],
                     other=0.0)
    if UPCAST:
        vv = vv.to(tl.float32)
    out = tl.dot(scores.to(vv.dtype), vv, out, input_precision=PRECISION)  # [S, BV]
    if NORMALIZE:
        den = (tl.sum(scores, 1) + qz) * scale + _EPS  # [S]
        out = out * (scale / den)[:, None]
        if STORE_DEN:
            tl.store(den_ptr + (b * T + rows) * H + h, den, mask=mt & (iv == 0))
    else:
        out = out * scale
    o_base = o_ptr + b * stride_ob + h * stride_oh
    tl.store(o_base + rows[:, None] * stride_ot + offs_v[None, :], out.to(o_ptr.dtype.element_ty),
             mask=mt[:, None] & mv[None, :])


def states_pass(q, k, v, o, scale, h0, ht, z0, zt, den, *, S: int, BT: int, BV: int, num_warps: int,
                num_stages: int, precision: str, upcast: bool, qz_mma: bool, strides: tuple,
                loop: bool = False, kv_t: bool = False) -> None:
    """Run both kernels of one checked, unpacked call into the allocated outputs: ``o`` [B, T, H, V], ``ht`` (fp32
    [B, H, K, V] or None), ``zt`` ([B, 1, H, K] when normalising, else None), ``den`` ([B, T, H] fp32 or None);
    ``h0`` and ``z0`` the initial state and key sum or None. ``S`` tokens a stored state and an output block,
    ``BT`` a step of the states kernel, ``BV`` the output's V block; ``qz_mma``: ``q · z`` as a tensor-core product
    (any of the launch's tensor-core forms of it runs as the wide one, whose operand has the state product's shape);
    ``strides``: q's, k's, v's and o's; ``loop``: the states kernel's steps in a loop (``Launch.states_loop``);
    ``kv_t``: k and v copied token-contiguous first, for the kernels' products over tokens (``Launch.kv_t``)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    normalize = zt is not None
    st_q, st_k, st_v, st_o = strides
    # the workspace: the state before every S tokens, in the inputs' dtype (fp32 for fp32 inputs)
    copies = (token_major(k, S), token_major(v, S)) if kv_t else None
    vt, stride_vtd = (copies[1], copies[1].stride(2)) if copies else (v, 0)  # v as scores · v reads it
    h, z = stored_prefixes(k, v, h0, ht, z0, zt, L=S, BT=BT, precision=precision, upcast=upcast,
                           strides=(*st_k, *st_v), loop=loop, kv_t=copies)
    NS = h.shape[2]
    tile = _tile(K, V)
    if NS == 0:
        return
    _states_output_kernel[(triton.cdiv(V, BV), NS, B * H)](
        q, k, v, o, h, z, den, vt,
        float(scale), T, H, NS, *st_q, *st_k, *st_v, *st_o, stride_vtd,
        K=K, V=V, BK=tile, BV=BV, S=S, NORMALIZE=normalize, STORE_DEN=den is not None, UPCAST=upcast,
        PRECISION=precision, QZ_MMA=normalize and qz_mma, KV_T=kv_t, num_warps=num_warps,
        num_stages=output_stages(num_stages, normalize, qz_mma),
    )


def loop_above(loop: bool) -> int:
    """The states kernel's ``LOOP_ABOVE`` for a launch: with ``loop`` (``Launch.states_loop``) a stored state's steps
    are walked in a loop even when they are two; otherwise only above two (the fused kernel's segments)."""
    return 1 if loop else 2


def stored_prefixes(k, v, h0, ht, z0, zt, *, L: int, BT: int, precision: str, upcast: bool,
                    strides: tuple, loop: bool = False,
                    kv_t: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The states kernel alone, for the fused kernel's segments (``Launch.prefix`` 3): the state before every ``L``
    tokens ([B, H, T/L, K, V], in the inputs' dtype) and, when ``zt`` is given (normalising), the key sum before
    them ([B, H, T/L, K], fp32); the final ones into ``ht`` and ``zt`` where given. ``strides``: k's and v's
    (batch, token, head); ``loop``: a stored state's steps walked in a loop even when they are two; ``kv_t``: k and
    v token-contiguous (:func:`token_major`), read in their place, the states then stored K-contiguous (each
    [K, V] state of the workspace holding its transpose: for ``states_pass`` alone)."""
    B, T, H, K = k.shape
    V = v.shape[-1]
    NS = triton.cdiv(T, L)
    h = torch.empty(B, H, NS, K, V, dtype=k.dtype, device=k.device)
    z = torch.empty(B, H, NS, K, dtype=torch.float32, device=k.device) if zt is not None else None
    tile = _tile(K, V)
    if kv_t is not None:  # [B, H, D, T']: batch, the D axis in the token's place, head
        k, v = kv_t
        strides = (k.stride(0), k.stride(2), k.stride(1), v.stride(0), v.stride(2), v.stride(1))
    _states_kernel[(triton.cdiv(K, tile) * triton.cdiv(V, tile), B * H)](
        k, v, h, z, h0, ht, z0, zt,
        T, H, NS, *strides,
        K=K, V=V, BK=tile, BV=tile, BT=BT, S=L, HAS_H0=h0 is not None, STORE_HT=ht is not None,
        NORMALIZE=zt is not None, HAS_Z0=z0 is not None, UPCAST=upcast, PRECISION=precision,
        LOOP_ABOVE=loop_above(loop), KV_T=kv_t is not None, num_warps=STATE_WARPS,
        num_stages=1 if INTERPRET else STATE_STAGES,
    )
    return h, z


@triton.jit
def _token_major_kernel(x_ptr, out_ptr, T, H, TP, stride_xb, stride_xt, stride_xh, stride_xd,
                        D: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    """Program (token block, D block, batch · head): x's [BT, BD] tile, read along D, written transposed along
    tokens into ``out`` [B, H, D, TP]; tokens from T to TP written as zeros."""
    it = tl.program_id(0)
    bh = tl.program_id(2).to(tl.int64)
    b = bh // H
    h = bh % H
    rows = it * BT + tl.arange(0, BT)
    cols = tl.program_id(1) * BD + tl.arange(0, BD)
    mc = cols < D
    tile = tl.load(x_ptr + b * stride_xb + h * stride_xh + rows[:, None].to(tl.int64) * stride_xt
                   + cols[None, :] * stride_xd, mask=(rows[:, None] < T) & mc[None, :], other=0.0)  # [BT, BD]
    tl.store(out_ptr + (bh * D + cols[:, None]) * TP + rows[None, :], tl.trans(tile),
             mask=mc[:, None] & (rows[None, :] < TP))


def token_major(x: torch.Tensor, block: int) -> torch.Tensor:
    """``x`` [B, T, H, D] copied token-contiguous, [B, H, D, T'] with T' = T rounded up to whole ``block``s
    (a multiple of 16) and the padding zeroed: the kernels read whole blocks unmasked along tokens, which lets
    them copy their tiles 16 bytes a piece, and the zeros add nothing to a state or a product. One pass of
    [64, 64] tiles (16 under the interpreter), each read along D and written along tokens."""
    B, T, H, D = x.shape
    TP = triton.cdiv(T, block) * block
    out = torch.empty(B, H, D, TP, dtype=x.dtype, device=x.device)
    tile = 16 if INTERPRET else 64
    if out.numel():
        _token_major_kernel[(triton.cdiv(TP, tile), triton.cdiv(D, tile), B * H)](
            x, out, T, H, TP, *x.stride(), D=D, BT=tile, BD=tile, num_warps=4)
    return out


def _tile(K: int, V: int) -> int:
    """The states kernel's square tile of the state, which is also the output kernel's K slice."""
    return min(16 if INTERPRET else TILE, max(16, triton.next_power_of_2(max(K, V))))


def output_stages(num_stages: int, normalize: bool, qz_mma: bool) -> int:
    """The output kernel's pipeline depth for a launch asking ``num_stages``: one where it normalises with
    ``q · z`` on the CUDA cores, a form that came out 1.6-3.1e-2 off with its K loop pipelined on the GPU (the
    H200 and an H100 alike; right unpipelined, and under the interpreter), PERF.md "D=256 by materialised chunk
    states"."""
    return 1 if normalize and not qz_mma else num_stages
