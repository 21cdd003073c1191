"""Chunked linear attention: every version in VERSIONS (and the eager torch baseline) against the float64 oracle,
the oracle against the token-by-token loop, the fla-compatible public API, bad inputs, and broken kernels.

Outputs the package allocates come from NaN-filled buffers with NaN guard bands (the ``poison`` fixture), so an
element a kernel never writes, or a write out of bounds, fails loudly.
"""

from __future__ import annotations

import inspect
import sys

import pytest
import torch

from kernels.device import DEVICE, ON_GPU
from kernels.linear_attention import VERSIONS, chunk_linear_attn, pick_version
from kernels.linear_attention.chunked import chunked_linear_attention
from kernels.linear_attention.chunked_torch import torch_chunked_linear_attention
from kernels.linear_attention.reference import recurrent_linear_attention, reference_linear_attention
from kernels.testing import assert_close, check_bad_input, poisoned, randn, rel_error, tolerance

ALL = {**VERSIONS, "torch_chunked": torch_chunked_linear_attention}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
_PKG = "kernels.linear_attention"


def _tol(dtype) -> float:
    return tolerance(dtype, tf32=ON_GPU)


@pytest.fixture
def poison(monkeypatch):
    """Float allocations made by the package's own code come from :func:`kernels.testing.poisoned` buffers."""
    made = []
    empty, empty_like = torch.empty, torch.empty_like

    def ours() -> bool:
        return sys._getframe(2).f_globals.get("__name__", "").startswith(_PKG)

    def fake_empty(*size, dtype=None, device=None, **kw):
        dt = dtype or torch.get_default_dtype()
        if kw or not dt.is_floating_point or not ours():
            return empty(*size, dtype=dtype, device=device, **kw)
        shape = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else size
        p = poisoned(*shape, dtype=dt, device=device or "cpu")
        made.append(p)
        return p.out

    def fake_empty_like(x, *, dtype=None, device=None, **kw):
        dt = dtype or x.dtype
        if kw or not dt.is_floating_point or not ours():
            return empty_like(x, dtype=dtype, device=device, **kw)
        p = poisoned(*x.shape, dtype=dt, device=device or x.device)
        made.append(p)
        return p.out

    monkeypatch.setattr(torch, "empty", fake_empty)
    monkeypatch.setattr(torch, "empty_like", fake_empty_like)
    return made


def make_case(B, T, H, K, V, dtype, *, seed, h0=False, cu=None, positive=False):
    """Inputs for one call; ``cu`` lists sequence offsets (then B must be 1)."""
    q, k, v = (randn(B, T, H, d, dtype=dtype, seed=seed + i) for i, d in enumerate((K, K, V)))
    if positive:
        q, k = q.abs(), k.abs()
    N = B if cu is None else len(cu) - 1
    case = dict(q=q, k=k, v=v, scale=K ** -0.5,
                initial_state=randn(N, H, K, V, seed=seed + 3) if h0 else None,
                cu_seqlens=None if cu is None else torch.tensor(cu, dtype=torch.int64, device=DEVICE))
    return case


def _double(x):
    if isinstance(x, tuple):
        return tuple(_double(y) for y in x)
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def _f64(case):
    return {n: _double(x) for n, x in case.items()}


def check_call(fn, case, made=()) -> None:
    """``fn``'s output and final state against the float64 oracle, and no write outside an allocation."""
    tol = _tol(case["q"].dtype)
    o, ht = fn(case["q"], case["k"], case["v"], case["scale"], case["initial_state"], True, case["cu_seqlens"])
    ref = _f64(case)
    ro, rht = reference_linear_attention(ref["q"], ref["k"], ref["v"], ref["scale"], ref["initial_state"], True,
                                         normalize=False, cu_seqlens=ref["cu_seqlens"], chunk_size=32)
    for p in made:
        if not p.guards_intact():
            raise AssertionError("a kernel wrote out of bounds (into the NaN guard band around an allocation)")
    assert o.dtype == case["q"].dtype and ht.dtype == torch.float32
    assert_close("o", ro, o, tol)
    assert_close("final_state", rht, ht, tol)


SHAPES = [(1, 1, 2, 16, 16), (2, 63, 2, 32, 48), (1, 100, 3, 48, 32), (1, 257, 2, 16, 32), (1, 40, 1, 8, 72)]
GPU_CASES = [((2, 1000, 4, 64, 64), torch.bfloat16), ((1, 2049, 2, 128, 128), torch.float32),
             ((2, 517, 2, 128, 64), torch.float16), ((1, 300, 2, 256, 96), torch.bfloat16)]


