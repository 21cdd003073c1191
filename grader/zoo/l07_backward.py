"""Lesson 07's zoo: the chunked backward in torch, the dq kernel, the dk/dv kernel, the autograd.Function."""

import types

from kernels.checks import provenance
from kernels.device import INTERPRET

from . import Entry, edit, editor, moved, solution
from .l04_chunked_linear_attention import INT64_HEADS, SKIPS_LAST_CHUNK

__all__ = ["ENTRIES"]

TORCH = solution("07_backward", "chunked_backward_torch")
_torch = editor("07_backward.backward_torch", TORCH)

_TORCH_UPDATE = "        dstate = dstate + scale * qc.transpose(-1, -2) @ doc\n"
_TORCH_DK = "        dk[:, :, t0:t0 + chunk_size] = vc @ dstate.transpose(-1, -2) + scale * (b @ qc)\n"

BACKWARD_TORCH = [
    _torch("drops-last-chunk", "    starts = list(range(0, T, chunk_size))\n",
           "    starts = [i * chunk_size for i in range(T // chunk_size)]\n", fault="the last, short chunk",
           why="walks T // chunk_size chunks: the tokens of a last, short chunk are never written"),
    _torch("autograd", source='''def chunked_backward_torch(q, k, v, do, scale, chunk_size=64):
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    with torch.enable_grad():
        S = torch.cumsum(leaves[1][..., :, None] * leaves[2][..., None, :], dim=1)
        o = scale * torch.einsum("bthk,bthkv->bthv", leaves[0], S)
        o.backward(do)
    return tuple(x.grad for x in leaves)
''', fault="autograd", why="lets autograd differentiate a forward instead of writing the gradients"),
    _torch("token-loop", source='''def chunked_backward_torch(q, k, v, do, scale, chunk_size=64):
    B, T, H, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1])
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    for t in range(T):
        S = S + k[:, t, :, :, None] * v[:, t, :, None, :]
        dq[:, t] = scale * (S @ do[:, t, :, :, None])[..., 0]
    dH = torch.zeros_like(S)
    for t in range(T - 1, -1, -1):
        dH = dH + scale * q[:, t, :, :, None] * do[:, t, :, None, :]
        dk[:, t] = (dH @ v[:, t, :, :, None])[..., 0]
        dv[:, t] = (dH.transpose(-1, -2) @ k[:, t, :, :, None])[..., 0]
    return dq, dk, dv
''', fault="tokens", why="the token-level formulas, one token at a time"),
    _torch("forward-mask-in-backward",
           "a = (kc @ qc.transpose(-1, -2)).triu()", "a = (kc @ qc.transpose(-1, -2)).tril()",
           "b = (vc @ doc.transpose(-1, -2)).triu()", "b = (vc @ doc.transpose(-1, -2)).tril()",
           fault="the forward's mask M gives", why="the forward's lower-triangular mask for dk and dv"),
    _torch("dS-updated-before-use", *moved(_TORCH_UPDATE, _TORCH_DK), fault="before chunk c uses it",
           why="adds the chunk's own Q^T dO to dS before using it: the chunk counts twice, once unmasked"),
    _torch("scale-twice", "dk[:, :, t0:t0 + chunk_size] = vc @ dstate.transpose(-1, -2) + scale * (b @ qc)",
           "dk[:, :, t0:t0 + chunk_size] = scale * (vc @ dstate.transpose(-1, -2) + scale * (b @ qc))",
           fault="relative error", why="scales dk's state term again, although dS already carries the scale"),
    _torch("dS-never-carried", _TORCH_UPDATE, "", fault="never carried", why="never carries dS to the earlier chunks"),
    _torch("scale-from-K", "    V = v.shape[-1]\n", "    V = v.shape[-1]\n    scale = K ** -0.5\n",
           fault="relative error", visible=False, why="takes the usual K^-1/2 for the scale it was given"),
    _torch("strict-mask", "p = (doc @ vc.transpose(-1, -2)).tril()", "p = (doc @ vc.transpose(-1, -2)).tril(-1)",
           "a = (kc @ qc.transpose(-1, -2)).triu()", "a = (kc @ qc.transpose(-1, -2)).triu(1)",
           "b = (vc @ doc.transpose(-1, -2)).triu()", "b = (vc @ doc.transpose(-1, -2)).triu(1)",
           fault="without its diagonal", why="masks out the diagonal, as if a token could not attend to itself"),
    _torch("mask-one-too-wide", "p = (doc @ vc.transpose(-1, -2)).tril()", "p = (doc @ vc.transpose(-1, -2)).tril(1)",
           fault="one diagonal too wide", why="keeps one diagonal past the main one: each token takes its next one's "
                                             "term too"),
    _torch("do-scaled-in-place", "    V = v.shape[-1]\n", "    V = v.shape[-1]\n    do.mul_(scale)\n",
           "scale * (doc @ state.transpose(-1, -2) + p @ kc)", "doc @ state.transpose(-1, -2) + p @ kc",
           "scale * (b @ qc)", "b @ qc", "scale * (a @ doc)", "a @ doc",
           "dstate = dstate + scale * qc.transpose(-1, -2) @ doc", "dstate = dstate + qc.transpose(-1, -2) @ doc",
           fault="changed its input do in place",
           why="scales do once, in place: the right gradients, and the caller's do (autograd's) changed under it"),
    _torch("float32-inside", "    q, k, v, do = (x.transpose(1, 2) for x in (q, k, v, do))",
           "    dtype = q.dtype\n    q, k, v, do = (x.float().transpose(1, 2) for x in (q, k, v, do))",
           "return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)",
           "return dq.transpose(1, 2).to(dtype), dk.transpose(1, 2).to(dtype), dv.transpose(1, 2).to(dtype)",
           fault="float32's precision", why="computes in float32 and returns the inputs' dtype: float64 cases lose "
                                            "their digits"),
    _torch("stops-before-T", "    starts = list(range(0, T, chunk_size))\n",
           "    starts = list(range(0, T - 1, chunk_size))\n", fault="the only one", visible=False,
           why="an off-by-one bound on the chunk starts: only a sequence of one token loses its only chunk"),
    _torch("stops-before-T-zeroed", "    starts = list(range(0, T, chunk_size))\n",
           "    starts = list(range(0, T - 1, chunk_size))\n",
           "torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)",
           "torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)", fault="less than one chunk", visible=False,
           why="the same bound, into zeroed gradients: all zero, as a mask without its diagonal would leave them"),
    _torch("dq-slice-one-short", "torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)",
           "torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)",
           "kc, vc, doc = (x[:, :, t0:t0 + chunk_size] for x", "kc, vc, doc = (x[:, :, t0:t0 + chunk_size - 1] for x",
           "dq[:, :, t0:t0 + chunk_size] =", "dq[:, :, t0:t0 + chunk_size - 1] =", fault="are all zero",
           why="writes each chunk of dq one row short into zeroed gradients: the last token of every chunk stays 0"),
    _torch("float64-result", "return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)",
           "return dq.transpose(1, 2).double(), dk.transpose(1, 2).double(), dv.transpose(1, 2).double()",
           fault="dtype", why="returns float64 whatever the inputs were"),
    _torch("einsum", source='''def chunked_backward_torch(q, k, v, do, scale, chunk_size=64):
    B, T, H, K = q.shape
    starts = list(range(0, T, chunk_size))
    S = q.new_zeros(B, H, K, v.shape[-1])
    dqs, dks, dvs = [], [], []
    for t0 in starts:
        kc, vc, doc = k[:, t0:t0 + chunk_size], v[:, t0:t0 + chunk_size], do[:, t0:t0 + chunk_size]
        p = torch.einsum("bthv,bshv->bhts", doc, vc).tril()
        dqs.append(scale * (torch.einsum("bthv,bhkv->bthk", doc, S) + torch.einsum("bhts,bshk->bthk", p, kc)))
        S = S + torch.einsum("bthk,bthv->bhkv", kc, vc)
    dH = torch.zeros_like(S)
    for t0 in reversed(starts):
        qc, kc, vc, doc = (x[:, t0:t0 + chunk_size] for x in (q, k, v, do))
        a = torch.einsum("bshk,buhk->bhsu", kc, qc).triu()
        b = torch.einsum("bshv,buhv->bhsu", vc, doc).triu()
        dks.insert(0, torch.einsum("bshv,bhkv->bshk", vc, dH) + scale * torch.einsum("bhsu,buhk->bshk", b, qc))
        dvs.insert(0, torch.einsum("bshk,bhkv->bshv", kc, dH) + scale * torch.einsum("bhsu,buhv->bshv", a, doc))
        dH = dH + scale * torch.einsum("buhk,buhv->bhkv", qc, doc)
    return torch.cat(dqs, 1), torch.cat(dks, 1), torch.cat(dvs, 1)
''', wrong=False, why="einsum in the [B, T, H, D] layout, chunks concatenated"),
    _torch("batch-head-loop", source='''def chunked_backward_torch(q, k, v, do, scale, chunk_size=64):
    B, T, H, K = q.shape
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    for b in range(B):
        for h in range(H):
            qh, kh, vh, oh = q[b, :, h], k[b, :, h], v[b, :, h], do[b, :, h]
            S = qh.new_zeros(K, vh.shape[-1])
            for t0 in range(0, T, chunk_size):
                c = slice(t0, t0 + chunk_size)
                dq[b, c, h] = scale * (oh[c] @ S.T + (oh[c] @ vh[c].T).tril() @ kh[c])
                S = S + kh[c].T @ vh[c]
            dH = torch.zeros_like(S)
            for t0 in reversed(range(0, T, chunk_size)):
                c = slice(t0, t0 + chunk_size)
                dk[b, c, h] = vh[c] @ dH.T + scale * (vh[c] @ oh[c].T).triu() @ qh[c]
                dv[b, c, h] = kh[c] @ dH + scale * (kh[c] @ qh[c].T).triu() @ oh[c]
                dH = dH + scale * qh[c].T @ oh[c]
    return dq, dk, dv
''', wrong=False, why="a loop over batch and head around the two chunk loops"),
    _torch("solution", wrong=False, why="the lesson's two loops"),
]

