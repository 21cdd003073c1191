"""Lesson 07 (backward): the gradients of chunked linear attention in torch, the dq kernel, the dk/dv kernel
walking chunks backwards, and the ``torch.autograd.Function`` tying a forward to them.

Layout as in lesson 04: q, k [B, T, H, K], v, do [B, T, H, V]; causal, unnormalised, no states. References are
float64 autograd of quadratic attention (the package's oracle as one chunk). The torch exercise runs under a
torch-function counter that refuses autograd (the exercise is to write the gradients) and a token-by-token or
quadratic answer; the autograd exercise must route its gradient through a custom ``torch.autograd.Function`` that
saves only its inputs and whose backward launches Triton kernels (at least two: dq, then dk and dv), not torch
code.
"""

import math

import torch
import triton

from ...device import pick
from ...gradcall import call_and_backward, leaves
from ...linear_attention.reference import reference_backward
from ...testing import randn, rel_error
from ..spec import Case, CheckFailed, Exercise, Performance, register
from .l04_chunked_linear_attention import _Counter, _tensor

__all__ = ["BACKWARD_TORCH", "DQ", "DKDV", "AUTOGRAD", "BACKWARD_SPEED", "REFERENCE_CHUNK", "gradients"]


#: Tokens of the reference's chunks: up to this length a case is one chunk (quadratic attention).
REFERENCE_CHUNK = 256


def gradients(q, k, v, do, scale) -> dict:
    """``o`` and ``dq, dk, dv`` of ``Σ o · do`` by float64 autograd of the package's forward oracle (float64 in,
    float64 out): no hand-derived gradient, so a formulation no answer shares. Up to :data:`REFERENCE_CHUNK` tokens
    that is quadratic attention ``o = scale · (Q Kᵀ ⊙ M) V``, one chunk; longer sequences (the GPU's hidden cases)
    go in chunks of that many tokens, so the cost grows with T and not T²: B=2 T=1000 H=8 K=V=128 in about half
    the time of one chunk (1.3 s against 2.4 s on a busy two-core machine); autograd of the token loop is over ten
    times slower. A check with relative errors against the magnitudes (every exercise here) computes it twice."""
    chunk = min(max(q.shape[1], 1), REFERENCE_CHUNK)
    dq, dk, dv, _, o = reference_backward(q, k, v, do, scale, chunk_size=chunk, with_output=True)
    return {"o": o, "dq": dq, "dk": dk, "dv": dv}


def _inputs(case, gen):
    B, T, H, K, V = (case[n] for n in "BTHKV")
    dt = case.dtype
    if case.get("strided"):
        # q, k, v, do as views of one [B, T, H, 2K + 2V + 3] buffer
        buf = randn(B, T, H, 2 * K + 2 * V + 3, gen=gen, dtype=dt, device="cpu", scale=0.5)
        out = {"q": buf[..., :K], "k": buf[..., K:2 * K], "v": buf[..., 2 * K:2 * K + V],
               "do": buf[..., 2 * K + V:2 * K + 2 * V]}
    else:
        layouts = case.get("layouts", ("contiguous",) * 4)
        out = {n: _tensor(lay, B, T, H, d, dt, gen) for n, d, lay in zip(("q", "k", "v", "do"), (K, K, V, V),
                                                                          layouts)}
    if case.get("swamp"):
        _swamp(out, case)
    if case.get("do_rows"):  # one value per row, which the autograd exercise expands to [B, T, H, V]
        out["do"] = randn(B, T, H, 1, gen=gen, dtype=dt, device="cpu", scale=0.5)
    out["scale"] = case.get("scale", K ** -0.5)
    return out


def _swamp(out: dict, case) -> None:
    """Inputs whose carried state takes one chunk of large terms, then many chunks of small positive ones, each
    chunk's sum under half of 16 bits' spacing at the state's size: a state kept in fp32 adds them all, one kept in
    the inputs' 16 bits (rounded after each update) stays where the large chunk left it. ``swamp`` "forward": the
    state S that dq carries from the first chunk (k all ones, v large in the first 16 tokens); "backward": the dH
    that dk and dv carry from the last (q all ones, do large in the last 16). Every value is positive, so the
    error is not forgiven as cancellation's."""
    ones, grows = ("k", "v") if case["swamp"] == "forward" else ("q", "do")
    T = case["T"]
    out[ones] = torch.ones_like(out[ones])
    g = torch.full_like(out[grows], 0.05)
    g[:, slice(0, 16) if case["swamp"] == "forward" else slice(T - 16, T)] = 128.0
    out[grows] = g
    for name in ("do",) if case["swamp"] == "forward" else ("k", "v"):
        out[name] = out[name].abs()


