"""The backward pass of chunked linear attention: ``chunked_bwd.py``'s two passes and ``chunk_linear_attn``'s
autograd against float64 autograd of the token-by-token recurrence (lengths that are not chunk multiples, packed
sequences with an empty one, initial and final states, ``normalize=True``), every element written, nothing kept
between forward and backward but the inputs; on the GPU against fla-core's gradients on the same inputs.
"""

from __future__ import annotations

import pytest
import torch
from test_linear_attention import poison  # noqa: F401  (the fixture: NaN-filled buffers with guard bands)

from kernels.device import DEVICE, ON_GPU
from kernels.linear_attention import chunk_linear_attn
from kernels.linear_attention.chunked_bwd import chunked_backward
from kernels.linear_attention.fused import fused_forward
from kernels.linear_attention.reference import (
    recurrent_linear_attention,
    reference_backward,
    reference_linear_attention,
)
from kernels.testing import assert_close, check_bad_input, randn, rel_error, tolerance

#: name -> (B, T, H, K, V, dtype, cu_seqlens, initial/final states)
CASES = {
    "fp32 T37 K32 V48 state": (1, 37, 2, 32, 48, torch.float32, None, True),
    "fp16 B2 T100": (2, 100, 2, 32, 32, torch.float16, None, False),
    "bf16 varlen K24 V40 state": (1, 100, 2, 24, 40, torch.bfloat16, [0, 37, 37, 90, 100], True),
    "fp32 varlen": (1, 53, 3, 16, 16, torch.float32, [0, 1, 20, 53], False),
}


def _tol(dtype) -> float:
    return tolerance(dtype, tf32=ON_GPU)


def _case(B, T, H, K, V, dtype, cu, state, *, seed):
    N = B if cu is None else len(cu) - 1
    q, k, v, do = (randn(B, T, H, d, dtype=dtype, seed=seed + i) for i, d in enumerate((K, K, V, V)))
    h0 = randn(N, H, K, V, seed=seed + 4) if state else None
    dht = randn(N, H, K, V, seed=seed + 5) if state else None
    cu = None if cu is None else torch.tensor(cu, dtype=torch.int64, device=DEVICE)
    return dict(q=q, k=k, v=v, do=do, scale=K ** -0.5, initial_state=h0, dht=dht, cu_seqlens=cu)


def _check(name, got, ref, tol):
    for part, a, r in zip(("dq", "dk", "dv", "dh0"), got, ref):
        if r is None:
            assert a is None, part
            continue
        assert a.shape == r.shape, (part, a.shape, r.shape)
        assert_close(f"{name} {part}", r, a, tol)


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_backward(name, poison):  # noqa: F811
    c = _case(*CASES[name], seed=10)
    got = chunked_backward(c["q"], c["k"], c["v"], c["do"], c["scale"], c["initial_state"], c["dht"],
                           c["cu_seqlens"], need_dh0=c["initial_state"] is not None)
    for p in poison:
        p.check("a gradient buffer")
    ref = reference_backward(c["q"], c["k"], c["v"], c["do"], c["scale"], c["initial_state"], c["dht"],
                             c["cu_seqlens"], recurrent=True)
    _check(name, got, ref, _tol(c["q"].dtype))
    assert got[0].dtype == c["q"].dtype and (got[3] is None or got[3].dtype == torch.float32)


def _grads(fn, c, normalize, z0=None):
    """Gradients of ``Σ o·do + Σ final_state·dht (+ Σ z_state·dz)`` through ``fn`` (chunk_linear_attn's API)."""
    leaves = [x.detach().clone().requires_grad_() for x in (c["q"], c["k"], c["v"])]
    h0 = c["initial_state"].clone().requires_grad_()
    z = None if z0 is None else z0.clone().requires_grad_()
    o, ht = fn(*leaves, scale=c["scale"], initial_state=(h0, z) if normalize else h0, output_final_state=True,
               normalize=normalize, cu_seqlens=c["cu_seqlens"])
    loss = (o.double() * c["do"].double()).sum()
    if normalize:
        ht, zt = ht
        loss = loss + (zt.double() * c["dz"].double()).sum()
    loss = loss + (ht.double() * c["dht"].double()).sum()
    loss.backward()
    return [x.grad for x in leaves + [h0] + ([z] if normalize else [])]