@pytest.mark.parametrize("h0", [False, True], ids=["zero_state", "initial_state"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}_T{}_H{}_K{}_V{}".format(*s))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ALL)
def test_version(name, dtype, shape, h0, poison):
    case = make_case(*shape, dtype, seed=hash((shape, h0)) % 1000, h0=h0)
    check_call(ALL[name], case, poison)


@pytest.mark.gpu
@pytest.mark.parametrize("shape, dtype", GPU_CASES, ids=lambda c: "B{}_T{}_H{}_K{}_V{}".format(*c)
                         if isinstance(c, tuple) else str(c).removeprefix("torch."))
@pytest.mark.parametrize("name", ALL)
def test_gpu_version_head_sizes(name, dtype, shape, poison):
    case = make_case(*shape, dtype, seed=sum(shape) % 1000, h0=True)
    check_call(ALL[name], case, poison)


@pytest.mark.parametrize("h0", [False, True], ids=["zero_state", "initial_state"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ALL)
def test_version_varlen(name, dtype, h0, poison):
    cu = [0, 0, 1, 65, 165, 165, 202]
    case = make_case(1, cu[-1], 2, 48, 32, dtype, seed=7, h0=h0, cu=cu)
    case["cu_seqlens"] = case["cu_seqlens"].to(torch.int32 if h0 else torch.int64)
    check_call(ALL[name], case, poison)


@pytest.mark.parametrize("name", ALL)
def test_version_strided_inputs(name, poison):
    """Inputs viewed from [B, H, T, D] storage: a version computes right or names the stride it needs."""
    case = make_case(2, 70, 3, 32, 16, torch.float32, seed=11, h0=True)
    for n in ("q", "k", "v"):
        case[n] = case[n].transpose(1, 2).contiguous().transpose(1, 2)
    try:
        check_call(ALL[name], case, poison)
    except ValueError as e:
        assert "stride" in str(e)


@pytest.mark.parametrize("chunk_size", [16, 32, 128])
def test_chunked_chunk_sizes(chunk_size, poison):
    case = make_case(1, 150, 2, 32, 32, torch.float16, seed=5, h0=True)
    check_call(lambda *a: chunked_linear_attention(*a, chunk_size=chunk_size), case, poison)


ORACLE_CASES = {
    "T1": dict(shape=(1, 1, 2, 8, 4)),
    "T63_state": dict(shape=(2, 63, 2, 8, 12), h0=True),
    "T100_normalize": dict(shape=(2, 100, 2, 12, 8), h0=True, normalize=True),
    "varlen_normalize": dict(shape=(1, 90, 2, 8, 8), h0=True, normalize=True, cu=[0, 30, 30, 31, 90]),
    "varlen_normalize_empty_last": dict(shape=(1, 90, 2, 8, 8), h0=True, normalize=True, cu=[0, 0, 90, 90]),
    "varlen": dict(shape=(1, 90, 2, 8, 8), h0=True, cu=[0, 10, 90]),
}


@pytest.mark.parametrize("what", ORACLE_CASES)
def test_oracle_matches_recurrent_loop(what):
    spec = ORACLE_CASES[what]
    B, T, H, K, V = spec["shape"]
    normalize = spec.get("normalize", False)
    case = _f64(make_case(B, T, H, K, V, torch.float32, seed=3, h0=spec.get("h0", False), cu=spec.get("cu"),
                          positive=normalize))
    state = case["initial_state"]
    if normalize and state is not None:
        state = (state, randn(state.shape[0], 1, H, K, dtype=torch.float64, seed=9).abs())
    args = (case["q"], case["k"], case["v"], None, state, True, normalize, case["cu_seqlens"])
    loop = recurrent_linear_attention(*args)
    for chunk in (5, 64):
        out = reference_linear_attention(*args, chunk_size=chunk)
        assert_close(f"o (chunk {chunk})", loop[0], out[0], 1e-12)
        if normalize:
            assert_close("final_state", loop[1][0], out[1][0], 1e-12)
            assert_close("z_state", loop[1][1], out[1][1], 1e-12)
        else:
            assert_close("final_state", loop[1], out[1], 1e-12)


def test_oracle_definition():
    """One token by hand: o_0 = scale · (q_0 · k_0) v_0 + scale · q_0 S_0."""
    case = _f64(make_case(1, 1, 1, 4, 3, torch.float32, seed=2, h0=True))
    q, k, v, h0 = (case[n][0, 0, 0] if n != "initial_state" else case[n][0, 0] for n in ("q", "k", "v",
                                                                                        "initial_state"))
    o, ht = reference_linear_attention(case["q"], case["k"], case["v"], 0.5, case["initial_state"], True,
                                       normalize=False)
    assert_close("o", 0.5 * ((q @ k) * v + q @ h0), o[0, 0, 0], 1e-14)
    assert_close("final_state", h0 + torch.outer(k, v), ht[0, 0], 1e-14)


# The public entry point: fla-core 0.6.0's chunk_linear_attn.

FLA_SIGNATURE = [("q", inspect.Parameter.empty), ("k", inspect.Parameter.empty), ("v", inspect.Parameter.empty),
                 ("scale", None), ("initial_state", None), ("output_final_state", False), ("normalize", True),
                 ("cu_seqlens", None)]


def test_api_signature():
    params = inspect.signature(chunk_linear_attn).parameters.values()
    assert [(p.name, p.default) for p in params] == FLA_SIGNATURE


@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "normalize"])
@pytest.mark.parametrize("state", ["none", "tensor", "tuple"])
@pytest.mark.parametrize("varlen", [False, True], ids=["batch", "varlen"])
def test_api(normalize, state, varlen):
    if state == "tuple" and not normalize:
        pytest.skip("the (kv, z) tuple belongs to normalize=True")
    dtype = torch.bfloat16
    cu = [0, 40, 41, 130] if varlen else None
    case = make_case(1 if varlen else 2, 130, 2, 32, 48, dtype, seed=21, h0=state != "none", cu=cu, positive=True)
    N = 3 if varlen else 2
    initial = case["initial_state"]
    if state == "tuple":
        initial = (initial, randn(N, 1, 2, 32, seed=22).abs())
    o, final = chunk_linear_attn(case["q"], case["k"], case["v"], initial_state=initial, output_final_state=True,
                                 normalize=normalize, cu_seqlens=case["cu_seqlens"])
    f = _f64(case)
    ro, rfinal = reference_linear_attention(f["q"], f["k"], f["v"], None, _double(initial), True, normalize,
                                            f["cu_seqlens"])
    # fla-core divides in the promoted dtype: an fp32 z_state in the tuple makes the normalised output fp32
    assert o.dtype == (torch.float32 if state == "tuple" else dtype), o.dtype
    assert o.shape == (case["q"].shape[0], 130, 2, 48)
    assert_close("o", ro, o, _tol(dtype))
    if normalize:
        (ht, z), (rht, rz) = final, rfinal
        assert z.shape == (N, 1, 2, 32) and z.dtype == (torch.float32 if state == "tuple" else dtype)
        assert_close("z_state", rz, z, _tol(dtype))
    else:
        ht, rht = final, rfinal
    assert ht.shape == (N, 2, 32, 48) and ht.dtype == torch.float32
    assert_close("final_state", rht, ht, _tol(dtype))