def _chunked(q, k, v, do, scale, chunk, *, state_first=False, dh_first=False, masks_swapped=False, forwards=False,
             scale_twice=False, strict=False, unmasked=False, intra_scale2=False, no_scale=False, no_carry=False,
             dh_unscaled=False, wide=False, absolute=False, untransposed=False, intra_unscaled=False):
    """The chunked gradients in float64, ``[B, T, H, *]``, or one of the plausible mistakes the flags name: the state
    ``S`` (dq) or ``dH`` (dk, dv) updated before the chunk uses it, the two passes' masks swapped (``M`` where dk, dv
    take ``Mᵀ``, and ``Mᵀ`` in dq), the dk/dv chunks walked first to last, ``scale`` applied again to the carried
    state, the mask without its diagonal (``strict``) or no mask at all, ``scale`` applied twice to the chunk's own
    term, no ``scale`` at all, states never carried from chunk to chunk, ``dH`` carried without its ``scale``, the mask
    one diagonal too wide (``wide``), the mask of token positions in the sequence against positions in the chunk
    (``absolute``: right in the first chunk, nothing masked after it), the carried state read without its transpose
    (``untransposed``: K and V padded with zeros to one size, as a kernel's blocks of one size pad them), the
    chunk's own term without ``scale`` (``intra_unscaled``)."""
    q, k, v, do = (x.detach().double().transpose(1, 2) for x in (q, k, v, do))  # [B, H, T, *]
    K, V = q.shape[-1], v.shape[-1]
    if untransposed:
        q, k, v, do = (torch.nn.functional.pad(x, (0, max(K, V) - x.shape[-1])) for x in (q, k, v, do))
    scale = 1.0 if no_scale else scale
    intra = scale * scale if intra_scale2 else 1.0 if intra_unscaled else scale
    T = q.shape[2]
    starts = list(range(0, T, chunk))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def causal(x, transposed, t0):  # M (rows >= columns) for dq, Mᵀ for dk and dv; or the mistake's mask
        if unmasked or (absolute and t0 > 0):
            return x
        if transposed != masks_swapped:
            return x.triu(1 if strict else -1 if wide else 0)
        return x.tril(-1 if strict else 1 if wide else 0)

    S = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])
    for t0 in starts:
        qc, kc, vc, doc = (x[:, :, t0:t0 + chunk] for x in (q, k, v, do))
        if state_first:
            S = S + kc.transpose(-1, -2) @ vc
        carried = S * scale if scale_twice else S
        carried = carried.transpose(-1, -2) if untransposed else carried
        dq[:, :, t0:t0 + chunk] = (scale * doc @ carried.transpose(-1, -2)
                                   + intra * causal(doc @ vc.transpose(-1, -2), False, t0) @ kc)
        if not (state_first or no_carry):
            S = S + kc.transpose(-1, -2) @ vc
    dH = torch.zeros_like(S)
    for t0 in (starts if forwards else starts[::-1]):
        qc, kc, vc, doc = (x[:, :, t0:t0 + chunk] for x in (q, k, v, do))
        dh_scale = 1.0 if dh_unscaled else scale
        if dh_first:
            dH = dH + dh_scale * qc.transpose(-1, -2) @ doc
        a, b = causal(vc @ doc.transpose(-1, -2), True, t0), causal(kc @ qc.transpose(-1, -2), True, t0)
        carried = dH * scale if scale_twice else dH
        carried = carried.transpose(-1, -2) if untransposed else carried
        dk[:, :, t0:t0 + chunk] = vc @ carried.transpose(-1, -2) + intra * (a @ qc)
        dv[:, :, t0:t0 + chunk] = kc @ carried + intra * (b @ doc)
        if not (dh_first or no_carry):
            dH = dH + dh_scale * qc.transpose(-1, -2) @ doc
    return {"dq": dq[..., :K].transpose(1, 2), "dk": dk[..., :K].transpose(1, 2), "dv": dv[..., :V].transpose(1, 2)}