def _check_api_gradients(c, normalize, *, seed):
    """``chunk_linear_attn``'s gradients of case ``c`` against the float64 recurrence's through the same API (the
    normalised one on positive features, as a normalised attention is fed, with an initial key sum drawn from
    ``seed`` and its final one's gradient from ``seed + 1``), at the tolerance of c's dtype."""
    z0 = None
    if normalize:
        N, (H, K) = c["initial_state"].shape[0], c["q"].shape[2:]
        c.update(q=c["q"].abs(), k=c["k"].abs())
        z0 = randn(N, 1, H, K, seed=seed).abs()
        c["dz"] = randn(N, 1, H, K, seed=seed + 1)
    got = _grads(chunk_linear_attn, c, normalize, z0)
    f64 = {n: (x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x) for n, x in c.items()}
    ref = _grads(recurrent_linear_attention, f64, normalize, None if z0 is None else z0.double())
    for name, a, r in zip(("dq", "dk", "dv", "dh0", "dz0"), got, ref):
        assert_close(name, r, a, _tol(c["q"].dtype))


@pytest.mark.parametrize("normalize", [False, True])
def test_api_gradients(normalize):
    """``chunk_linear_attn`` is differentiable with fla's signature: q, k, v, both parts of the initial state, and
    the final state's gradient flowing back; a packed batch whose last sequence is not a chunk multiple."""
    _check_api_gradients(_case(1, 70, 2, 32, 32, torch.float32, [0, 3, 3, 70], True, seed=20), normalize, seed=26)


@pytest.mark.parametrize("normalize", [False, True])
def test_api_gradients_through_the_states_forward(normalize):
    """A 16-bit head of K = 136 (the D=256 tables, whose adopted launch is the two states kernels, ``states.py``) is
    differentiable as any other: the unnormalised output the torch division differentiates comes from the states
    kernels (an output 10% off fails the normalised case's dq), the backward's kernels run at K = 136; gradients
    against float64, initial and final states in, T not a multiple of the chunk."""
    from kernels.linear_attention import dispatch

    c = _case(1, 70, 2, 136, 40, torch.bfloat16, None, True, seed=30)
    assert dispatch.launch_for(c["q"], c["v"]).states, "the case no longer runs the states kernels"
    _check_api_gradients(c, normalize, seed=36)


def test_saves_only_inputs():
    """Between forward and backward autograd holds q, k, v and the initial state, the caller's own tensors."""
    c = _case(1, 40, 2, 16, 16, torch.float32, None, True, seed=30)
    q, k, v, h0 = (c[n].clone().requires_grad_() for n in ("q", "k", "v", "initial_state"))
    o, _ = chunk_linear_attn(q, k, v, initial_state=h0, normalize=False, output_final_state=True)
    node = o.grad_fn
    saved = node.saved_tensors
    assert len(saved) == 4 and all(s.data_ptr() == x.data_ptr() for s, x in zip(saved, (q, k, v, h0)))


def test_no_state_no_final():
    """Without states: no ``dh0``, and the final state's gradient is taken as zero."""
    c = _case(1, 50, 2, 16, 32, torch.float16, None, False, seed=40)
    q, k, v = (c[n].clone().requires_grad_() for n in ("q", "k", "v"))
    o, ht = chunk_linear_attn(q, k, v, normalize=False)
    assert ht is None
    o.backward(c["do"])
    ref = reference_backward(c["q"], c["k"], c["v"], c["do"], c["scale"], recurrent=True)
    _check("no state", (q.grad, k.grad, v.grad, None), ref, _tol(torch.float16))


def test_bad_inputs():
    c = _case(1, 20, 2, 16, 16, torch.float32, None, False, seed=50)
    args = (c["q"], c["k"], c["v"])
    check_bad_input(chunked_backward, *args, c["do"][..., :8], 0.25, match="do must match")
    check_bad_input(chunked_backward, *args, c["do"].half(), 0.25, match="do must match")
    check_bad_input(chunked_backward, *args, c["do"], 0.25, dht=torch.zeros(2, 2, 16, 16, device=DEVICE),
                    match="dht must have")