def test_api_reads_the_offsets_once(monkeypatch):
    """Every read of a device tensor on the host waits for the GPU: one call of the drop-in reads ``cu_seqlens``
    once, however many of its parts (the dispatch rule, the checks, the lookback's segment table, the
    normalisation) need the offsets. A later call reads them again: they may have changed in between."""
    from kernels.linear_attention import checks

    reads = []
    real = checks._read
    monkeypatch.setattr(checks, "_read", lambda cu: reads.append(1) or real(cu))
    case = make_case(1, 70, 2, 16, 24, torch.float32, seed=31, h0=True, cu=[0, 3, 3, 70], positive=True)
    for normalize in (False, True):
        reads.clear()
        o, _ = chunk_linear_attn(case["q"], case["k"], case["v"], initial_state=case["initial_state"],
                                 normalize=normalize, cu_seqlens=case["cu_seqlens"])
        assert len(reads) == 1, (normalize, len(reads))
    ro, _ = reference_linear_attention(*(_f64(case)[x] for x in ("q", "k", "v")), None,
                                       case["initial_state"].double(), False, True, case["cu_seqlens"])
    assert_close("o", ro, o, _tol(torch.float32))
    reads.clear()
    checks.check_cu_seqlens(case["cu_seqlens"], 70, 1)  # outside a call: no stale offsets
    assert len(reads) == 1