_MISTAKES = (
    (dict(state_first=True), ("dq",), "what the state S gives when it is updated before the chunk uses it: write "
                                      "dQ_c with S holding the chunks before c, then add chunk c to S"),
    (dict(dh_first=True), ("dk", "dv"), "what dH gives when scale · Q_cᵀ dO_c is added before chunk c uses it (the "
                                        "chunk counted twice): use dH for chunk c, then add the chunk"),
    (dict(masks_swapped=True), ("dk", "dv"), "what the forward's mask M gives (.tril(), rows >= columns): in the "
                                             "backward it is Mᵀ (.triu(), rows <= columns), token s of a chunk gets "
                                             "gradient from the tokens u >= s"),
    (dict(masks_swapped=True), ("dq",), "what the dk/dv pass's mask Mᵀ gives (.triu(), rows <= columns): dq takes "
                                        "the forward's M (.tril(), rows >= columns), token t of a chunk gets gradient "
                                        "from the tokens s <= t"),
    (dict(forwards=True), ("dk", "dv"), "what dH gives when the chunks are walked first to last: dH holds the chunks "
                                        "after c, so walk from the last chunk to the first"),
    (dict(scale_twice=True), ("dq",), "what dq gives when its carried term is scaled twice: S = Σ K_cᵀ V_c carries "
                                      "no scale, so apply scale once, to dO_c S_[c]ᵀ (as to the chunk's own term)"),
    (dict(scale_twice=True), ("dq", "dk", "dv"), "what the carried state gives when it is scaled twice: scale "
                                                 "multiplies every term once; in dq it is applied to dO_c S_[c]ᵀ (S "
                                                 "carries none), and dH already carries it (dH += scale · Q_cᵀ dO_c)"),
    (dict(wide=True), ("dq", "dk", "dv"), "what a mask one diagonal too wide gives (.tril(1) or .triu(-1)): a "
                                          "token also takes the term of its neighbour on the wrong side; the "
                                          "diagonal is the last one kept (.tril() for dq, .triu() for dk and dv)"),
    (dict(strict=True), ("dq", "dk", "dv"), "what a mask without its diagonal gives (rows > columns): causal "
                                            "attention lets a token attend to itself, so the mask keeps the diagonal "
                                            "(rows >= columns for dq, rows <= columns for dk and dv)"),
    (dict(unmasked=True), ("dq", "dk", "dv"), "what the chunk's own block gives with no causal mask: within a chunk "
                                              "a token only sees the tokens up to itself (dq: rows >= columns; dk, "
                                              "dv: rows <= columns)"),
    (dict(absolute=True), ("dq", "dk", "dv"), "what a mask comparing positions in the sequence with positions in "
                                              "the chunk gives (t0 + offsets against offsets): right in the first "
                                              "chunk, nothing masked after it; build the mask from the offsets "
                                              "within the chunk on both sides (tl.arange(0, BT))"),
    (dict(untransposed=True), ("dq", "dk", "dv"), "what the carried state gives read without its transpose (the "
                                                  "shapes fit where K and V pad to one block size): dq takes "
                                                  "dO_c S_[c]ᵀ, dk takes V_c dHᵀ and dv takes K_c dH, with S and dH "
                                                  "[K, V]"),
    (dict(intra_scale2=True), ("dq", "dk", "dv"), "what the chunk's own term gives scaled twice: scale the scores "
                                                  "or their product, not both"),
    (dict(intra_unscaled=True), ("dq", "dk", "dv"), "what the chunk's own (masked) term gives without scale: the "
                                                    "carried term has its scale (in dH, or applied to dO_c S_[c]ᵀ), "
                                                    "and the chunk's own term needs one too"),
    (dict(no_scale=True), ("dq", "dk", "dv"), "what the gradients are without scale: every term carries one factor "
                                              "of scale (dH too: dH += scale · Q_cᵀ dO_c)"),
    (dict(dh_unscaled=True), ("dk", "dv"), "what dH gives without its scale: the chunk's own term is scaled, and "
                                           "so is what dH carries from the later chunks (dH += scale · Q_cᵀ dO_c)"),
    (dict(no_carry=True), ("dq", "dk", "dv"), "what the gradients are when the state is never carried from chunk to "
                                              "chunk: only the chunk's own term is left; add each chunk to S (dq) or "
                                              "dH (dk, dv) once it has been used"),
)


def _listed(names):
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _short_chunk_only(got: dict, args: list, chunks, close) -> str | None:
    """When the gradients ``got`` are those of the first ``T // c · c`` tokens alone (the gradients of that shorter
    problem there, anything after), for a chunk size ``c`` the answer may use: a loop over ``T // c`` chunks,
    which never reaches a last, short chunk. Shorter than every chunk, that leaves nothing written: zeros, or what
    fresh memory holds (denormals, NaN, huge values), where gradients were due."""
    T = args[0].shape[1]
    if all(T < c for c in chunks) and all(bool(((g.abs() > 1e-300) & (g.abs() < 1e300)).sum() == 0)
                                          for g in got.values()):
        also = " (or a mask without its diagonal: with one token, the diagonal is all there is)" if T == 1 else ""
        return (f"{_listed(list(got))}: nothing but zeros or unwritten memory, for T={T}, less than one chunk: the "
                f"only chunk, a short one, is never walked{also}; loop over ceil(T / chunk) chunks, the last one "
                "masked to T, with a chunk index that reaches 0")
    for c in chunks:
        start = T // c * c
        if 0 < start < T:
            short = _chunked(*(x[:, :start] for x in args[:4]), args[4], c)
            if all(close(g[:, :start], short[n]) for n, g in got.items()):
                return (f"{_listed(list(got))}: what the first {start} tokens alone give: the last, short chunk "
                        f"({T - start} of {c} tokens) is never walked; loop over ceil(T / {c}) chunks, the last "
                        "one masked to T")
    return None


