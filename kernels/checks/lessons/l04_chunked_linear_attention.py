"""Lesson 04 (chunked linear attention): the chunked form in torch, the intra-chunk kernel, the fused forward.

Layout as in fla and the package: q, k [B, T, H, K], v, o [B, T, H, V]; causal and unnormalised. The torch
exercise is run under a torch-function counter: a token-by-token loop, or a T x T score matrix (quadratic
attention), is not the chunked form and fails with a message saying so.
"""

import math

import torch
import triton
from torch.overrides import TorchFunctionMode

from ...compile import bind, specialise
from ...device import pick
from ...recurrent.reference import reference_recurrent_loop
from ...testing import randn
from ..provenance import Recorder, aot_compile
from ..spec import Case, CheckFailed, Exercise, Performance, register, settings_problem
from .l03_tiled_sram import SMEM_LIMIT

__all__ = ["CHUNKED_TORCH", "INTRA_CHUNK", "CHUNKED_FWD", "CHUNKED_SPEED", "recurrent", "intra_chunk"]


def recurrent(q, k, v, scale):
    """``o_t = scale · q_t S_t`` with ``S_t = S_{t-1} + k_t v_tᵀ``, token by token (float64 in, float64 out)."""
    return reference_recurrent_loop(q, k, v, scale=scale, dtype=q.dtype)[0]


def intra_chunk(q, k, v, scale, chunk):
    """Only the causal in-chunk term ``scale · (Q_c K_cᵀ ⊙ M) V_c`` of every chunk, chunk by chunk."""
    o = q.new_empty(*v.shape)
    for t0 in range(0, q.shape[1], chunk):
        qc, kc, vc = (x[:, t0:t0 + chunk] for x in (q, k, v))  # [B, C, H, *]
        scores = torch.einsum("bthk,bshk->bhts", qc, kc).tril()  # [B, H, C, C]
        o[:, t0:t0 + chunk] = scale * torch.einsum("bhts,bshv->bthv", scores, vc)
    return o


def _variant(q, k, v, scale, chunk, *, mask="causal", carry=True, state_first=False, scaled="both"):
    """The chunked forward in float64 with one mistake: the in-chunk ``mask`` ("causal", "strict": without the
    diagonal, "ahead": one token past it, "upper": the transposed mask, "none"), the state not carried
    (``carry``) or updated before the chunk's output uses it (``state_first``), the scale on ``scaled`` ("both",
    "intra", "inter" or "none" of the two terms)."""
    q, k, v = (x.double() for x in (q, k, v))
    B, T, H, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1])
    o = q.new_zeros(*v.shape)
    a = scale if scaled in ("both", "inter") else 1.0
    b = scale if scaled in ("both", "intra") else 1.0
    for t0 in range(0, T, chunk):
        qc, kc, vc = (x[:, t0:t0 + chunk] for x in (q, k, v))
        s = torch.einsum("bthk,bshk->bhts", qc, kc)
        s = {"causal": s.tril(), "strict": s.tril(-1), "ahead": s.tril(1), "upper": s.triu()}.get(mask, s)
        if carry and state_first:
            S = S + torch.einsum("bthk,bthv->bhkv", kc, vc)
        o[:, t0:t0 + chunk] = a * torch.einsum("bthk,bhkv->bthv", qc, S) + b * torch.einsum("bhts,bshv->bthv", s, vc)
        if carry and not state_first:
            S = S + torch.einsum("bthk,bthv->bhkv", kc, vc)
    return o


#: The mistakes :func:`_diagnose` tries: :func:`_variant`'s flags, what to say, and whether the mistake needs a
#: carried state (the intra-chunk kernel has none).
_MISTAKES = [
    (dict(mask="none"), "no causal mask inside a chunk: each token also sees the later tokens of its chunk", False),
    (dict(mask="strict"), "the causal mask leaves out the diagonal: each token misses its own key and value "
                          "(keep t >= s)", False),
    (dict(mask="ahead"), "the causal mask is one token off: each token also sees the next one (keep t >= s, "
                         "not t + 1 >= s)", False),
    (dict(mask="upper"), "the causal mask is the wrong way round (t <= s, .triu()): each token sees the tokens after "
                         "it in its chunk instead of those before (keep t >= s)", False),
    (dict(carry=False), "the state is never carried from one chunk to the next: only the in-chunk term is there",
     True),
    (dict(state_first=True), "the state takes in a chunk before that chunk's output uses it, so each chunk's own "
                             "keys and values are counted twice: compute o from the state first, then update it",
     True),
    (dict(scaled="none"), "the scale is never applied", False),
    (dict(scaled="intra"), "only the in-chunk term is scaled, not the term from the state", True),
    (dict(scaled="inter"), "only the term from the state is scaled, not the in-chunk term", True),
]