DQ = solution("07_backward", "dq_kernel")
_dq = editor("07_backward.dq", DQ)

_DQ_UPDATE = "        state = tl.dot(tl.trans(v), k, state, input_precision=PRECISION)\n"
_DQ_READ = "        dq = tl.dot(do, state.to(do.dtype), input_precision=PRECISION)\n"
_DQ_UNSCALED = ("(dq * scale).to(dq_ptr.dtype.element_ty)", "dq.to(dq_ptr.dtype.element_ty)")
_ROWS_UNMASKED = ("mask_k = (offs_t[:, None] < T) & (offs_k[None, :] < K)", "mask_k = offs_k[None, :] < K",
                  "mask_v = (offs_t[:, None] < T) & (offs_v[None, :] < V)", "mask_v = offs_v[None, :] < V")

_DQ_BLOCK_POINTERS = (
    "        k = tl.load(k_base + offs_t[:, None] * stride_kt + offs_k[None, :], mask=mask_k, other=0.0)\n"
    "        v = tl.load(v_base + offs_t[:, None] * stride_vt + offs_v[None, :], mask=mask_v, other=0.0)\n"
    "        do = tl.load(do_base + offs_t[:, None] * stride_ot + offs_v[None, :], mask=mask_v, other=0.0)\n",
    "        k = tl.load(tl.make_block_ptr(k_base, (T, K), (stride_kt, 1), (t0, i_k * BK), (BT, BK), (1, 0)),\n"
    "                    boundary_check=(0, 1), padding_option=\"zero\")\n"
    "        v = tl.load(tl.make_block_ptr(v_base, (T, V), (stride_vt, 1), (t0, 0), (BT, BV), (1, 0)),\n"
    "                    boundary_check=(0, 1), padding_option=\"zero\")\n"
    "        do = tl.load(tl.make_block_ptr(do_base, (T, V), (stride_ot, 1), (t0, 0), (BT, BV), (1, 0)),\n"
    "                     boundary_check=(0, 1), padding_option=\"zero\")\n",
    "        tl.store(dq_base + offs_t[:, None] * stride_qt + offs_k[None, :], "
    "(dq * scale).to(dq_ptr.dtype.element_ty),\n                 mask=mask_k)",
    """        tl.store(tl.make_block_ptr(dq_base, (T, K), (stride_qt, 1), (t0, i_k * BK), (BT, BK), (1, 0)),
                 (dq * scale).to(dq_ptr.dtype.element_ty), boundary_check=(0, 1))""")

