"""Recurrent linear attention: naive (HBM state) and fused (register state) against the float64 oracles."""

import pytest
import torch
import triton
import triton.language as tl
from sm90 import compile_for_sm90

from kernels.device import DEVICE, ON_GPU, sizes
from kernels.recurrent import (
    fused,
    fused_recurrent,
    naive,
    naive_recurrent,
    prefetch_recurrent,
    reference_recurrent,
    reference_recurrent_loop,
)
from kernels.testing import assert_close, check_bad_input, generator, poisoned, randn, tolerance

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (B, T, H, K, V): the lesson's size, K and V not powers of two with V over several blocks, a single step


def _shape(s: dict) -> tuple:
    return s["B"], s["T"], s["H"], s["K"], s["V"]


SHAPES = [_shape(sizes("recurrent")) if not ON_GPU else (1, 37, 2, 16, 16), (2, 13, 3, 20, 33), (1, 1, 1, 5, 70)]
VERSIONS = {"naive": naive_recurrent, "fused": fused_recurrent, "prefetch": prefetch_recurrent}


def _inputs(B, T, H, K, V, dtype, seed, initial=True):
    g = generator(seed)
    q = randn(B, T, H, K, dtype=dtype, gen=g)
    k = randn(B, T, H, K, dtype=dtype, gen=g)
    v = randn(B, T, H, V, dtype=dtype, gen=g)
    h0 = randn(B, H, K, V, gen=g) if initial else None
    return q, k, v, h0


def _check(fn, shape, dtype, seed, *, initial=True, final=True, scale=None, **kw):
    B, T, H, K, V = shape
    q, k, v, h0 = _inputs(*shape, dtype, seed, initial)
    ref_o, ref_s = reference_recurrent(q, k, v, scale=scale, initial_state=h0, output_final_state=final, chunk=16)
    p = poisoned(B, T, H, V, dtype=dtype)
    o, s = fn(q, k, v, scale=scale, initial_state=h0, output_final_state=final, out=p.out, **kw)
    p.check("o")
    assert o.data_ptr() == p.out.data_ptr()
    tol = tolerance(dtype)
    assert_close("o", ref_o, o, tol)
    if final:
        assert s.dtype == torch.float32
        assert_close("final_state", ref_s, s, tol)
    else:
        assert s is None


def test_reference_forms_agree():
    q, k, v, h0 = _inputs(2, 45, 3, 7, 9, torch.float32, seed=0)
    for chunk in (1, 8, 64):
        o1, s1 = reference_recurrent(q, k, v, initial_state=h0, output_final_state=True, chunk=chunk)
        o2, s2 = reference_recurrent_loop(q, k, v, initial_state=h0, output_final_state=True)
        assert_close("o", o2, o1, 1e-12)
        assert_close("final_state", s2, s1, 1e-12)