def _diagnose(chunk_of, carried: bool):
    """An :attr:`Exercise.diagnose` naming the mistake whose output ``o`` matches the answer's far better than the
    right one does, at the case's chunk size (``chunk_of(case)``); ``carried``: the exercise carries a state."""

    def diagnose(inputs, got, case, ref):
        o, want = got.get("o"), ref.get("o")
        if o is None or want is None:
            return None
        off = (o - want.double()).norm()
        chunk = chunk_of(case)
        for flags, why, stateful in _MISTAKES:
            if stateful and not carried:
                continue
            wrong = _variant(inputs["q"], inputs["k"], inputs["v"], inputs["scale"], chunk,
                             **{"carry": carried, **flags})
            miss = (o - wrong).norm()
            if miss <= 0.25 * off and miss <= 2e-2 * max(wrong.norm(), 1e-30):
                return f"o: {why}"
        return None

    return diagnose


def _tensor(layout, B, T, H, D, dt, gen):
    """One [B, T, H, D] input in the given storage: ``contiguous``; ``wide``, a view of a [B, T, H, D + 5] buffer
    (its own t and h strides); ``heads``, [B, H, T, D] storage seen as [B, T, H, D]."""
    if layout == "wide":
        return randn(B, T, H, D + 5, gen=gen, dtype=dt, device="cpu", scale=0.5)[..., :D]
    if layout == "heads":
        return randn(B, H, T, D, gen=gen, dtype=dt, device="cpu", scale=0.5).transpose(1, 2)
    return randn(B, T, H, D, gen=gen, dtype=dt, device="cpu", scale=0.5)


def _qkv(case, gen):
    B, T, H, K, V = (case[n] for n in "BTHKV")
    dt = case.dtype
    if case.get("strided"):
        # q, k, v as views of one [B, T, H, 2K + V + 3] buffer, as a fused projection leaves them
        width = 2 * K + V + 3
        qkv = randn(B, T, H, width, gen=gen, dtype=dt, device="cpu", scale=0.5)
        return {"q": qkv[..., :K], "k": qkv[..., K:2 * K], "v": qkv[..., 2 * K:2 * K + V]}
    if case.get("heads_major"):
        return {n: _tensor("heads", B, T, H, d, dt, gen) for n, d in (("q", K), ("k", K), ("v", V))}
    layouts = case.get("layouts", ("contiguous",) * 3)
    return {n: _tensor(lay, B, T, H, d, dt, gen) for n, d, lay in zip("qkv", (K, K, V), layouts)}


def _inputs(case, gen):
    out = _qkv(case, gen)
    out["scale"] = case["K"] ** -0.5
    return out


# ---- exercise 1: the chunked form in torch ---------------------------------------------------------------------

class _Counter(TorchFunctionMode):
    """Counts torch calls and remembers the largest square-ish trailing block any result had."""

    def __init__(self, limit: int):
        super().__init__()
        self.calls = 0
        self.limit = limit
        self.widest = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and min(t.shape[-2:]) > self.limit:
                self.widest = tuple(t.shape)
        return out

    def absorb(self, calls: int, widest) -> None:
        """Torch calls the function made where the grader ran it (its sandbox), counted there."""
        self.calls += calls
        if widest and min(widest[-2:]) > self.limit:
            self.widest = tuple(widest)