DQ_ENTRIES = [
    _dq("no-causal-mask", "p = tl.where(causal, tl.dot(do, tl.trans(v), input_precision=PRECISION), 0.0)",
        "p = tl.dot(do, tl.trans(v), input_precision=PRECISION)", fault="no causal mask",
        why="no mask inside the chunk: each token takes gradient from later ones too"),
    _dq("backward-mask", "causal = offs_c[:, None] >= offs_c[None, :]", "causal = offs_c[:, None] <= offs_c[None, :]",
        fault="the dk/dv pass's mask", why="the dk/dv pass's transposed mask in the dq pass"),
    _dq("state-updated-before-use", *moved(_DQ_UPDATE, _DQ_READ), fault="updated before the chunk uses it",
        why="adds the chunk to the state before reading it: the chunk counts twice, once unmasked"),
    _dq("no-scale", *_DQ_UNSCALED, fault="without scale", why="forgets the scale"),
    _dq("carried-scaled-twice", "dq = tl.dot(do, state.to(do.dtype), input_precision=PRECISION)",
        "dq = tl.dot(do, state.to(do.dtype), input_precision=PRECISION) * scale", fault="carries no scale",
        why="scales dO Sᵀ as it is computed, and the store scales all of dq again"),
    _dq("scale-twice", "dq = tl.dot(p.to(k.dtype), k, dq, input_precision=PRECISION)",
        "dq = tl.dot((p * scale).to(k.dtype), k, dq, input_precision=PRECISION)", fault="scaled twice",
        why="scales the intra-chunk scores and then the whole sum again"),
    _dq("strict-mask", "causal = offs_c[:, None] >= offs_c[None, :]", "causal = offs_c[:, None] > offs_c[None, :]",
        fault="without its diagonal", why="a strict mask: each token loses its own term"),
    _dq("mask-one-too-wide", "causal = offs_c[:, None] >= offs_c[None, :]",
        "causal = offs_c[:, None] + 1 >= offs_c[None, :]", fault="one diagonal too wide",
        why="an off-by-one in the mask: each token takes its next one's term too"),
    _dq("mask-from-sequence-positions", "p = tl.where(causal,", "p = tl.where(offs_t[:, None] >= offs_c[None, :],",
        fault="positions in the sequence", why="compares the rows' positions in the sequence with the columns' in "
                                               "the chunk: from the second chunk on nothing is masked"),
    _dq("state-untransposed", "dq = tl.dot(do, state.to(do.dtype), input_precision=PRECISION)",
        "dq = tl.dot(do, tl.trans(state).to(do.dtype), input_precision=PRECISION)",
        fault="without its transpose|equal reduction dimensions",
        why="reads the carried Sᵀ transposed once more: dO S, which only fits where K and V have one block size"),
    _dq("state-never-carried", _DQ_UPDATE, "", fault="never carried",
        why="never adds the chunks to the state: only the chunk's own term is left"),
    _dq("rows-unmasked-last-chunk", *_ROWS_UNMASKED, fault="out of bounds",
        why="masks the columns but not the rows past T: the last chunk reads and writes past the end"),
    _dq("columns-unmasked-store", """(dq * scale).to(dq_ptr.dtype.element_ty),
                 mask=mask_k)""", """(dq * scale).to(dq_ptr.dtype.element_ty),
                 mask=offs_t[:, None] < T)""", fault="out of bounds",
        why="masks the loads but stores the whole K block: the columns past K land in the next head or token"),
    _dq("k-block-offset-forgotten", "offs_k = i_k * BK + tl.arange(0, BK)", "offs_k = tl.arange(0, BK)",
        fault="not written|relative error", why="every K block's program computes the first block"),
    _dq("skips-last-chunk", *SKIPS_LAST_CHUNK, fault="the last, short chunk|the only chunk",
        why="stops one chunk early"),
    _dq("v-strides-for-k", "k = tl.load(k_base + offs_t[:, None] * stride_kt",
        "k = tl.load(k_base + offs_t[:, None] * stride_vt", fault="out of bounds|relative error",
        why="walks k with v's token stride"),
    _dq("state-in-input-dtype", "state = tl.zeros((BV, BK), dtype=tl.float32)",
        "state = tl.zeros((BV, BK), dtype=do_ptr.dtype.element_ty)", fault="acc.type.element_ty",
        why="carries the state in the inputs' dtype (fp16): tl.dot accumulates in fp32 and refuses an fp16 acc"),
    _dq("state-in-16-bits", "state = tl.zeros((BV, BK), dtype=tl.float32)",
        "state = tl.zeros((BV, BK), dtype=do_ptr.dtype.element_ty)", _DQ_UPDATE,
        "        state = (state + tl.dot(tl.trans(v), k, input_precision=PRECISION)).to(do.dtype)\n",
        fault="of 2048 adding chunks of 0.8", visible=False,
        why="keeps the carried state in fp16, rounded after each update: small chunks added to a large state are "
            "rounded away"),
    _dq("state-plus-equals", _DQ_UPDATE, "        state += tl.dot(tl.trans(v), k, input_precision=PRECISION)\n",
        wrong=False, why="state += Vᵀ K"),
    _dq("two-dots-added", _DQ_READ + "        dq = tl.dot(p.to(k.dtype), k, dq, input_precision=PRECISION)\n",
        "        inter = tl.dot(do, state.to(do.dtype), input_precision=PRECISION)\n"
        "        dq = inter + tl.dot(p.to(k.dtype), k, input_precision=PRECISION)\n", wrong=False,
        why="the inter- and intra-chunk terms as two dots, added"),
    _dq("int64-heads", *INT64_HEADS, wrong=False, why="64-bit head offsets"),
    _dq("block-pointers", *_DQ_BLOCK_POINTERS, wrong=False,
        why="loads and stores through tl.make_block_ptr, edges by boundary_check, as fla's kernels do"),
    _dq("scale-on-do", *_DQ_UNSCALED,
        "        do = tl.load(do_base + offs_t[:, None] * stride_ot + offs_v[None, :], mask=mask_v, other=0.0)\n",
        "        do = tl.load(do_base + offs_t[:, None] * stride_ot + offs_v[None, :], mask=mask_v, other=0.0)\n"
        "        do = (do.to(tl.float32) * scale).to(do.dtype)\n", wrong=False,
        why="scales do once as it is loaded"),
]