def test_api_return_values_without_final_state():
    case = make_case(1, 20, 2, 16, 16, torch.float32, seed=4, positive=True)
    o, final = chunk_linear_attn(case["q"], case["k"], case["v"], normalize=False)
    assert final is None
    o, (ht, z) = chunk_linear_attn(case["q"], case["k"], case["v"])
    assert ht is None and z.shape == (1, 1, 2, 16)
    ro, _ = reference_linear_attention(*(x.double() for x in (case["q"], case["k"], case["v"])))
    assert_close("o", ro, o, _tol(torch.float32))


def test_api_any_layout():
    """fla accepts inputs whose last dimension is strided; so does the drop-in."""
    case = make_case(1, 50, 2, 16, 16, torch.float32, seed=6)
    q, k, v = (x.transpose(-1, -2).contiguous().transpose(-1, -2) for x in (case["q"], case["k"], case["v"]))
    o, _ = chunk_linear_attn(q, k, v, scale=0.25, normalize=False)
    ro, _ = reference_linear_attention(q.double(), k.double(), v.double(), 0.25, normalize=False)
    assert_close("o", ro, o, _tol(torch.float32))


def test_api_dispatch(monkeypatch):
    """The first registered version that supports the call runs; with none, the error lists why."""
    case = make_case(1, 10, 2, 16, 16, torch.float32, seed=8)
    args = (case["q"], case["k"], case["v"])

    def picky(*a, **kw):
        raise AssertionError("an unsupporting version ran")

    picky.supports = lambda q, k, v, initial_state=None, cu_seqlens=None: "needs T >= 1024"
    monkeypatch.setattr("kernels.linear_attention.VERSIONS", {"picky": picky, **VERSIONS})
    assert pick_version(*args) != "picky"
    chunk_linear_attn(*args)
    monkeypatch.setattr("kernels.linear_attention.VERSIONS", {"picky": picky})
    check_bad_input(chunk_linear_attn, *args, match="needs T >= 1024")
    monkeypatch.undo()
    first = next(n for n, f in VERSIONS.items() if not hasattr(f, "supports") or f.supports(*args) is None)
    assert pick_version(*args) == first


# Bad input: a clear error naming the problem.

def _bad(case, **change):
    out = dict(case)
    out.update(change)
    return out


def _bad_cases():
    base = make_case(1, 12, 2, 16, 8, torch.float32, seed=1, h0=True)
    q, k, v, h0 = base["q"], base["k"], base["v"], base["initial_state"]
    cu = torch.tensor([0, 5, 12], device=DEVICE)
    wrong_device = torch.device("meta")
    return {
        "float64": (_bad(base, q=q.double(), k=k.double(), v=v.double()), "dtype"),
        "int": (_bad(base, q=q.int(), k=k.int(), v=v.int()), "dtype"),
        "mixed_dtypes": (_bad(base, k=k.half()), "dtype"),
        "device": (_bad(base, q=q.to(wrong_device)), "is on"),
        "ndim": (_bad(base, q=q[0], k=k[0], v=v[0]), "dimensions"),
        "k_shape": (_bad(base, k=k[:, :, :, :8]), "k must have q's shape"),
        "v_shape": (_bad(base, v=v[:, :6]), "v must be"),
        "stride": (_bad(base, q=q.transpose(-1, -2).contiguous().transpose(-1, -2)), "stride"),
        "head_too_big": (_bad(base, q=randn(1, 12, 2, 300), k=randn(1, 12, 2, 300), initial_state=None), "limit"),
        "no_scale": (_bad(base, scale=None), "scale"),
        "nan_scale": (_bad(base, scale=float("nan")), "scale"),
        "state_shape": (_bad(base, initial_state=h0[:, :, :8].contiguous()), "initial_state must have shape"),
        "state_layout": (_bad(base, initial_state=h0.transpose(-1, -2).contiguous().transpose(-1, -2)), "contiguous"),
        "state_tuple": (_bad(base, initial_state=(h0, h0)), "tuple"),
        "state_dtype": (_bad(base, initial_state=h0.double()), "dtype"),
        "cu_dtype": (_bad(base, cu_seqlens=cu.float()), "dtype"),
        "cu_ndim": (_bad(base, cu_seqlens=cu[None]), "dimensions"),
        "cu_short": (_bad(base, cu_seqlens=cu[:1]), "at least 2"),
        "cu_batch": (_bad(base, q=q.expand(2, -1, -1, -1), k=k.expand(2, -1, -1, -1), v=v.expand(2, -1, -1, -1),
                          initial_state=None, cu_seqlens=cu), "batch size"),
        "cu_end": (_bad(base, initial_state=None, cu_seqlens=torch.tensor([0, 5, 11], device=DEVICE)), "end at T"),
        "cu_start": (_bad(base, initial_state=None, cu_seqlens=torch.tensor([1, 5, 12], device=DEVICE)), "start at 0"),
        "cu_monotonic": (_bad(base, initial_state=None, cu_seqlens=torch.tensor([0, 7, 5, 12], device=DEVICE)),
                         "monotonic"),
        "cu_state_count": (_bad(base, cu_seqlens=torch.tensor([0, 4, 8, 12], device=DEVICE)), "N = len(cu_seqlens)"),
    }