def _torch_run(args, inputs, outputs, case):
    """Runs the function under an operation counter, twice: with the case's chunk size, where it may take about
    40 operations per chunk and (batch, head) pair (a loop over B and H around the chunk loop is the chunked form
    too), and with one chunk covering all T tokens, where a chunk loop takes a few dozen operations per (batch,
    head) and a loop over tokens still takes several per token."""
    (fn,) = args
    q, k, v, scale = inputs["q"], inputs["k"], inputs["v"], inputs["scale"]
    chunk = case["chunk"]
    B, T, H = q.shape[:3]
    chunks = math.ceil(T / chunk)
    budget = 40 * chunks * B * H + 100
    with _Counter(max(chunk, q.shape[-1], v.shape[-1])) as counter:
        o = fn(q, k, v, scale, chunk_size=chunk)
    if not isinstance(o, torch.Tensor):
        raise CheckFailed(f"chunked_attention_torch returned a {type(o).__name__}; return the output tensor o")
    if counter.widest is not None and min(counter.widest[-2:]) < T:  # blocks wider than asked, not T x T
        raise CheckFailed(f"an intermediate of shape {counter.widest} appeared: blocks of {min(counter.widest[-2:])} "
                          f"tokens where chunk_size={chunk} asks for chunks of {chunk}; take the chunk size from the "
                          "chunk_size argument, not a number of your own")
    if counter.widest is not None:
        raise CheckFailed(f"an intermediate of shape {counter.widest} appeared: with T={T} and chunk_size={chunk} "
                          "that is a T x T score matrix, i.e. quadratic attention; build only chunk x chunk scores")
    if counter.calls > budget:
        raise CheckFailed(f"{counter.calls} torch operations for T={T} in chunks of {chunk} ({chunks} chunks of "
                          f"{B * H} (batch, head) pairs; at most {budget} allowed); a loop over chunks needs about "
                          "15 per chunk. A loop over tokens is the recurrence of lesson 02, not the chunked form")
    if T >= 16:
        one = 40 * B * H + 100
        with _Counter(T) as whole:
            fn(q, k, v, scale, chunk_size=T)
        if whole.calls > one:
            raise CheckFailed(f"with chunk_size={T}, one chunk for all T={T} tokens, your function made "
                              f"{whole.calls} torch operations (a chunk loop needs a few dozen per (batch, head) "
                              f"pair: at most {one} here): it loops over tokens. A loop over tokens is the "
                              "recurrence of lesson 02, not the chunked form")
    if o.dtype != q.dtype:
        raise CheckFailed(f"o has dtype {o.dtype}; return it in q's dtype {q.dtype}")
    return {"o": o}


CHUNKED_TORCH = Exercise(
    id="04_chunked_linear_attention.chunked_torch",
    magnitude=True,
    args=("function",),
    signature="chunked_attention_torch(q, k, v, scale, chunk_size=64) -> o, with q, k [B, T, H, K], "
              "v [B, T, H, V], o [B, T, H, V]",
    description="causal, unnormalised linear attention in plain torch, one iteration per chunk",
    make_inputs=_inputs,
    run=_torch_run,
    reference=lambda inputs, case: {"o": recurrent(inputs["q"], inputs["k"], inputs["v"], inputs["scale"])},
    tolerance=lambda case: 1e-10 if case.dtype == torch.float64 else 1e-5,
    visible=[
        Case("B=2 T=300 H=3 K=16 V=24 chunk 64 float64", dict(B=2, T=300, H=3, K=16, V=24, chunk=64), torch.float64),
        Case("B=1 T=77 H=2 K=8 V=8 chunk 16 float32", dict(B=1, T=77, H=2, K=8, V=8, chunk=16)),
    ],
    hidden=[
        Case("B=1 T=1 H=1 K=4 V=4 chunk 16 float64", dict(B=1, T=1, H=1, K=4, V=4, chunk=16), torch.float64),
        Case("B=3 T=256 H=2 K=12 V=20 chunk 32 (exact multiple) float64",
             dict(B=3, T=256, H=2, K=12, V=20, chunk=32), torch.float64),
        Case("B=2 T=201 H=4 K=16 V=16 chunk 64, q/k/v views of one buffer, float32",
             dict(B=2, T=201, H=4, K=16, V=16, chunk=64, strided=True)),
    ],
    points=(3, 2),
    forbid=("fla",),
    diagnose=_diagnose(lambda case: case["chunk"], carried=True),
)


# ---- exercises 2 and 3: the kernels ----------------------------------------------------------------------------

def _block(D):
    """The one block covering a head dimension ``D`` (tl.dot needs at least 16)."""
    return max(16, triton.next_power_of_2(D))