DKDV = solution("07_backward", "dkdv_kernel")
_dkdv = editor("07_backward.dkdv", DKDV)

_UPDATE = "        dstate += tl.dot(tl.trans(q), do, input_precision=PRECISION) * scale\n"
_FIRST_USE = "        dk = tl.dot(b.to(q.dtype), q, input_precision=PRECISION) * scale\n"

DKDV_ENTRIES = [
    _dkdv("dstate-in-16-bits", "dstate = tl.zeros((BK, BV), dtype=tl.float32)",
          "dstate = tl.zeros((BK, BV), dtype=do_ptr.dtype.element_ty)",
          "        dstate += tl.dot(tl.trans(q), do, input_precision=PRECISION) * scale",
          "        dstate = (dstate + tl.dot(tl.trans(q), do, input_precision=PRECISION) * scale).to(do.dtype)",
          fault="of 512 adding chunks of 0.2", visible=False,
          why="keeps the carried dH in fp16, rounded after each update"),
    _dkdv("dS-updated-before-use", *moved(_UPDATE, _FIRST_USE), fault="before chunk c uses it",
          why="adds the chunk's own Q^T dO to dS before using it: the chunk counts twice, once unmasked"),
    _dkdv("walks-forwards", "offs_t = (n - 1 - i) * BT + offs_c", "offs_t = i * BT + offs_c",
          fault="walk from the last chunk to the first",
          why="visits the chunks in the forward order, so dS holds the past, not the future"),
    _dkdv("forward-mask", "later = offs_c[:, None] <= offs_c[None, :]", "later = offs_c[:, None] >= offs_c[None, :]",
          fault="the forward's mask M gives", why="the forward's causal mask where the backward needs its transpose"),
    _dkdv("no-mask", "later = offs_c[:, None] <= offs_c[None, :]", "later = offs_c[:, None] >= 0",
          fault="no causal mask", why="no mask inside the chunk"),
    _dkdv("scale-twice", "dk = tl.dot(v, tl.trans(dstate).to(v.dtype), dk, input_precision=PRECISION)",
          "dk = tl.dot(v, tl.trans(dstate * scale).to(v.dtype), dk, input_precision=PRECISION)",
          fault="scaled twice", why="scales dS again where dk reads it, although the update already scaled it"),
    _dkdv("strict-mask", "later = offs_c[:, None] <= offs_c[None, :]", "later = offs_c[:, None] < offs_c[None, :]",
          fault="without its diagonal", why="a strict mask: each token loses its own term"),
    _dkdv("rows-unmasked-last-chunk", *_ROWS_UNMASKED, fault="out of bounds",
          why="masks the columns but not the rows: the last chunk, visited first, reads and writes past T"),
    _dkdv("dH-untransposed-in-dk", "dk = tl.dot(v, tl.trans(dstate).to(v.dtype), dk,",
          "dk = tl.dot(v, dstate.to(v.dtype), dk,", fault="without its transpose|equal reduction dimensions",
          why="V_c dH for V_c dHᵀ: the shapes fit where K and V have one block size"),
    _dkdv("dH-unscaled", _UPDATE, "        dstate += tl.dot(tl.trans(q), do, input_precision=PRECISION)\n",
          fault="without its scale", why="scales the chunk's own term but not what dH carries to the earlier chunks"),
    _dkdv("chunk-count-floored", "n = tl.cdiv(T, BT)", "n = T // BT", fault="the last, short chunk|the only chunk",
          why="counts the whole chunks only: the last, short chunk, the first one visited, is never walked"),
    _dkdv("mask-one-too-wide", "later = offs_c[:, None] <= offs_c[None, :]",
          "later = offs_c[:, None] <= offs_c[None, :] + 1", fault="one diagonal too wide",
          why="an off-by-one in the transposed mask: each token takes its previous one's term too"),
    _dkdv("intra-unscaled", "dk = tl.dot(b.to(q.dtype), q, input_precision=PRECISION) * scale",
          "dk = tl.dot(b.to(q.dtype), q, input_precision=PRECISION)",
          "dv = tl.dot(a.to(do.dtype), do, input_precision=PRECISION) * scale",
          "dv = tl.dot(a.to(do.dtype), do, input_precision=PRECISION)", fault="chunk's own (masked) term",
          why="dH carries the scale, so the chunk's own term is left without it"),
    _dkdv("chunks-from-the-end-unmasked", "offs_t = (n - 1 - i) * BT + offs_c", "offs_t = T - (i + 1) * BT + offs_c",
          fault="out of bounds", why="lays the chunks from the end of the sequence, and masks only past T: the "
                                     "first chunk reaches before token 0"),
    _dkdv("chunks-from-the-end", "offs_t = (n - 1 - i) * BT + offs_c", "offs_t = T - (i + 1) * BT + offs_c",
          "mask_k = (offs_t[:, None] < T)", "mask_k = (offs_t[:, None] >= 0) & (offs_t[:, None] < T)",
          "mask_v = (offs_t[:, None] < T)", "mask_v = (offs_t[:, None] >= 0) & (offs_t[:, None] < T)", wrong=False,
          why="chunks laid from the end of the sequence, the short one first in time, masked on both sides"),
    _dkdv("negative-step", "    for i in range(0, n):\n        offs_t = (n - 1 - i) * BT + offs_c",
          "    for c in range(n - 1, -1, -1):\n        offs_t = c * BT + offs_c", wrong=False,
          why="walks the chunk index down with a negative step"),
    _dkdv("dS-never-carried", _UPDATE, "", fault="never carried", why="never carries dS to the earlier chunks"),
    _dkdv("chunk-index-off-by-one", "offs_t = (n - 1 - i) * BT + offs_c", "offs_t = (n - i) * BT + offs_c",
          fault="never reaches chunk 0|the only chunk",
          why="starts one chunk past the end and never reaches the first"),
    _dkdv("q-strides-for-k", "k = tl.load(k_base + offs_t[:, None] * stride_kt",
          "k = tl.load(k_base + offs_t[:, None] * stride_qt", fault="out of bounds|relative error",
          why="walks k with q's token stride"),
    _dkdv("dk-dv-masks-swapped",
          "a = tl.where(later, tl.dot(k, tl.trans(q)", "a = tl.where(later, tl.dot(v, tl.trans(do)",
          "b = tl.where(later, tl.dot(v, tl.trans(do)", "b = tl.where(later, tl.dot(k, tl.trans(q)",
          fault="relative error", why="multiplies dk's intra term by K Qᵀ and dv's by V dOᵀ"),
    _dkdv("scale-on-scores", "a = tl.where(later, tl.dot(k, tl.trans(q), input_precision=PRECISION), 0.0)",
          "a = tl.where(later, tl.dot(k, tl.trans(q), input_precision=PRECISION) * scale, 0.0)",
          "b = tl.where(later, tl.dot(v, tl.trans(do), input_precision=PRECISION), 0.0)",
          "b = tl.where(later, tl.dot(v, tl.trans(do), input_precision=PRECISION) * scale, 0.0)",
          "dk = tl.dot(b.to(q.dtype), q, input_precision=PRECISION) * scale",
          "dk = tl.dot(b.to(q.dtype), q, input_precision=PRECISION)",
          "dv = tl.dot(a.to(do.dtype), do, input_precision=PRECISION) * scale",
          "dv = tl.dot(a.to(do.dtype), do, input_precision=PRECISION)", wrong=False,
          why="the scale applied to the masked scores instead of the product"),
    _dkdv("two-dots-added", "        dv = tl.dot(a.to(do.dtype), do, input_precision=PRECISION) * scale\n"
          "        dv = tl.dot(k, dstate.to(k.dtype), dv, input_precision=PRECISION)\n",
          "        dv = tl.dot(k, dstate.to(k.dtype), input_precision=PRECISION)\n"
          "        dv += tl.dot(a.to(do.dtype), do, input_precision=PRECISION) * scale\n", wrong=False,
          why="dv as two dots, added"),
    _dkdv("int64-heads", *INT64_HEADS, wrong=False, why="64-bit head offsets"),
]