def test_known_calls_checked_as_new_ones():
    """The forward and the backward keep the checks and plan of a call they have seen (same shapes, strides,
    dtypes, devices): a second call of a known key gives the same results and still refuses what a first call
    would refuse (the scale's value and the flags' types are not in the key; a state in another layout is another
    key)."""
    c = _case(1, 20, 2, 16, 16, torch.float32, None, True, seed=60)
    q, k, v, do, h0, dht = (c[n] for n in ("q", "k", "v", "do", "initial_state", "dht"))
    first, again = (fused_forward(q, k, v, 0.25, h0, output_final_state=True) for _ in range(2))
    assert torch.equal(first.o, again.o) and torch.equal(first.final_state, again.final_state)
    first, again = (chunked_backward(q, k, v, do, 0.25, h0, dht, need_dh0=True) for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    for bad in (float("nan"), float("inf"), True, "0.25"):
        check_bad_input(fused_forward, q, k, v, bad, h0, output_final_state=True, match="scale must be")
        check_bad_input(chunked_backward, q, k, v, do, bad, h0, dht, need_dh0=True, match="scale must be")
    check_bad_input(fused_forward, q, k, v, 0.25, h0, output_final_state=1, match="output_final_state must be")
    check_bad_input(fused_forward, q, k, v, 0.25, h0, output_final_state=True, normalize=1, match="normalize must")
    check_bad_input(fused_forward, q, k, v, 0.25, h0.transpose(-1, -2), output_final_state=True,
                    match="contiguous")
    check_bad_input(chunked_backward, q, k, v, do, 0.25, h0.transpose(-1, -2), dht, match="contiguous")
    check_bad_input(chunked_backward, q, k, v, do, 0.25, h0, dht[:, :1], match="dht must have")


def test_host_bench_takes_the_gpu_path():
    """The host-time benchmark's step issues the GPU's three launches with the GPU's plan (not the interpreter's
    small tiles), and leaves no plan of its meta tensors behind."""
    from kernels.linear_attention import bench_host, chunked_bwd, dispatch, fused

    r = bench_host.measure(calls=3, warmup=1)
    assert r["launches_per_step"] == 3 and r["step_us"] > 0 and set(r["split_us"]) >= {"forward_wrapper"}
    dev = torch.device("meta")
    x = torch.empty(4, 4096, 16, 128, dtype=torch.bfloat16, device=dev)
    with bench_host.gpu_path(dev):
        f = fused.fused_forward(x, x, x, 0.1)
        assert f.launch == dispatch.plan(128, 128, torch.bfloat16, 4, 16, [4096], bench_host.SMS)
    assert not any(key[0][3] == dev for plans in (fused._PLANS, chunked_bwd._PLANS) for key in plans)


@pytest.mark.parametrize("name", ["fp32 T37 K32 V48 state", "fp16 B2 T100"])
def test_whole_head_blocks(name, poison):  # noqa: F811
    """``block`` (a measurement option): one dk and one dv program a head owning whole heads, with K = V (the shared
    loop, one program of each kind) and K != V, against float64; every element written."""
    c = _case(*CASES[name], seed=15)
    got = chunked_backward(c["q"], c["k"], c["v"], c["do"], c["scale"], c["initial_state"], c["dht"],
                           c["cu_seqlens"], need_dh0=c["initial_state"] is not None, block=64)
    ref = reference_backward(c["q"], c["k"], c["v"], c["do"], c["scale"], c["initial_state"], c["dht"],
                             c["cu_seqlens"], recurrent=True)
    _check(name, got, ref, _tol(c["q"].dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_whole_heads(dtype, poison):  # noqa: F811
    """The whole-head launch (``block=128``, 8 warps, 3 stages: one dk and one dv program a head) against float64
    and against the default 64-column blocks, on a length that is not a chunk multiple, without and with states."""
    for state in (False, True):
        c = _case(2, 1000, 4, 128, 128, dtype, None, state, seed=55)
        args = (c["q"], c["k"], c["v"], c["do"], c["scale"], c["initial_state"], c["dht"])
        ref = reference_backward(*args, chunk_size=256)
        got = chunked_backward(*args, need_dh0=state, block=128, num_warps=8, num_stages=3)
        blocks = chunked_backward(*args, need_dh0=state)
        _check(f"{dtype} whole heads state={state}", got, ref, _tol(dtype))
        for part, a, b, r in zip(("dq", "dk", "dv"), got, blocks, ref):
            print(f"{dtype} state={state} {part}: whole heads {rel_error(a, r):.2e}, blocks {rel_error(b, r):.2e}")


# On the GPU: the shapes at a length that is not a chunk multiple, against fla-core's own backward.

def _fla_grads(c, normalize=False):
    fla = pytest.importorskip("fla.ops.linear_attn")
    return _grads(fla.chunk_linear_attn, c, normalize)


#: One packed batch for every comparison with fla, whose kernels autotune for about a minute at each new shape.
_PACKED = [0, 1000, 1001, 3100, 4000]


# fla's backward autotunes its kernels on a first call: 100-150 s of compiling with other workers beside it
@pytest.mark.gpu
@pytest.mark.timeout(420)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gpu_gradients_vs_fla(dtype):
    """Gradient error against float64 no worse than fla's on the same inputs (or within the dtype's tolerance):
    packed sequences, one of a single token, lengths that are not chunk multiples, initial and final states."""
    c = _case(1, 4000, 8, 128, 128, dtype, _PACKED, True, seed=60)
    c.update(q=c["q"] * 0.5, k=c["k"] * 0.5)
    ours = _grads(chunk_linear_attn, c, False)
    theirs = _fla_grads(c)
    ref = reference_backward(c["q"], c["k"], c["v"], c["do"], c["scale"], c["initial_state"], c["dht"],
                             c["cu_seqlens"], chunk_size=256)
    for name, a, b, r in zip(("dq", "dk", "dv", "dh0"), ours, theirs, ref):
        ea, eb = rel_error(a, r), rel_error(b, r)
        print(f"{dtype} {name}: ours {ea:.2e}, fla {eb:.2e}")
        assert ea <= max(_tol(dtype), 1.5 * eb), (name, ea, eb)


@pytest.mark.gpu
def test_gpu_agrees_with_fla_recurrent():
    """fla's own autograd test, with ours in the place of its chunk kernel: forward and backward against
    ``fused_recurrent_linear_attn`` (normalize=False, fp32 inputs, initial and final states)."""
    fla = pytest.importorskip("fla.ops.linear_attn")
    c = _case(2, 1000, 4, 64, 64, torch.float32, None, True, seed=70)
    ours = _grads(chunk_linear_attn, c, False)
    theirs = _grads(fla.fused_recurrent_linear_attn, c, False)
    for name, a, b in zip(("dq", "dk", "dv", "dh0"), ours, theirs):
        assert_close(name, b, a, _tol(torch.float32))


@pytest.mark.gpu
@pytest.mark.timeout(420)
def test_gpu_normalized_gradients_vs_fla():
    """normalize=True (its division differentiated by torch): gradients of q, k, v, both initial states, against
    float64 and fla's, on positive features, bf16, the packed batch above."""
    fla = pytest.importorskip("fla.ops.linear_attn")
    c = _case(1, 4000, 8, 128, 128, torch.bfloat16, _PACKED, True, seed=80)
    c.update(q=torch.nn.functional.elu(c["q"]) + 1, k=torch.nn.functional.elu(c["k"]) + 1)
    z0 = randn(4, 1, 8, 128, seed=86).abs()
    c["dz"] = randn(4, 1, 8, 128, seed=87)
    ours = _grads(chunk_linear_attn, c, True, z0)
    theirs = _grads(fla.chunk_linear_attn, c, True, z0)
    f64 = {n: (x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x) for n, x in c.items()}
    ref = _grads(lambda *a, **kw: reference_linear_attention(*a, **kw, chunk_size=256), f64, True, z0.double())
    for name, a, b, r in zip(("dq", "dk", "dv", "dh0", "dz0"), ours, theirs, ref):
        ea, eb = rel_error(a, r), rel_error(b, r)
        print(f"normalize bf16 {name}: ours {ea:.2e}, fla {eb:.2e}")
        assert ea <= max(_tol(torch.bfloat16), 1.5 * eb), (name, ea, eb)


@pytest.mark.slow
def test_kernels_compile_for_sm90_with_every_option():
    """The interpreter never runs Triton's compiler: packed sequences, both states and K = V (one loop for dk and
    dv) and K != V (two), compiled for sm_90 as a GPU would (a constexpr branch returning different types once
    passed the interpreter and failed here)."""
    from sm90 import compile_for_sm90

    common = dict(USE_DHT=True, STORE_DH0=True, IS_VARLEN=True, UPCAST=False, PRECISION=None)
    specs = [("kernels.linear_attention.chunked_bwd", "_chunked_dq_kernel",
              dict(K=128, V=128, BT=64, BK=64, BVA=128, USE_H0=True, IS_VARLEN=True, UPCAST=False, PRECISION=None),
              dict(num_warps=4, num_stages=3)),
             ("kernels.linear_attention.chunked_bwd", "_chunked_dkdv_kernel",
              dict(K=128, V=128, BT=64, BK=64, BV=64, BKA=128, BVA=128, NK=2, SHARED=True, **common),
              dict(num_warps=4, num_stages=2)),
             ("kernels.linear_attention.chunked_bwd", "_chunked_dkdv_kernel",
              dict(K=128, V=64, BT=64, BK=64, BV=64, BKA=128, BVA=64, NK=2, SHARED=False, **common),
              dict(num_warps=4, num_stages=2)),
             ("kernels.linear_attention.chunked_bwd", "_chunked_dkdv_kernel",  # whole heads (block=128)
              dict(K=128, V=128, BT=64, BK=128, BV=128, BKA=128, BVA=128, NK=1, SHARED=True, **common),
              dict(num_warps=8, num_stages=3))]
    ptx = compile_for_sm90(specs, dtypes=("bf16",), scalars={"h0_ptr": "*fp32", "dht_ptr": "*fp32",
                                                             "dh0_ptr": "*fp32", "cu_ptr": "*i64", "scale": "fp32"})
    assert len(ptx) == 4 and all("wgmma" in p for p in ptx.values())