def _diagnose_at(chunks):
    """An :attr:`Exercise.diagnose` trying every mistake at each chunk size ``chunks(case)`` may use: names the
    mistake when the gradients that are wrong all match it (the comparison itself reports only the numbers)."""

    def diagnose(inputs, got, case, ref):
        missed = _unwritten_chunk(got, chunks(case))
        if missed:
            return missed

        def close(a, b):
            # scaled by the largest magnitude first: a never-written row can hold 1e307, whose square overflows
            # (inf <= inf would call it close), and a NaN or inf is never close
            a, b = a.to(torch.float64), b.to(torch.float64)
            if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
                return False
            m = max(float(a.abs().max()) if a.numel() else 0.0, float(b.abs().max()) if b.numel() else 0.0, 1e-300)
            a, b = a / m, b / m
            return bool((a - b).norm() <= 1e-2 * max(float(a.norm()), float(b.norm()), 1e-30))

        grads = {n: g for n, g in got.items() if n in ("dq", "dk", "dv")}
        errors = {n: rel_error(got[n], ref[n]) for n in grads}
        rounded = [n for n, e in errors.items() if e > 1e-10]
        if case.dtype == torch.float64 and rounded and all(errors[n] < 1e-5 for n in rounded):
            return (f"{_listed(rounded)}: right to float32's precision, not float64's: compute in the inputs' dtype "
                    "(a .float(), or a buffer made without dtype=q.dtype, rounds every value to float32)")
        off = [n for n in got if not close(got[n], ref[n])]
        if not off or any(n not in grads for n in off):  # a wrong forward (o) is not a backward mistake
            return None
        args = [inputs[n] for n in ("q", "k", "v")] + [inputs["do"].expand(*inputs["v"].shape), inputs["scale"]]
        tail = _short_chunk_only({n: got[n] for n in off}, args, chunks(case), close)
        if tail:
            return tail
        if any(not torch.isfinite(got[n]).all() for n in off):
            return None  # the mistakes below all give finite gradients: what is unwritten here, the numbers say
        for a, b in (("dq", "dk"), ("dk", "dv"), ("dq", "dv")):  # two gradients returned in each other's place
            if a in off and b in off and got[a].shape == ref[b].shape == got[b].shape == ref[a].shape \
                    and close(got[a], ref[b]) and close(got[b], ref[a]):
                return (f"{a} and {b}: each holds the other's gradient: return them in the order the exercise "
                        "asks for (dq, dk, dv)")
        for flags, names, why in _MISTAKES:
            if all(n in names for n in off):
                for chunk in chunks(case):
                    wrong = _chunked(*args, chunk, **flags)
                    if all(close(got[n], wrong[n]) for n in off):
                        return f"{_listed(off)}: {why}"
        return _zero_rows(got, ref, off)

    return diagnose