def test_reference_matches_attention_form():
    """Without an initial state, o = scale · tril(q kᵀ) v, the masked quadratic form."""
    q, k, v, _ = _inputs(1, 30, 2, 6, 5, torch.float32, seed=1, initial=False)
    qd, kd, vd = (x.double().transpose(1, 2) for x in (q, k, v))
    att = (qd @ kd.transpose(-1, -2)).tril() * 6**-0.5
    assert_close("o", (att @ vd).transpose(1, 2), reference_recurrent(q, k, v)[0], 1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("version", VERSIONS)
def test_recurrent(version, shape, dtype):
    _check(VERSIONS[version], shape, dtype, seed=sum(shape))


@pytest.mark.parametrize("version", VERSIONS)
def test_naive_and_fused_options(version):
    fn = VERSIONS[version]
    _check(fn, (1, 9, 2, 12, 40), torch.float32, seed=3, initial=False, final=False)
    _check(fn, (1, 9, 2, 12, 40), torch.float32, seed=4, initial=False, final=True, scale=0.3)
    _check(fn, (1, 9, 2, 12, 40), torch.float16, seed=5, block_v=32)


def test_naive():
    _check(naive_recurrent, (2, 11, 2, 24, 17), torch.bfloat16, seed=6, block_v=16)


def test_fused():
    _check(fused_recurrent, (2, 11, 2, 24, 17), torch.bfloat16, seed=7, block_v=64)


def test_fused_final_state_poisoned():
    q, k, v, h0 = _inputs(1, 8, 2, 10, 20, torch.float32, seed=8)
    f = poisoned(1, 2, 10, 20)
    _, s = fused_recurrent(q, k, v, initial_state=h0, output_final_state=True, final_state_out=f.out, block_v=16)
    f.check("final_state")
    assert_close("final_state", reference_recurrent(q, k, v, initial_state=h0, output_final_state=True)[1], s, 1e-5)


@pytest.mark.parametrize("version", VERSIONS)
def test_strided_inputs(version):
    """Views with padded head and time strides (unit stride in the last dimension) are read correctly."""
    g = generator(9)
    big_q = randn(2, 12, 3, 40, gen=g)
    big_k = randn(2, 12, 3, 40, gen=g)
    big_v = randn(2, 24, 3, 30, gen=g)
    q, k, v = big_q[..., :14], big_k[..., 3:17], big_v[:, ::2, :, :25]
    o, _ = VERSIONS[version](q, k, v, block_v=16)
    assert_close("o", reference_recurrent(q, k, v)[0], o, 1e-5)


def test_state_carries_over():
    """Running two halves with the first half's final state equals running the whole sequence."""
    q, k, v, h0 = _inputs(1, 20, 2, 9, 11, torch.float32, seed=10)
    whole, s_whole = fused_recurrent(q, k, v, initial_state=h0, output_final_state=True)
    o1, s1 = naive_recurrent(q[:, :7], k[:, :7], v[:, :7], initial_state=h0, output_final_state=True)
    o2, s2 = fused_recurrent(q[:, 7:], k[:, 7:], v[:, 7:], initial_state=s1, output_final_state=True)
    assert_close("o", whole, torch.cat([o1, o2], dim=1), 1e-5)
    assert_close("final_state", s_whole, s2, 1e-5)


@triton.jit
def _output_before_update_kernel(q_ptr, k_ptr, v_ptr, o_ptr, scale, T, H, K, V,
                                 stride_t, stride_vt, BK: tl.constexpr, BV: tl.constexpr):
    i_v, i_bh = tl.program_id(axis=0), tl.program_id(axis=1)
    i_b, i_h = i_bh // H, i_bh % H
    offs_k = tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    mask_k, mask_v = offs_k < K, offs_v < V
    s = tl.zeros([BK, BV], dtype=tl.float32)
    for t in range(T):
        q = tl.load(q_ptr + i_b * T * stride_t + t * stride_t + i_h * K + offs_k, mask=mask_k, other=0.0)
        k = tl.load(k_ptr + i_b * T * stride_t + t * stride_t + i_h * K + offs_k, mask=mask_k, other=0.0)
        v = tl.load(v_ptr + i_b * T * stride_vt + t * stride_vt + i_h * V + offs_v, mask=mask_v, other=0.0)
        o = tl.sum(q.to(tl.float32)[:, None] * s, axis=0) * scale
        s += k.to(tl.float32)[:, None] * v.to(tl.float32)[None, :]
        tl.store(o_ptr + i_b * T * stride_vt + t * stride_vt + i_h * V + offs_v, o, mask=mask_v)


def _output_before_update(q, k, v, *, scale=None, initial_state=None, output_final_state=False, out=None):
    """The fused recurrence with an off-by-one in time: o_t = scale · q_tᵀ S_{t-1} (it skips k_t v_tᵀ)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    o = torch.empty_like(v) if out is None else out
    BK, BV = triton.next_power_of_2(K), 16
    _output_before_update_kernel[(triton.cdiv(V, BV), B * H)](q, k, v, o, K**-0.5 if scale is None else scale,
                                                            T, H, K, V, H * K, H * V, BK=BK, BV=BV)
    return o, None


def test_broken_kernel_fails():
    with pytest.raises(AssertionError, match="relative error"):
        _check(_output_before_update, (1, 13, 2, 20, 33), torch.float32, seed=11, initial=False, final=False)


def test_bad_input():
    q, k, v, h0 = _inputs(1, 5, 2, 8, 6, torch.float32, seed=12)
    for fn in VERSIONS.values():
        check_bad_input(fn, q.half(), k, v, match="dtype")
        check_bad_input(fn, q.to(torch.int32), k.to(torch.int32), v.to(torch.int32), match="dtype")
        check_bad_input(fn, q[0], k[0], v[0], match="4 dimensions")
        check_bad_input(fn, q, k[:, :4], v, match="one shape")
        check_bad_input(fn, q, k, v[:, :4], match="[B, T, H, V]")
        check_bad_input(fn, q.transpose(2, 3).contiguous().transpose(2, 3), k, v, match="unit stride")
        check_bad_input(fn, q, k, v, initial_state=h0[..., :5], match="initial_state must be")
        check_bad_input(fn, q, k, v, initial_state=h0.transpose(2, 3), match="contiguous")
        check_bad_input(fn, q, k, v, scale="0.5", match="scale")
        check_bad_input(fn, q, k, v, block_v=24, match="block_v")
        check_bad_input(fn, q, k, v.to("meta"), match="meta")
        check_bad_input(fn, q, k, v, out=torch.empty(1, 5, 2, 7, device=DEVICE), match="shape")
        check_bad_input(fn, q[:, :0], k[:, :0], v[:, :0], match="at least 1")
        big = randn(1, 2, 1, 300, seed=13)
        check_bad_input(fn, big, big, randn(1, 2, 1, 4, seed=14), match="limit")


def test_bytes_moved():
    B, T, H, K, V = 4, 2048, 16, 64, 64
    io = B * T * H * (2 * K + 2 * V) * 2
    assert naive.bytes_moved(B, T, H, K, V, 2) == io + B * H * T * 2 * K * V * 4
    assert fused.bytes_moved(B, T, H, K, V, 2, block_v=V) == io
    assert fused.bytes_moved(B, T, H, K, V, 2, block_v=16) == B * T * H * (2 * K * 4 + 2 * V) * 2
    assert naive.bytes_moved(B, T, H, K, V, 2) > 10 * fused.bytes_moved(B, T, H, K, V, 2, block_v=32)


GPU_SHAPES = [_shape(sizes("recurrent")) if ON_GPU else (4, 2048, 16, 64, 64), (2, 1000, 8, 128, 128),
              (2, 777, 4, 100, 72)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", GPU_SHAPES)
@pytest.mark.parametrize("version", VERSIONS)
def test_recurrent_gpu(version, shape, dtype):
    _check(VERSIONS[version], shape, dtype, seed=sum(shape))


@pytest.mark.slow
def test_kernels_compile_for_sm90():
    """Both recurrent kernels compile for an H100/H200 at the tile shapes the wrappers pick (no GPU needed)."""
    flags = dict(USE_INITIAL_STATE=True, STORE_FINAL_STATE=True)
    compile_for_sm90([
        ("kernels.recurrent.naive", "_naive_recurrent_kernel", dict(BK=64, BV=32), {}),
        ("kernels.recurrent.fused", "_fused_recurrent_kernel", dict(BK=64, BV=32, **flags), {}),
        ("kernels.recurrent.fused", "_fused_recurrent_kernel", dict(BK=128, BV=16, **flags), {}),
        ("kernels.recurrent.fused", "_fused_recurrent_kernel", dict(BK=256, BV=16, **flags), {}),
        ("kernels.recurrent.prefetch", "_prefetch_recurrent_kernel", dict(BK=64, BV=32, **flags), {}),
    ], dtypes=("bf16",), scalars={"scale": "fp32", "s_ptr": "*fp32", "h0_ptr": "*fp32", "ht_ptr": "*fp32"})