BAD = _bad_cases()


@pytest.mark.parametrize("what", BAD)
@pytest.mark.parametrize("name", ALL)
def test_bad_input(name, what):
    case, match = BAD[what]
    check_bad_input(ALL[name], case["q"], case["k"], case["v"], case["scale"], case["initial_state"], True,
                    case["cu_seqlens"], match=match)


def test_bad_input_flags():
    case = make_case(1, 12, 2, 16, 8, torch.float32, seed=1)
    args = (case["q"], case["k"], case["v"], 0.5, None)
    check_bad_input(chunked_linear_attention, *args, "yes", match="bool")
    check_bad_input(chunked_linear_attention, *args, chunk_size=48, match="chunk_size")
    check_bad_input(chunked_linear_attention, *args, chunk_size=128, match="fp16/bf16 inputs and K <= 128")
    check_bad_input(chunked_linear_attention, *args, num_warps=3, match="num_warps")
    check_bad_input(chunked_linear_attention, *args, block_v=8, match="block_v")
    check_bad_input(chunked_linear_attention, *args, block_v=128, match="block_v")


@pytest.mark.parametrize("h0", [False, True], ids=["zero_state", "initial_state"])
@pytest.mark.parametrize("overrides", [dict(block_v=16), dict(block_v=64, num_warps=2)], ids=str)
def test_chunked_overrides(overrides, h0, poison):
    """The measurement overrides change how the work is split, never the answer (V = 40 is not a block multiple)."""
    case = make_case(2, 75, 2, 24, 40, torch.float32, seed=int(torch.randint(1000, ())), h0=h0)
    check_call(lambda *a: chunked_linear_attention(*a, **overrides), case, poison)


def test_bad_input_api():
    case = make_case(1, 12, 2, 16, 8, torch.float32, seed=1, h0=True)
    q, k, v, h0 = case["q"], case["k"], case["v"], case["initial_state"]
    check_bad_input(chunk_linear_attn, q, k, v, initial_state=(h0, h0), normalize=False, match="normalize=True")
    check_bad_input(chunk_linear_attn, q, k, v, initial_state=(h0, h0[:, :1]), match="z_state")
    check_bad_input(chunk_linear_attn, q, k, v, initial_state=(h0,), match="(kv_state, z_state)")
    check_bad_input(chunk_linear_attn, q.double(), k, v, match="dtype")
    check_bad_input(chunk_linear_attn, q.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1),
                    cu_seqlens=torch.tensor([0, 12], device=DEVICE), match="batch size")


def test_api_grad_mode():
    """A tensor that wants a gradient gets an output in the graph (the gradients themselves:
    test_linear_attention_backward.py); under no_grad the same call builds no graph."""
    case = make_case(1, 12, 2, 16, 8, torch.float32, seed=1)
    q = case["q"].requires_grad_()
    o, _ = chunk_linear_attn(q, case["k"], case["v"])
    assert o.requires_grad
    with torch.no_grad():
        o, _ = chunk_linear_attn(q, case["k"], case["v"], normalize=False)
    assert not o.requires_grad


# The checks above catch broken kernels: each of these must fail them.

def _no_inter_chunk(q, k, v, scale, h0, final, cu):
    """Chunks computed independently: the state never carries over."""
    outs = [chunked_linear_attention(q[:, t:t + 64], k[:, t:t + 64], v[:, t:t + 64], scale, h0, True)
            for t in range(0, q.shape[1], 64)]
    return torch.cat([o for o, _ in outs], 1), outs[-1][1]


def _no_partial_chunk(q, k, v, scale, h0, final, cu):
    """Only whole chunks: the last T mod 64 tokens are dropped."""
    T = q.shape[1] // 64 * 64
    o, ht = chunked_linear_attention(q[:, :T], k[:, :T], v[:, :T], scale, h0, True)
    return torch.cat([o, torch.zeros_like(v[:, T:])], 1), ht