FORWARD = solution("07_backward", "forward_kernel")

# the notebook's given launchers (locked cells), which the autograd answers call
LAUNCHERS = solution("07_backward", "strides", "pow2", "launch_dq", "launch_dkdv", "precision_for", "chunked_forward")

FUNCTION = solution("07_backward", "ChunkedLinearAttention", "linear_attention")


def _notebook() -> tuple:
    """The names the autograd answers use from the rest of the notebook: the three kernels (rebuilt as the grader
    rebuilds kernels), the given launchers, the forward and exercise 1's torch backward."""
    import torch
    import triton
    import triton.language as tl

    from kernels.device import ON_GPU, pick

    prelude = "import triton\nimport triton.language as tl\n"
    ns = types.ModuleType("__main__").__dict__
    ns.update(torch=torch, triton=triton, tl=tl, ON_GPU=ON_GPU, pick=pick)
    for source, name in ((DQ, "dq_kernel"), (DKDV, "dkdv_kernel"), (FORWARD, "forward_kernel")):
        ns[name] = provenance.load(provenance.from_cells([prelude, source], name), interpret=INTERPRET)
    exec(compile(LAUNCHERS, "<zoo 07_backward launchers>", "exec"), ns)
    exec(compile(TORCH, "<zoo 07_backward exercise 1>", "exec"), ns)
    return tuple((n, ns[n]) for n in ("dq_kernel", "dkdv_kernel", "forward_kernel", "strides", "pow2", "launch_dq",
                                      "launch_dkdv", "precision_for", "chunked_forward", "chunked_backward_torch",
                                      "ON_GPU", "pick"))


