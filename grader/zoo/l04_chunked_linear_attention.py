"""Lesson 04's zoo: the chunked form in torch, the intra-chunk kernel, the fused chunked forward."""

from . import Entry, edit, editor, moved, solution

__all__ = ["ENTRIES", "INT64_HEADS", "SKIPS_LAST_CHUNK"]

TORCH = solution("04_chunked_linear_attention", "chunked_attention_torch")
_torch = editor("04_chunked_linear_attention.chunked_torch", TORCH)

_TORCH_UPDATE = "        state = state + kc.transpose(-1, -2) @ vc\n"
_TORCH_OUT = "        o[:, :, t0:t0 + chunk_size] = scale * (qc @ state + scores @ vc)\n"

CHUNKED_TORCH = [
    _torch("token-loop", source='''def chunked_attention_torch(q, k, v, scale, chunk_size=64):
    B, T, H, K = q.shape
    state = q.new_zeros(B, H, K, v.shape[-1])
    o = torch.empty_like(v)
    for t in range(T):
        state = state + k[:, t, :, :, None] * v[:, t, :, None, :]
        o[:, t] = scale * (q[:, t, :, None, :] @ state).squeeze(-2)
    return o
''', fault="tokens", why="lesson 02's recurrence, token by token"),
    _torch("quadratic", source='''def chunked_attention_torch(q, k, v, scale, chunk_size=64):
    scores = torch.einsum("bthk,bshk->bhts", q, k).tril()
    return scale * torch.einsum("bhts,bshv->bthv", scores, v)
''', fault="quadratic", why="causal attention without the softmax, as one T x T product"),
    _torch("not-causal-in-chunk", ".tril()", "", fault="no causal mask", why="forgets the causal mask in a chunk"),
    _torch("state-never-carried", _TORCH_UPDATE, "", fault="never carried",
           why="never carries the state to the next chunk"),
    _torch("state-before-output", *moved(_TORCH_UPDATE, _TORCH_OUT), fault="counted twice",
           why="adds the chunk to the state before using it: counts the chunk twice"),
    _torch("float64-result", "    return o.transpose(1, 2)", "    return o.transpose(1, 2).double()", fault="dtype",
           why="returns float64 whatever the inputs were"),
    _torch("skips-last-chunk", "for t0 in range(0, T, chunk_size):", "for t0 in range(0, T - chunk_size, chunk_size):",
           fault="relative error|NaN", why="stops one chunk early, leaving the tail of o empty"),
    _torch("scale-on-state", "o[:, :, t0:t0 + chunk_size] = scale * (qc @ state + scores @ vc)",
           "o[:, :, t0:t0 + chunk_size] = qc @ state + scale * scores @ vc", fault="only the in-chunk term is scaled",
           why="scales only the intra-chunk term"),
    _torch("batch-head-loop", source='''def chunked_attention_torch(q, k, v, scale, chunk_size=64):
    B, T, H, K = q.shape
    o = torch.empty(B, T, H, v.shape[-1], dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            qh, kh, vh = q[b, :, h], k[b, :, h], v[b, :, h]
            state = qh.new_zeros(K, vh.shape[-1])
            for t0 in range(0, T, chunk_size):
                qc, kc, vc = qh[t0:t0 + chunk_size], kh[t0:t0 + chunk_size], vh[t0:t0 + chunk_size]
                o[b, t0:t0 + chunk_size, h] = scale * (qc @ state + (qc @ kc.T).tril() @ vc)
                state = state + kc.T @ vc
    return o
''', wrong=False, why="a loop over batch and head around the chunk loop"),
    _torch("einsum", source='''def chunked_attention_torch(q, k, v, scale, chunk_size=64):
    B, T, H, K = q.shape
    state = q.new_zeros(B, H, K, v.shape[-1])
    outs = []
    for t0 in range(0, T, chunk_size):
        qc, kc, vc = q[:, t0:t0 + chunk_size], k[:, t0:t0 + chunk_size], v[:, t0:t0 + chunk_size]
        scores = torch.einsum("bthk,bshk->bhts", qc, kc).tril()
        intra = torch.einsum("bhts,bshv->bthv", scores, vc)
        inter = torch.einsum("bthk,bhkv->bthv", qc, state)
        outs.append(scale * (inter + intra))
        state = state + torch.einsum("bthk,bthv->bhkv", kc, vc)
    return torch.cat(outs, dim=1)
''', wrong=False, why="einsum in the [B, T, H, D] layout, chunks concatenated"),
    _torch("fixed-chunk-64", "for t0 in range(0, T, chunk_size):", "for t0 in range(0, T, 64):",
           "x[:, :, t0:t0 + chunk_size]", "x[:, :, t0:t0 + 64]", "o[:, :, t0:t0 + chunk_size]", "o[:, :, t0:t0 + 64]",
           fault="chunk_size argument", why="chunks of 64 whatever chunk_size says (the message once called it a "
                                            "T x T score matrix)"),
    _torch("solution", wrong=False, why="the lesson's loop"),
]