def _blocks(case):
    return case["BT"], _block(case["K"]), case.get("BV", _block(case["V"]))


def _strides(x):
    return x.stride(0), x.stride(1), x.stride(2)


def _args(q, k, v, o, scale):
    """A chunk kernel's arguments before its constexprs, in the exercises' signature (:data:`_KERNEL_SIG`)."""
    B, T, H, K = q.shape
    return (q, k, v, o, T, H, K, v.shape[-1], scale, *_strides(q), *_strides(k), *_strides(v), *_strides(o))


def _launch(kernel, grid, inputs, o, case):
    BT, BK, BV = _blocks(case)
    warps = {"num_warps": case["num_warps"]} if case.get("num_warps") else {}
    kernel[grid](*_args(inputs["q"], inputs["k"], inputs["v"], o, inputs["scale"]), BT=BT, BK=BK, BV=BV,
                 PRECISION=case.precision or "ieee", **warps)


def _intra_run(args, inputs, outputs, case):
    (kernel,) = args
    B, T, H = inputs["q"].shape[:3]
    BT, _, BV = _blocks(case)
    _launch(kernel, (triton.cdiv(T, BT), B * H, triton.cdiv(case["V"], BV)), inputs, outputs["o"], case)


def _fwd_run(args, inputs, outputs, case):
    (kernel,) = args
    B, T, H = inputs["q"].shape[:3]
    _, _, BV = _blocks(case)
    _launch(kernel, (triton.cdiv(case["V"], BV), B * H), inputs, outputs["o"], case)


def _o_shape(case, inputs):
    return {"o": ((case["B"], case["T"], case["H"], case["V"]), case.dtype)}


_KERNEL_SIG = ("(q_ptr, k_ptr, v_ptr, o_ptr, T, H, K, V, scale, stride_qb, stride_qt, stride_qh, stride_kb, "
               "stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, stride_ob, stride_ot, stride_oh, "
               "BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, PRECISION: tl.constexpr)")


def _cases(hidden: bool):
    if not hidden:
        return [
            Case("B=1 T=37 H=2 K=16 V=16 BT=16 fp32, k a strided view, v [B, H, T, V] storage",
                 dict(B=1, T=37, H=2, K=16, V=16, BT=16, layouts=("contiguous", "wide", "heads")), precision="ieee",
                 purpose="gives q, k, v and o four different sets of strides and a last chunk of 5 tokens: address "
                         "each tensor through its own strides, mask the rows past T"),
            Case("B=2 T=50 H=1 K=20 V=24 BT=16 BV=16 fp16, q [B, H, T, K] storage, v a strided view",
                 dict(B=2, T=50, H=1, K=20, V=24, BT=16, BV=16, layouts=("heads", "contiguous", "wide")),
                 torch.float16,
                 purpose="gives q, k, v and o four different sets of strides, K and V below their blocks and a "
                         "last chunk of 2 tokens: mask rows past T and columns past K and V"),
        ]
    return [
        Case("B=1 T=1 H=1 K=16 V=16 BT=16 fp32", dict(B=1, T=1, H=1, K=16, V=16, BT=16), precision="ieee"),
        Case("B=2 T=70 H=3 K=33 V=40 BT=32 BV=32 fp32, q/k/v views of one buffer",
             dict(B=2, T=70, H=3, K=33, V=40, BT=32, BV=32, strided=True), precision="ieee"),
        Case("B=1 T=64 H=2 K=16 V=16 BT=32 fp16, [B, H, T, D] storage",
             dict(B=1, T=64, H=2, K=16, V=16, BT=32, heads_major=True), torch.float16,
             purpose="is a whole number of chunks, q, k, v in [B, H, T, D] storage"),
        Case("B=2 T=33 H=2 K=24 V=40 BT=16 BV=16 fp32, q and v strided views, k [B, H, T, K] storage",
             dict(B=2, T=33, H=2, K=24, V=40, BT=16, BV=16, layouts=("wide", "heads", "wide")), precision="ieee",
             purpose="gives q, k, v and o four different sets of strides, and a last chunk of one token"),
        Case("B=2 T=100 H=2 K=64 V=64 BT=32 BV=32 bf16", dict(B=2, T=100, H=2, K=64, V=64, BT=32, BV=32),
             torch.bfloat16, gpu_only=True),
    ] + pick(cpu=[], gpu=[
        Case("B=2 T=1000 H=8 K=128 V=128 BT=64 BV=64 bf16",
             dict(B=2, T=1000, H=8, K=128, V=128, BT=64, BV=64, num_warps=4), torch.bfloat16),
        Case("B=1 T=4099 H=4 K=100 V=72 BT=64 BV=32 fp32 tf32",
             dict(B=1, T=4099, H=4, K=100, V=72, BT=64, BV=32), precision="tf32"),
    ])