def _exclusive_mask(q, k, v, scale, h0, final, cu):
    """A strict causal mask: token t no longer sees itself."""
    o, ht = chunked_linear_attention(q, k, v, scale, h0, True)
    return o - scale * (q * k).sum(-1, keepdim=True) * v, ht


def _state_unwritten(q, k, v, scale, h0, final, cu):
    o, _ = chunked_linear_attention(q, k, v, scale, h0, True)
    return o, poisoned(q.shape[0], q.shape[2], k.shape[-1], v.shape[-1]).out


def _initial_state_ignored(q, k, v, scale, h0, final, cu):
    return chunked_linear_attention(q, k, v, scale, None, True)


BROKEN = [_no_inter_chunk, _no_partial_chunk, _exclusive_mask, _state_unwritten, _initial_state_ignored]


@pytest.mark.parametrize("broken", BROKEN, ids=lambda f: f.__name__.strip("_"))
def test_broken_kernels_fail(broken):
    case = make_case(1, 100, 2, 32, 32, torch.float32, seed=13, h0=True)
    with pytest.raises(AssertionError):
        check_call(broken, case)


# On the GPU: full-size problems, and agreement with fla-core where it is installed.

def _gpu_check(name, B, T, H, D, dtype, cu=None):
    case = make_case(B, T, H, D, D, dtype, seed=31, h0=True, cu=cu)
    fn = ALL[name]
    o, ht = fn(case["q"], case["k"], case["v"], case["scale"], case["initial_state"], True, case["cu_seqlens"])
    f = _f64(case)
    ro, rht = reference_linear_attention(f["q"], f["k"], f["v"], f["scale"], f["initial_state"], True,
                                         normalize=False, cu_seqlens=f["cu_seqlens"], chunk_size=256)
    assert_close("o", ro, o, _tol(dtype))
    assert_close("final_state", rht, ht, _tol(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ALL)
def test_gpu_bf16_B4_H16_T4096_D128(name):
    _gpu_check(name, 4, 4096, 16, 128, torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ALL)
def test_gpu_fp16_H32_D64(name):
    _gpu_check(name, 4, 4096, 32, 64, torch.float16)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ALL)
def test_gpu_varlen(name):
    lens = [1, 4095, 0, 2065, 8192, 63, 1100]
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    _gpu_check(name, 1, cu[-1], 16, 128, torch.bfloat16, cu=cu)


@pytest.mark.gpu
@pytest.mark.parametrize("case_name", ["raw", "normalize", "varlen_state", "normalize_tuple_varlen"])
def test_gpu_agrees_with_fla(case_name):
    fla = pytest.importorskip("fla.ops.linear_attn")
    assert [(p.name, p.default) for p in inspect.signature(fla.chunk_linear_attn).parameters.values()] \
        == FLA_SIGNATURE
    normalize = case_name.startswith("normalize")
    cu = [0, 1000, 3001, 4096] if "varlen" in case_name else None
    with_state = "state" in case_name or "tuple" in case_name
    case = make_case(1 if cu else 2, 4096, 16, 128, 128, torch.bfloat16, seed=41, h0=with_state, cu=cu,
                     positive=normalize)
    initial = case["initial_state"]
    if "tuple" in case_name:
        initial = (initial, randn(initial.shape[0], 1, 16, 128, seed=42).abs())
    kw = dict(initial_state=initial, output_final_state=True, normalize=normalize, cu_seqlens=case["cu_seqlens"])
    ours = chunk_linear_attn(case["q"], case["k"], case["v"], **kw)
    theirs = fla.chunk_linear_attn(case["q"], case["k"], case["v"], **kw)
    f = _f64(case)
    ref = reference_linear_attention(f["q"], f["k"], f["v"], None, _double(initial), True, normalize, f["cu_seqlens"],
                                     chunk_size=256)
    flat = [(ours[0], theirs[0], ref[0])]
    flat += list(zip(ours[1], theirs[1], ref[1])) if normalize else [(ours[1], theirs[1], ref[1])]
    for i, (a, b, r) in enumerate(flat):
        assert a.shape == b.shape and a.dtype == b.dtype, (i, a.shape, b.shape, a.dtype, b.dtype)
        assert_close(f"ours vs fla [{i}]", b, a, _tol(torch.bfloat16))
        assert rel_error(a, r) <= max(_tol(torch.bfloat16), 2 * rel_error(b, r))