INTRA = solution("04_chunked_linear_attention", "intra_chunk_kernel")

FUSED = solution("04_chunked_linear_attention", "chunked_attention_kernel")

_intra = editor("04_chunked_linear_attention.intra_chunk", INTRA)
_fused = editor("04_chunked_linear_attention.chunked_fwd", FUSED)

_UPDATE = "        state = tl.dot(tl.trans(k), v, state, input_precision=PRECISION)\n"
_READ = "        o = tl.dot(q, state.to(q.dtype), input_precision=PRECISION)\n"
#: Edits that lesson 07's kernels, written in this lesson's way, take too.
INT64_HEADS = ("    i_b = i_bh // H\n    i_h = i_bh % H\n",
               "    i_b = (i_bh // H).to(tl.int64)\n    i_h = (i_bh % H).to(tl.int64)\n")
SKIPS_LAST_CHUNK = ("for t0 in range(0, T, BT):", "for t0 in range(0, T - BT, BT):")

_LOADS = INTRA[INTRA.index("    q = tl.load("):INTRA.index("    scores = tl.dot(")]
_K_LOAD = "k = tl.load(k_ptr + i_b * stride_kb + i_h * stride_kh + offs_t[:, None] * stride_kt + offs_k[None, :],"

INTRA_CHUNK = [
    _intra("loads-unmasked", "                mask=mask_qk, other=0.0)\n    k", "                )\n    k",
           "                mask=mask_qk, other=0.0)\n    v", "                )\n    v",
           "                mask=mask_vo, other=0.0)\n", "                )\n",
           fault="out of bounds", why="masks only the store: the loads read past T, K and V"),
    _intra("v-without-other", "                mask=mask_vo, other=0.0)\n", "                mask=mask_vo)\n",
           fault="without `other=`", where=("interpreter",),
           why="v's rows past T are masked but undefined: 0 x undefined is not 0 in the dot (compiled by Triton 3.6 "
               "they read 0, so on the H100 it passes; the interpreter's checks read NaN)"),
    _intra("q-strides-for-k", _K_LOAD,
           "k = tl.load(k_ptr + i_b * stride_qb + i_h * stride_qh + offs_t[:, None] * stride_qt + offs_k[None, :],",
           fault="out of bounds|relative error", why="addresses k with q's strides"),
    _intra("v-strides-for-o", "tl.store(o_ptr + i_b * stride_ob + i_h * stride_oh + offs_t[:, None] * stride_ot",
           "tl.store(o_ptr + i_b * stride_vb + i_h * stride_vh + offs_t[:, None] * stride_vt",
           fault="out of bounds|not written|relative error", why="stores o with v's strides"),
    _intra("not-causal", "    scores = tl.where(offs_c[:, None] >= offs_c[None, :], scores, 0.0)\n", "",
           fault="no causal mask", why="no causal mask inside the chunk"),
    _intra("drops-diagonal", "offs_c[:, None] >= offs_c[None, :]", "offs_c[:, None] > offs_c[None, :]",
           fault="leaves out the diagonal", why="a strict mask: each token misses itself"),
    _intra("no-scale", " * scale\n", "\n", fault="never applied", why="forgets the scale"),
    _intra("k-mask-by-block", "mask_qk = (offs_t[:, None] < T) & (offs_k[None, :] < K)",
           "mask_qk = offs_t[:, None] < T", fault="out of bounds",
           why="masks rows past T but not columns past K"),
    _intra("store-mask-rows-only", "             o.to(o_ptr.dtype.element_ty), mask=mask_vo)",
           "             o.to(o_ptr.dtype.element_ty), mask=offs_t[:, None] < T)", fault="out of bounds",
           why="the store masks rows but not the columns past V"),
    _intra("chunk-offset-forgotten", "offs_t = i_c * BT + offs_c", "offs_t = offs_c", fault="not written",
           why="every chunk's program computes the first chunk"),
    Entry("04_chunked_linear_attention.intra_chunk", "fused-kernel", edit(
        FUSED, "def chunked_attention_kernel(", "def intra_chunk_kernel("), fault="relative error|not written",
        why="exercise 3's fused kernel on the intra-chunk grid"),
    _intra("where-after-dot", "    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION)\n"
           "    scores = tl.where(offs_c[:, None] >= offs_c[None, :], scores, 0.0)\n",
           "    causal = offs_t[:, None] >= offs_t[None, :]\n"
           "    scores = tl.where(causal, tl.dot(q, tl.trans(k), input_precision=PRECISION), 0.0)\n", wrong=False,
           why="the causal mask from absolute token indices"),
    Entry("04_chunked_linear_attention.intra_chunk", "tile-loader", '''@triton.jit
def _tile(ptr, b_off, h_off, offs_t, stride_t, offs_d, T, D):
    mask = (offs_t[:, None] < T) & (offs_d[None, :] < D)
    return tl.load(ptr + b_off + h_off + offs_t[:, None] * stride_t + offs_d[None, :], mask=mask, other=0.0)


''' + edit(INTRA, _LOADS, '''    q = _tile(q_ptr, i_b * stride_qb, i_h * stride_qh, offs_t, stride_qt, offs_k, T, K)
    k = _tile(k_ptr, i_b * stride_kb, i_h * stride_kh, offs_t, stride_kt, offs_k, T, K)
    v = _tile(v_ptr, i_b * stride_vb, i_h * stride_vh, offs_t, stride_vt, offs_v, T, V)
'''), wrong=False, why="the masked tile loads in a @triton.jit helper"),
    _intra("int64-batch", "    i_b = i_bh // H\n", "    i_b = (i_bh // H).to(tl.int64)\n", wrong=False,
           why="64-bit batch offsets"),
]