#: What exercises 2 and 3 share: the kernel's arguments, its inputs and output, the cases.
_CHUNK_KERNEL = dict(magnitude=True, args=("kernel",), make_inputs=_inputs, outputs=_o_shape, visible=_cases(False),
                     hidden=_cases(True))

INTRA_CHUNK = Exercise(
    id="04_chunked_linear_attention.intra_chunk",
    signature="intra_chunk_kernel" + _KERNEL_SIG + ", launched on grid (cdiv(T, BT), B * H, cdiv(V, BV))",
    description="o = scale · (Q_c K_cᵀ ⊙ causal mask) V_c for every chunk c of BT tokens, independently",
    **_CHUNK_KERNEL,
    run=_intra_run,
    reference=lambda inputs, case: {"o": intra_chunk(inputs["q"], inputs["k"], inputs["v"], inputs["scale"],
                                                     case["BT"])},
    points=(3, 2),
    diagnose=_diagnose(lambda case: case["BT"], carried=False),
)

CHUNKED_FWD = Exercise(
    id="04_chunked_linear_attention.chunked_fwd",
    signature="chunked_attention_kernel" + _KERNEL_SIG + ", launched on grid (cdiv(V, BV), B * H)",
    description="the fused chunked forward: the [BK, BV] fp32 state carried on-chip from chunk to chunk",
    **_CHUNK_KERNEL,
    run=_fwd_run,
    reference=lambda inputs, case: {"o": recurrent(inputs["q"], inputs["k"], inputs["v"], inputs["scale"])},
    points=(4, 3),
    diagnose=_diagnose(lambda case: case["BT"], carried=True),
)


# ---- the capstone's speed: exercise 3 at the H200 table's size, with the learner's chunk size ------------------

_CHUNK_KEYS = ("BT", "BV", "num_warps", "num_stages")


def _chunk_rule(values, hidden):
    c = values[0]
    why = settings_problem("CHUNK", c, _CHUNK_KEYS)
    if why:
        return why
    for k in ("BT", "BV"):
        if c[k] not in (16, 32, 64, 128):
            return f"{k}={c[k]} must be 16, 32, 64 or 128 (a power of two, and tl.dot needs at least 16)"
    if c["num_warps"] not in (1, 2, 4, 8, 16):
        return f"num_warps={c['num_warps']} must be a power of two up to 16"
    if c["num_stages"] > 6:
        return f"num_stages={c['num_stages']} is more stages than the loop can use; at most 6"
    return None


def _fits_the_capstone(recorder, chunk):
    """In the sm_90 dry run (``recorder`` compiles instead of launching): compile the capstone's own launch, on
    shape-only tensors, and refuse a CHUNK whose shared memory no H100/H200 program may have; the small case
    the interpreter runs cannot show it, and on a GPU that launch fails with "out of resource"."""
    c = _CAPSTONE
    B, T, H, K, V = (c[n] for n in "BTHKV")
    q = torch.empty(B, T, H, K, dtype=c.dtype, device="meta")
    o = torch.empty(B, T, H, V, dtype=c.dtype, device="meta")
    values = bind(recorder.jit_fn, _args(q, q, o, o, K ** -0.5),
                  dict(BT=chunk["BT"], BK=_block(K), BV=chunk["BV"], PRECISION="ieee"))
    # what Triton's JIT assumes of this launch on a GPU (aligned pointers, strides that are multiples of 16): the
    # loads it may then pipeline take one buffer a stage
    sig, const, attrs = specialise(recorder.jit_fn, values, specialize=True)
    got = aot_compile(recorder.jit_fn, sig, const, dict(num_warps=chunk["num_warps"], num_stages=chunk["num_stages"]),
                      attrs)
    shared = int(getattr(getattr(got, "metadata", None), "shared", 0) or 0)
    if shared > SMEM_LIMIT:
        raise CheckFailed(f"at the capstone's size ({c.label.removesuffix(' with your CHUNK')}) your kernel with "
                          f"CHUNK={chunk} needs {shared / 1024:.0f} KiB of shared memory per program, and an H100 or "
                          f"H200 program may have at most {SMEM_LIMIT // 1024} KiB: on a GPU that launch fails "
                          "(out of resource). Use fewer stages or smaller BT or BV")