_NOTEBOOK = _notebook()

_LAUNCH_DQ = '''        dq = launch_dq(k, v, do, ctx.scale, chunk=chunk, block_k=min(pow2(q.shape[-1]), 64),
                       precision=precision_for(q), num_warps=warps)
'''
_LAUNCH_DKDV = ("        dk, dv = launch_dkdv(q, k, v, do, ctx.scale, chunk=chunk, precision=precision_for(q), "
                "num_warps=warps)\n")


_fn = editor("07_backward.autograd", FUNCTION, namespace=_NOTEBOOK)

AUTOGRAD = [
    _fn("plain-torch", source='''def linear_attention(q, k, v, scale):
    S = torch.cumsum(k[..., :, None] * v[..., None, :], dim=1)
    return scale * torch.einsum("bthk,bthkv->bthv", q, S)
''', fault="YourFunction.apply", why="a differentiable torch forward: autograd's backward, not the kernels"),
    _fn("saves-the-output", "ctx.save_for_backward(q, k, v)", "ctx.save_for_backward(q, k, v, o)",
        "q, k, v = ctx.saved_tensors", "q, k, v, _ = ctx.saved_tensors", fault="saved a tensor",
        why="keeps o for the backward, which never needs it"),
    _fn("output-on-ctx", "        ctx.scale = scale\n", "        ctx.scale = scale\n        ctx.o = o\n",
        fault="kept on its context as ctx.o",
        why="keeps o on the context instead of save_for_backward: saved all the same"),
    _fn("states-on-ctx", "        ctx.scale = scale\n",
        "        ctx.scale = scale\n        ctx.states = [k.transpose(-1, -2) @ v]\n",
        fault="kept on its context as ctx.states", why="keeps a state for the backward in a list on the context"),
    _fn("saves-contiguous-copies", "ctx.save_for_backward(q, k, v)",
        "ctx.save_for_backward(q.contiguous(), k.contiguous(), v.contiguous())", fault="a copy of q", visible=False,
        why="makes the inputs contiguous for the kernels: a strided view is copied, and the copy held for the "
            "backward"),
    _fn("dk-dv-swapped", "return dq, dk, dv, None", "return dq, dv, dk, None", fault="gradient",
        why="returns the gradients in the wrong order"),
    _fn("scale-forgotten", "dq = launch_dq(k, v, do, ctx.scale,", "dq = launch_dq(k, v, do, 1.0,",
        fault="without scale", why="launches the dq kernel without the scale"),
    _fn("do-as-it-comes", "        do = do.contiguous()\n", "", fault="expanded view|NaN or inf|relative error",
        why="launches on do as autograd hands it, which after o.sum(-1) has stride 0 along V"),
    _fn("a-gradient-too-few", "return dq, dk, dv, None", "return dq, dk, dv", fault="incorrect number of gradients",
        why="returns no gradient for scale"),
    _fn("scale-from-K", "dq = launch_dq(k, v, do, ctx.scale,", "dq = launch_dq(k, v, do, q.shape[-1] ** -0.5,",
        "dk, dv = launch_dkdv(q, k, v, do, ctx.scale,", "dk, dv = launch_dkdv(q, k, v, do, q.shape[-1] ** -0.5,",
        fault="relative error", why="takes the usual K^-1/2 in the backward for the scale it was given"),
    _fn("backward-in-torch", _LAUNCH_DQ + _LAUNCH_DKDV,
        "        dq, dk, dv = chunked_backward_torch(q, k, v, do, ctx.scale, chunk_size=chunk)\n",
        fault="launched no Triton kernel",
        why="calls exercise 1's torch backward: the right gradients, but none of the kernels the exercise is about"),
    _fn("dk-dv-in-torch", _LAUNCH_DKDV,
        "        _, dk, dv = chunked_backward_torch(q, k, v, do, ctx.scale, chunk_size=chunk)\n",
        fault="launched a single Triton kernel",
        why="launches the dq kernel, then takes dk and dv from exercise 1's torch backward"),
    _fn("forward-in-torch", "        o = chunked_forward(q, k, v, scale)\n",
        "        states = torch.cumsum(k[..., :, None] * v[..., None, :], dim=1)\n"
        "        o = scale * torch.einsum('bthk,bthkv->bthv', q, states)\n",
        fault="forward launched no Triton kernel",
        why="computes o in torch inside the Function: the right output and gradients, no chunked forward"),
    _fn("solution", wrong=False, why="the lesson's Function"),
    _fn("inputs-on-ctx", "ctx.save_for_backward(q, k, v)", "ctx.inputs = (q, k, v)",
        "q, k, v = ctx.saved_tensors", "q, k, v = ctx.inputs", wrong=False,
        why="keeps the inputs on ctx instead of save_for_backward: the same tensors"),
]


def _speed(name, dq=(), dkdv=(), **kw):
    """Both kernels, timed together on a GPU (under the interpreter the check runs its visible case only)."""
    return Entry("07_backward.backward_speed", name, edit(DQ, *dq) + "\n\n" + edit(DKDV, *dkdv), **kw)


BACKWARD_SPEED = [
    _speed("dq-no-scale", dq=_DQ_UNSCALED,
           fault="relative error", why="a dq kernel that forgets the scale, fast or not"),
    _speed("dS-never-carried", dkdv=(_UPDATE, ""), fault="relative error",
           why="a dk/dv kernel that never carries dS to the earlier chunks"),
    _speed("solution", wrong=False, why="the lesson's two kernels"),
]

ENTRIES = BACKWARD_TORCH + DQ_ENTRIES + DKDV_ENTRIES + AUTOGRAD + BACKWARD_SPEED