FUSED_ENTRIES = [
    _fused("state-never-carried", _UPDATE, "", fault="never carried",
           why="never updates the state: the intra-chunk kernel's result"),
    _fused("state-before-output", *moved(_UPDATE, _READ), fault="counted twice",
           why="adds the chunk to the state before the output reads it"),
    _fused("q-strides-for-k", "k_base = k_ptr + i_b * stride_kb + i_h * stride_kh",
           "k_base = k_ptr + i_b * stride_qb + i_h * stride_qh",
           "k = tl.load(k_base + offs_t[:, None] * stride_kt", "k = tl.load(k_base + offs_t[:, None] * stride_qt",
           fault="out of bounds|relative error", why="addresses k with q's strides"),
    _fused("loads-unmasked", "mask=mask_qk, other=0.0)\n        k", ")\n        k",
           "mask=mask_qk, other=0.0)\n        v", ")\n        v", "mask=mask_vo, other=0.0)\n", ")\n",
           fault="out of bounds", why="unmasked loads: the last chunk reads past T"),
    _fused("skips-last-chunk", *SKIPS_LAST_CHUNK, fault="not written", why="stops one chunk early"),
    _fused("no-scale", "(o * scale).to(o_ptr.dtype.element_ty)", "o.to(o_ptr.dtype.element_ty)",
           fault="never applied", why="forgets the scale"),
    Entry("04_chunked_linear_attention.chunked_fwd", "intra-kernel", edit(
        INTRA, "def intra_chunk_kernel(", "def chunked_attention_kernel("), fault="relative error|not written",
        why="exercise 2's intra-chunk kernel on the fused grid"),
    _fused("swapped-grid-axes", "    i_v = tl.program_id(0)\n    i_bh = tl.program_id(1)\n",
           "    i_v = tl.program_id(1)\n    i_bh = tl.program_id(0)\n",
           fault="not written|out of bounds|relative error",
           why="reads the V block from axis 1 and the head from axis 0"),
    _fused("causal-from-chunk-start", "causal = offs_c[:, None] >= offs_c[None, :]",
           "causal = offs_c[:, None] >= 0", fault="no causal mask", why="a mask that lets every token see the chunk"),
    _fused("state-plus-equals", _UPDATE, "        state += tl.dot(tl.trans(k), v, input_precision=PRECISION)\n",
           wrong=False, why="state += K^T V"),
    _fused("two-outputs-added", _READ + "        o = tl.dot(scores.to(v.dtype), v, o, input_precision=PRECISION)\n",
           "        inter = tl.dot(q, state.to(q.dtype), input_precision=PRECISION)\n"
           "        o = inter + tl.dot(scores.to(v.dtype), v, input_precision=PRECISION)\n", wrong=False,
           why="the inter- and intra-chunk terms as two dots, added"),
    _fused("int64-heads", *INT64_HEADS, wrong=False, why="64-bit head offsets"),
]

_CHUNK = dict(BT=64, BV=64, num_warps=4, num_stages=2)


def _speed(name, chunk, **kw):
    return Entry("04_chunked_linear_attention.chunked_speed", name, FUSED, namespace=(("CHUNK", chunk),), **kw)


CHUNKED_SPEED = [
    _speed("solution", _CHUNK, wrong=False, why="chunks of 64, 64 value columns a program, 4 warps, 2 stages"),
    _speed("chunk-16", {**_CHUNK, "BT": 16}, where=("gpu",), fault="too slow",
           why="the chunk size the lesson tried first: correct, and a chain of 1024 chunks (1.29 ms on the H200)"),
    _speed("chunk-48", {**_CHUNK, "BT": 48}, fault="must be 16, 32, 64 or 128",
           why="a chunk of 48 tokens: not a power of two, so no tl.arange"),
    _speed("no-stages", {"BT": 64, "BV": 64, "num_warps": 4}, fault="needs exactly the keys",
           why="leaves num_stages out"),
]

ENTRIES = CHUNKED_TORCH + INTRA_CHUNK + FUSED_ENTRIES + CHUNKED_SPEED