def _unwritten_chunk(got: dict, chunks) -> str | None:
    """Names the chunk a loop never visited, when the gradients' never-written rows (NaN, the poison; ``[B, T, H,
    D]``) are exactly the tokens of the first chunk, or of the last one, at a chunk size the answer may use: a walk
    whose index is one off (``(n - i) · BT`` for ``(n - 1 - i) · BT``) or that stops one chunk early."""
    holes = {n: h for n, g in got.items() if n in ("dq", "dk", "dv") for h in (torch.isnan(g),) if h.any()}
    if not holes:
        return None
    rows = [(h.all(-1).all(-1).all(0), h.any(-1).any(-1).any(0)) for h in holes.values()]  # [T]: whole, touched
    if any(not torch.equal(whole, touched) for whole, touched in rows) or \
            any(not torch.equal(rows[0][0], whole) for whole, _ in rows):
        return None  # holes in part of a row, or not the same tokens in every gradient: the numbers say more
    tokens = rows[0][0].nonzero().flatten().tolist()
    T = rows[0][0].numel()
    for c in chunks:
        n = -(-T // c)
        if n < 2:
            continue
        last = (n - 1) * c
        if tokens == list(range(min(c, T))):
            return (f"{_listed(list(holes))}: tokens 0-{c - 1}, the first chunk (of {n}), are never written, every "
                    "later chunk is: the loop never reaches chunk 0 (an index one off, such as (n - i) · BT where "
                    "(n - 1 - i) · BT walks from the last chunk down to chunk 0, or a range that stops at 1)")
        if tokens == list(range(last, T)):
            which = f"the last, short chunk ({T - last} of {c} tokens)" if T - last < c else "the last chunk"
            return (f"{_listed(list(holes))}: tokens {last}-{T - 1}, {which}, are never written: the loop never "
                    f"reaches chunk {n - 1}; loop over ceil(T / {c}) = {n} chunks, the last one masked to T")
    return None


def _zero_rows(got: dict, ref: dict, off: list) -> str | None:
    """Names the tokens whose rows of a gradient are all zero where the reference's are not, when some are and
    some are not: rows that a chunk loop never writes into zeroed gradients (a slice one short, say)."""
    for n in off:
        rows = ((got[n] == 0).all(-1) & (ref[n] != 0).any(-1)).any(-1).any(0)  # [T]
        tokens = rows.nonzero().flatten().tolist()
        if 0 < len(tokens) < rows.numel():
            shown = ", ".join(str(t) for t in tokens[:6]) + (", …" if len(tokens) > 6 else "")
            return (f"{n}: the rows of tokens {shown} ({len(tokens)} of {rows.numel()}) are all zero where gradients "
                    "are due: are they ever written? A chunk starting at t0 holds tokens t0 … t0 + chunk − 1, the "
                    "slice t0:t0 + chunk")
    return None


def _reference(names):
    def ref(inputs, case):
        do = inputs["do"].expand(*inputs["v"].shape)
        g = gradients(inputs["q"], inputs["k"], inputs["v"], do, inputs["scale"])
        return {n: g[n] for n in names}

    return ref


# ---- exercise 1: the chunked backward in torch -----------------------------------------------------------------

class _NoAutograd(_Counter):
    """The operation counter of lesson 04, refusing autograd: the exercise is to write the gradients."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("backward", "grad", "vjp", "jacobian", "vjp_fn"):
            raise CheckFailed("your function called autograd (backward or torch.autograd.grad): this exercise asks "
                              "you to write the gradients chunk by chunk yourself")
        return super().__torch_function__(func, types, args, kwargs)


def _torch_run(args, inputs, outputs, case):
    (fn,) = args
    q, k, v, do, scale = (inputs[n] for n in ("q", "k", "v", "do", "scale"))
    chunk = case["chunk"]
    B, T, H = q.shape[:3]
    chunks = math.ceil(T / chunk)
    budget = 80 * chunks * B * H + 200
    with _NoAutograd(max(chunk, q.shape[-1], v.shape[-1])) as counter:
        got = fn(q, k, v, do, scale, chunk_size=chunk)
    if not (isinstance(got, (tuple, list)) and len(got) == 3 and all(isinstance(g, torch.Tensor) for g in got)):
        raise CheckFailed("chunked_backward_torch must return the tuple (dq, dk, dv) of tensors")
    if counter.widest is not None:
        raise CheckFailed(f"an intermediate of shape {counter.widest} appeared: with T={T} and chunk_size={chunk} "
                          "that is a T x T matrix, i.e. quadratic attention; build only chunk x chunk blocks")
    if counter.calls > budget:
        raise CheckFailed(f"{counter.calls} torch operations for T={T} in chunks of {chunk} (at most {budget}); "
                          "a loop over chunks needs a few dozen per chunk. A loop over tokens is the recurrence, "
                          "not the chunked form")
    out = dict(zip(("dq", "dk", "dv"), got))
    for n, g in out.items():
        if g.dtype != q.dtype:
            raise CheckFailed(f"{n} has dtype {g.dtype}; return it in q's dtype {q.dtype}")
    return out


BACKWARD_TORCH = Exercise(
    id="07_backward.backward_torch",
    magnitude=True,
    args=("function",),
    signature="chunked_backward_torch(q, k, v, do, scale, chunk_size=64) -> (dq, dk, dv), with q, k [B, T, H, K], "
              "v, do [B, T, H, V]",
    description="the gradients of causal, unnormalised linear attention in plain torch, one iteration per chunk",
    make_inputs=_inputs,
    run=_torch_run,
    reference=_reference(("dq", "dk", "dv")),
    diagnose=_diagnose_at(lambda case: (case["chunk"],)),
    tolerance=lambda case: 1e-10 if case.dtype == torch.float64 else 1e-5,
    visible=[
        Case("B=2 T=150 H=2 K=16 V=24 chunk 64 float64", dict(B=2, T=150, H=2, K=16, V=24, chunk=64), torch.float64,
             purpose="ends in a chunk of 22 tokens"),
        Case("B=1 T=77 H=2 K=8 V=8 chunk 16 float32", dict(B=1, T=77, H=2, K=8, V=8, chunk=16)),
    ],
    hidden=[
        Case("B=1 T=1 H=1 K=4 V=4 chunk 16 float64", dict(B=1, T=1, H=1, K=4, V=4, chunk=16), torch.float64,
             purpose="is one token, shorter than a chunk: the last, short chunk is the only one"),
        Case("B=2 T=128 H=2 K=12 V=20 chunk 32 (exact multiple) scale 0.3 float64",
             dict(B=2, T=128, H=2, K=12, V=20, chunk=32, scale=0.3), torch.float64,
             purpose="is a whole number of chunks and scales by 0.3, not K^-1/2: use the scale you are given"),
        Case("B=2 T=101 H=3 K=16 V=16 chunk 64, q/k/v/do views of one buffer, float32",
             dict(B=2, T=101, H=3, K=16, V=16, chunk=64, strided=True)),
    ],
    points=(3, 2),
    forbid=("fla", "torch.autograd"),
)


# ---- exercises 2 and 3: the kernels ----------------------------------------------------------------------------

def _pow2(n):
    return max(16, triton.next_power_of_2(n))


def _strides(x):
    return x.stride(0), x.stride(1), x.stride(2)


def _opts(case):
    return {name: case[name] for name in ("num_warps", "num_stages") if case.get(name)}


def _dq_launch(kernel, inputs, dq, case):
    k, v, do = inputs["k"], inputs["v"], inputs["do"]
    B, T, H, K = k.shape
    V = v.shape[-1]
    BK = case.get("BK", _pow2(K))
    kernel[(triton.cdiv(K, BK), B * H)](k, v, do, dq, T, H, K, V, inputs["scale"], *_strides(k), *_strides(v),
                                        *_strides(do), *_strides(dq), BT=case["BT"], BK=BK, BV=_pow2(V),
                                        PRECISION=case.precision or "ieee", **_opts(case))


def _dkdv_launch(kernel, inputs, dk, dv, case):
    q, k, v, do = inputs["q"], inputs["k"], inputs["v"], inputs["do"]
    B, T, H, K = q.shape
    V = v.shape[-1]
    kernel[(B * H,)](q, k, v, do, dk, dv, T, H, K, V, inputs["scale"], *_strides(q), *_strides(k), *_strides(v),
                     *_strides(do), *_strides(dk), *_strides(dv), BT=case["BT"], BK=_pow2(K), BV=_pow2(V),
                     PRECISION=case.precision or "ieee", **_opts(case))


def _dq_run(args, inputs, outputs, case):
    _dq_launch(args[0], inputs, outputs["dq"], case)


def _dkdv_run(args, inputs, outputs, case):
    _dkdv_launch(args[0], inputs, outputs["dk"], outputs["dv"], case)


def _shapes(names):
    def shapes(case, inputs):
        dims = {"dq": case["K"], "dk": case["K"], "dv": case["V"]}
        return {n: ((case["B"], case["T"], case["H"], dims[n]), case.dtype) for n in names}

    return shapes


_DQ_SIG = ("dq_kernel(k_ptr, v_ptr, do_ptr, dq_ptr, T, H, K, V, scale, stride_kb, stride_kt, stride_kh, stride_vb, "
           "stride_vt, stride_vh, stride_ob, stride_ot, stride_oh, stride_qb, stride_qt, stride_qh, BT: tl.constexpr, "
           "BK: tl.constexpr, BV: tl.constexpr, PRECISION: tl.constexpr), launched on grid (cdiv(K, BK), B * H) "
           "with BV >= V")
_DKDV_SIG = ("dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, dk_ptr, dv_ptr, T, H, K, V, scale, stride_qb, stride_qt, "
             "stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, stride_ob, stride_ot, "
             "stride_oh, stride_dkb, stride_dkt, stride_dkh, stride_dvb, stride_dvt, stride_dvh, BT: tl.constexpr, "
             "BK: tl.constexpr, BV: tl.constexpr, PRECISION: tl.constexpr), launched on grid (B * H,) with BK >= K "
             "and BV >= V")


def _cases(hidden: bool, dq: bool):
    if not hidden:
        return [
            Case("B=1 T=37 H=2 K=16 V=16 BT=16 fp32, k a strided view, v [B, H, T, V] storage",
                 dict(B=1, T=37, H=2, K=16, V=16, BT=16, layouts=("contiguous", "wide", "heads", "contiguous")),
                 precision="ieee",
                 purpose="gives q, k, v, do and the outputs different strides and a last chunk of 5 tokens: address "
                         "each tensor through its own strides, mask the rows past T"),
            Case("B=2 T=50 H=1 K=20 V=24 BT=16 fp16, q [B, H, T, K] storage, do a strided view"
                 + (", BK=16" if dq else ""),
                 dict(B=2, T=50, H=1, K=20, V=24, BT=16, layouts=("heads", "contiguous", "contiguous", "wide"),
                      **({"BK": 16} if dq else {})), torch.float16,
                 purpose="has K and V below their blocks" + (" and two K blocks" if dq else "")
                         + " and a last chunk of 2 tokens: mask columns past K and V and rows past T"),
        ]
    return [
        Case("B=1 T=1 H=1 K=16 V=16 BT=16 fp32", dict(B=1, T=1, H=1, K=16, V=16, BT=16), precision="ieee"),
        Case("B=2 T=70 H=3 K=33 V=40 BT=32 fp32, q/k/v/do views of one buffer" + (", BK=16" if dq else ""),
             dict(B=2, T=70, H=3, K=33, V=40, BT=32, strided=True, **({"BK": 16} if dq else {})), precision="ieee",
             purpose="has " + ("three K blocks, the last with one column, and " if dq else "") + "K, V past a "
                     "power of two"),
        Case("B=1 T=64 H=2 K=16 V=16 BT=32 fp16, a whole number of chunks, scale 0.3",
             dict(B=1, T=64, H=2, K=16, V=16, BT=32, scale=0.3), torch.float16,
             purpose="is a whole number of chunks and scales by 0.3, not K^-1/2"),
        Case("B=2 T=33 H=2 K=24 V=40 BT=16 fp32, q and v strided views, k [B, H, T, K] storage",
             dict(B=2, T=33, H=2, K=24, V=40, BT=16, layouts=("wide", "heads", "wide", "contiguous")),
             precision="ieee", purpose="ends in a chunk of one token"),
        Case("B=1 T=1930 H=1 K=16 V=16 BT=16 fp16, " + ("a state S of 2048 adding chunks of 0.8" if dq
                                                          else "a state gradient dH of 512 adding chunks of 0.2"),
             dict(B=1, T=1930, H=1, K=16, V=16, BT=16, swamp="forward" if dq else "backward"), torch.float16,
             purpose="carries a large state and then adds many small chunks to it, each under half of fp16's "
                     "spacing at the state's size: keep the carried state in fp32 (cast it to the inputs' dtype only "
                     "as a tl.dot operand), or every small chunk is rounded away"),
        Case("B=2 T=100 H=2 K=64 V=64 BT=32 bf16", dict(B=2, T=100, H=2, K=64, V=64, BT=32), torch.bfloat16,
             gpu_only=True),
    ] + pick(cpu=[], gpu=[
        Case("B=2 T=1000 H=8 K=128 V=128 BT=64 bf16" + (" BK=64" if dq else ""),
             dict(B=2, T=1000, H=8, K=128, V=128, BT=64, num_warps=8, num_stages=2, **({"BK": 64} if dq else {})),
             torch.bfloat16),
    ])


def _pass(name, grads, **kw):
    """The exercise of one backward kernel, which writes the gradients ``grads``; the dq pass's cases add K
    blocks (``BK``)."""
    dq = grads == ("dq",)
    return Exercise(id=f"07_backward.{name}", magnitude=True, args=("kernel",), make_inputs=_inputs,
                    outputs=_shapes(grads), reference=_reference(grads),
                    diagnose=_diagnose_at(lambda case: (case["BT"],)), diagnose_unwritten=True,
                    visible=_cases(False, dq),
                    hidden=_cases(True, dq), **kw)


DQ = _pass("dq", ("dq",), signature=_DQ_SIG, run=_dq_run, points=(3, 2),
           description="dq = scale · (dO S_[c]ᵀ + (dO Vᵀ ⊙ causal mask) K), the state S rebuilt chunk by chunk, "
                       "forwards")
DKDV = _pass("dkdv", ("dk", "dv"), signature=_DKDV_SIG, run=_dkdv_run, points=(4, 3),
             description="dk, dv from the state gradient dH carried from the last chunk to the first")


# ---- exercise 4: the autograd.Function -------------------------------------------------------------------------

def _autograd_run(args, inputs, outputs, case):
    (fn,) = args
    call = (inputs["q"], inputs["k"], inputs["v"], inputs["scale"])
    if hasattr(fn, "call_with_grad"):  # graded: the call and its backward run in the notebook's sandbox
        r = fn.call_with_grad(call, (0, 1, 2), inputs["do"])
    else:
        r = call_and_backward(fn, leaves(call, (0, 1, 2)), {}, (0, 1, 2), inputs["do"])
    if not (isinstance(r, dict) and r.get("__grad_call__")):
        raise CheckFailed(f"linear_attention returned a {type(r).__name__}; return the output tensor o")
    if not r["custom"]:
        what = "no gradient at all (o does not require grad)" if r["grad_fn"] is None else r["grad_fn"]
        raise CheckFailed(f"o's gradient comes from {what}: return YourFunction.apply(q, k, v, scale), so that "
                          "autograd calls your backward")
    if r.get("launches_forward") == 0:  # absent: an older sandbox's answer, nothing counted
        raise CheckFailed("your forward launched no Triton kernel: it computes o some other way (in torch, say, with "
                          "recurrent_linear_attention). Return the chunked kernel's output: chunked_forward(q, k, v, "
                          "scale)")
    for t in r["saved"]:
        if t["input"] is None:
            where = t.get("where", "ctx.save_for_backward")
            how = "saved" if where == "ctx.save_for_backward" else f"kept on its context as {where}"
            copy = ("" if t.get("copy_of") is None else f" (a copy of {'qkv'[t['copy_of']]}: .contiguous() of a "
                    "strided view, .clone() and .float() make one, held from forward to backward; the kernels take "
                    "any strides)")
            raise CheckFailed(f"your Function {how} a tensor of shape {tuple(t['shape'])} that is not one of q, k, "
                              f"v{copy}: save only the inputs (ctx.save_for_backward(q, k, v)); the backward rebuilds "
                              "the states chunk by chunk")
    launches = r.get("launches_backward")
    if launches is not None and launches < 2:  # None: nothing could count them
        what = ("no Triton kernel: it computes the gradients some other way" if launches == 0 else
                "a single Triton kernel: it computes some of the gradients some other way")
        raise CheckFailed(f"your backward launched {what} (in torch, say, with chunked_backward_torch). Call your dq "
                          "kernel and your dk/dv kernel (launch_dq and launch_dkdv)")
    dq, dk, dv = r["grads"]
    return {"o": r["output"], "dq": dq, "dk": dk, "dv": dv}


AUTOGRAD = Exercise(
    id="07_backward.autograd",
    magnitude=True,
    args=("function",),
    signature="linear_attention(q, k, v, scale) -> o, differentiable through your torch.autograd.Function "
              "(forward: the chunked forward; backward: your dq and dk/dv kernels)",
    description="a torch.autograd.Function that saves only q, k, v and runs the two backward kernels",
    stub="`ChunkedLinearAttention` (its forward and backward, which `linear_attention` calls)",
    make_inputs=_inputs,
    run=_autograd_run,
    reference=_reference(("o", "dq", "dk", "dv")),
    diagnose=_diagnose_at(lambda case: (16, 32, 64)),  # the chunk is the answer's own
    visible=[Case("B=2 T=45 H=2 K=16 V=32 fp32, scale 0.3", dict(B=2, T=45, H=2, K=16, V=32, scale=0.3),
                  precision="ieee",
                  purpose="scales by 0.3, not K^-1/2: pass the backward the scale the forward was given"),
             Case("B=1 T=40 H=2 K=16 V=24 fp32, do as the backward of o.sum(-1) hands it down",
                  dict(B=1, T=40, H=2, K=16, V=24, do_rows=True), precision="ieee",
                  purpose="hands your backward a do of stride 0 along V (one value per row, expanded): make it "
                          "contiguous before launching kernels that assume a unit last stride")],
    hidden=[Case("B=1 T=70 H=3 K=24 V=16 fp32, q/k/v views of one buffer, scale 0.3",
                 dict(B=1, T=70, H=3, K=24, V=16, strided=True, scale=0.3), precision="ieee",
                 purpose="scales by 0.3, not K^-1/2: pass the backward the scale the forward was given"),
            Case("B=2 T=33 H=1 K=16 V=40 fp32, do as the backward of o.sum(-1) hands it down",
                 dict(B=2, T=33, H=1, K=16, V=40, do_rows=True), precision="ieee",
                 purpose="hands your backward a do of stride 0 along V: make it contiguous"),
            Case("B=1 T=130 H=2 K=32 V=32 fp16", dict(B=1, T=130, H=2, K=32, V=32), torch.float16)],
    points=(3, 2),
    forbid=("fla",),
)


# ---- exercise 4 on a GPU: the two kernels against the package's backward ---------------------------------------

# The package's passes, not fla's: fla autotunes for about a minute at a new shape, longer than a check may take.
_TIMED = Case("B=4 T=4096 H=16 K=128 V=128 BT=64 BK=64 bf16",
              dict(B=4, T=4096, H=16, K=128, V=128, BT=64, BK=64, num_warps=8, num_stages=2), torch.bfloat16)


def _speed_run(args, inputs, outputs, case):
    _dq_launch(args[0], inputs, outputs["dq"], case)
    _dkdv_launch(args[1], inputs, outputs["dk"], outputs["dv"], case)


def _package_baseline(args, inputs, outputs, case):
    from ...linear_attention.chunked_bwd import chunked_backward

    q, k, v, do = (inputs[n] for n in ("q", "k", "v", "do"))
    dq, dk, dv, _ = chunked_backward(q, k, v, do, inputs["scale"])
    for n, g in (("dq", dq), ("dk", dk), ("dv", dv)):
        outputs[n].copy_(g)


def _floor(case):
    B, T, H, K, V = (case[n] for n in "BTHKV")
    return B * T * H * (3 * K + 4 * V) * 2, 2 * B * T * H * (4 * K * V + case["BT"] * (K + V))


BACKWARD_SPEED = Exercise(
    id="07_backward.backward_speed",
    magnitude=True,
    args=("kernel", "kernel"),
    signature=_DQ_SIG.split(", launched")[0] + " and " + _DKDV_SIG.split(", launched")[0]
    + ", timed together at B=4 T=4096 H=16 D=128 bf16 (GPU only)",
    description="your two backward kernels within 3.3x of the package's backward passes (GPU only)",
    make_inputs=_inputs,
    outputs=_shapes(("dq", "dk", "dv")),
    run=_speed_run,
    reference=_reference(("dq", "dk", "dv")),
    visible=[Case("B=1 T=40 H=2 K=16 V=16 BT=16 fp32", dict(B=1, T=40, H=2, K=16, V=16, BT=16), precision="ieee")],
    performance=Performance(
        case=_TIMED,
        baseline=_package_baseline,
        baseline_name="the package's chunked_backward",
        min_speedup=0.3,
        floor=_floor,
    ),
    points=(2, 0),
)

register(BACKWARD_TORCH, DQ, DKDV, AUTOGRAD, BACKWARD_SPEED)