def _speed_run(args, inputs, outputs, case):
    chunk, kernel = args
    why = _chunk_rule((chunk,), False)
    if why:  # refused before any launch, so the compile-ahead step says the same
        raise CheckFailed(why)
    if isinstance(kernel, Recorder):
        _fits_the_capstone(kernel, chunk)
    q, v = inputs["q"], inputs["v"]
    B, T, H, K = q.shape
    kernel[(triton.cdiv(v.shape[-1], chunk["BV"]), B * H)](
        *_args(q, inputs["k"], v, outputs["o"], inputs["scale"]), BT=chunk["BT"], BK=_block(K), BV=chunk["BV"],
        PRECISION=case.precision or "ieee", num_warps=chunk["num_warps"], num_stages=chunk["num_stages"])


def _package_forward(args, inputs, outputs, case):
    from ...linear_attention import chunk_linear_attn

    o, _ = chunk_linear_attn(inputs["q"], inputs["k"], inputs["v"], scale=inputs["scale"], normalize=False)
    outputs["o"].copy_(o)


def _fla():
    try:
        from fla.ops.linear_attn import chunk_linear_attn
    except Exception:  # noqa: BLE001 (fla-core not installed, or not importable here)
        return None
    return chunk_linear_attn


#: Without fla-core, the time to beat is this multiple of the HBM floor.
FLOOR_MULTIPLE = 2.5


def _capstone_target(inputs, case, floor_ms):
    fla = _fla()
    if fla is None:
        return FLOOR_MULTIPLE * floor_ms, f"{FLOOR_MULTIPLE:g}x the HBM floor (fla-core is not installed here)"
    from ...bench import time_ms

    q, k, v = (inputs[n].contiguous() for n in "qkv")  # so that fla's time holds no copy of its inputs
    ms = time_ms(lambda: fla(q, k, v, scale=inputs["scale"], normalize=False), warmup=10, rep=50)
    return ms, "fla-core's chunk_linear_attn"


_CAPSTONE = Case("B=4 T=16384 H=16 K=V=128 bf16 with your CHUNK", dict(B=4, T=16384, H=16, K=128, V=128),
                 torch.bfloat16)

CHUNKED_SPEED = Exercise(
    id="04_chunked_linear_attention.chunked_speed",
    magnitude=True,
    args=("value", "kernel"),
    signature="check('04_chunked_linear_attention.chunked_speed', CHUNK, chunked_attention_kernel) with CHUNK = "
              "dict(BT=, BV=, num_warps=, num_stages=)",
    description="the fused chunked forward with your chunk size at B=4 T=16384 H=16 D=128 bf16: faster than "
                "fla-core's chunk_linear_attn where it is installed, else within 2.5x of the HBM floor (GPU only)",
    make_inputs=_inputs,
    outputs=_o_shape,
    run=_speed_run,
    reference=lambda inputs, case: {"o": recurrent(inputs["q"], inputs["k"], inputs["v"], inputs["scale"])},
    rule=_chunk_rule,
    visible=[Case("B=1 T=70 H=2 K=32 V=48 fp32 with your CHUNK", dict(B=1, T=70, H=2, K=32, V=48),
                  precision="ieee")],
    performance=Performance(
        case=_CAPSTONE,
        baseline=_package_forward,
        baseline_name="the package's chunk_linear_attn",
        min_speedup=0.0,
        floor=lambda case: (case["B"] * case["T"] * case["H"] * (2 * case["K"] + 2 * case["V"]) * 2,
                            4 * case["B"] * case["T"] * case["H"] * case["K"] * case["V"]),
        target=_capstone_target,
    ),
    points=(3, 0),
)

register(CHUNKED_TORCH, INTRA_CHUNK, CHUNKED_FWD, CHUNKED_SPEED)
