"""Matmul: naive and tiled kernels against the float64 oracle, the reuse arithmetic, input checks, a broken twin."""

import pytest
import torch
import triton
import triton.language as tl
from sm90 import compile_for_sm90

from kernels.device import DEVICE, ON_GPU, sizes
from kernels.matmul import naive as naive_mod
from kernels.matmul import naive_matmul, reference_matmul, reuse, tiled_matmul
from kernels.matmul import tiled as tiled_mod
from kernels.testing import assert_close, check_bad_input, generator, poisoned, randn, tolerance

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
_S = sizes("matmul")
SHAPES = [(_S["M"], _S["N"], _S["K"]) if not ON_GPU else (45, 37, 70), (1, 1, 1), (17, 50, 33), (64, 16, 100)]
SMALL = dict(block_m=16, block_n=16, block_k=16)


def _check(fn, M, N, K, dtype, seed, *, tf32=False, transpose_a=False, **kw):
    g = generator(seed)
    a = randn(K, M, dtype=dtype, gen=g).t() if transpose_a else randn(M, K, dtype=dtype, gen=g)
    b = randn(K, N, dtype=dtype, gen=g)
    p = poisoned(M, N, dtype=dtype)
    c = fn(a, b, out=p.out, **kw)
    p.check("c")
    assert c.data_ptr() == p.out.data_ptr() and c.dtype == dtype
    assert_close("c", reference_matmul(a, b), c, tolerance(dtype, tf32=tf32))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_naive(shape, dtype):
    _check(naive_matmul, *shape, dtype, seed=sum(shape), block_n=16, block_k=32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_tiled(shape, dtype):
    _check(tiled_matmul, *shape, dtype, seed=sum(shape) + 1, **SMALL, group_m=2)


@pytest.mark.parametrize("precision", ["tf32", "ieee"])
@pytest.mark.parametrize("shape", SHAPES[:3])
def test_tiled_fp32(shape, precision):
    _check(tiled_matmul, *shape, torch.float32, seed=sum(shape) + 2, tf32=precision == "tf32",
           input_precision=precision, **SMALL)


@pytest.mark.parametrize("group_m", [1, 3, 8])
def test_tiled_grouping_covers_every_tile(group_m):
    """Any GROUP_M, including ones that do not divide the tile rows, maps the programs onto every tile once."""
    _check(tiled_matmul, 100, 70, 20, torch.float16, seed=group_m, block_m=16, block_n=16, block_k=16,
           group_m=group_m)


def test_tiled_defaults_and_layouts():
    _check(tiled_matmul, 70, 45, 40, torch.float16, seed=3, transpose_a=True)
    _check(naive_matmul, 30, 20, 40, torch.bfloat16, seed=4, transpose_a=True)
    a, b = randn(33, 20, seed=5), randn(20, 18, seed=6)
    assert_close("c", reference_matmul(a, b), tiled_matmul(a, b), tolerance(torch.float32, tf32=True))
    assert_close("c", reference_matmul(a, b), naive_matmul(a, b), tolerance(torch.float32))


def test_out_with_strides():
    a, b = randn(40, 24, dtype=torch.float16, seed=7), randn(24, 36, dtype=torch.float16, seed=8)
    out = torch.full((36, 40), float("nan"), dtype=torch.float16, device=DEVICE).t()
    tiled_matmul(a, b, out=out, **SMALL)
    assert_close("c", reference_matmul(a, b), out, tolerance(torch.float16))


@triton.jit
def _dropped_k_tail_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m, pid_n = tl.program_id(axis=0), tl.program_id(axis=1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, (K // BLOCK_K) * BLOCK_K, BLOCK_K):
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k0 + offs_k)[None, :], mask=offs_m[:, None] < M, other=0.0)
        b = tl.load(b_ptr + (k0 + offs_k)[:, None] * stride_bk + offs_n[None, :], mask=offs_n[None, :] < N, other=0.0)
        acc = tl.dot(a, b, acc)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


def _dropped_k_tail(a, b, *, out, block_m=16, block_n=16, block_k=16, **_):
    """A tiled matmul whose K loop stops at the last whole block: the K % BLOCK_K tail is never summed."""
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    _dropped_k_tail_kernel[grid](a, b, out, M, N, K, a.stride(0), b.stride(0), out.stride(0),
                                 BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return out


def test_broken_kernel_fails():
    _check(_dropped_k_tail, 40, 30, 64, torch.float16, seed=9)  # K a multiple of BLOCK_K: the bug hides
    with pytest.raises(AssertionError, match="relative error"):
        _check(_dropped_k_tail, 40, 30, 70, torch.float16, seed=9)


def test_reuse():
    naive = reuse(1, 64, 64, 4096, 4096, 4096)
    assert naive.b_loads == 4096 and naive.a_loads == 64
    tiled = reuse(128, 256, 64, 4096, 4096, 4096)
    assert (tiled.a_loads, tiled.b_loads) == (16, 32)
    assert tiled.flops == 2 * 4096**3
    assert tiled.bytes == (4096**2 * (16 + 32 + 1)) * 2
    assert tiled.intensity == pytest.approx(tiled.flops / tiled.bytes)
    assert tiled.intensity > 20 * naive.intensity
    assert tiled.sram_bytes == (128 * 64 + 64 * 256) * 2
    assert reuse(128, 128, 32, 4097, 4097, 4097).a_loads == 33  # a partial tile still costs a load
    assert reuse(16, 16, 16, 1, 1, 1).loads_per_element == 1
    assert "FLOP/byte" in str(tiled)
    with pytest.raises(ValueError, match="BLOCK_M"):
        reuse(0, 16, 16, 8, 8, 8)


def test_bytes_moved_matches_reuse():
    M, N, K = 1000, 900, 800
    assert tiled_mod.bytes_moved(M, N, K, 2, block_m=128, block_n=256) == reuse(128, 256, 64, M, N, K).bytes
    assert naive_mod.bytes_moved(M, N, K, 2, block_n=64) == reuse(1, 64, 64, M, N, K).bytes


def test_bad_input():
    a, b = randn(20, 30, seed=10), randn(30, 10, seed=11)
    for fn in (naive_matmul, tiled_matmul):
        check_bad_input(fn, a, b.half(), match="dtype")
        check_bad_input(fn, a.to(torch.int32), b.to(torch.int32), match="dtype")
        check_bad_input(fn, a, randn(29, 10, seed=12), match="inner dimensions")
        check_bad_input(fn, a[None], b, match="2 dimensions")
        check_bad_input(fn, a, b.to("meta"), match="meta")
        check_bad_input(fn, a, b, out=torch.empty(20, 11, device=DEVICE), match="shape")
        check_bad_input(fn, a, b, out=torch.empty(20, 10, device=DEVICE, dtype=torch.float16), match="dtype")
        check_bad_input(fn, a[:0], b, match="at least 1")
    check_bad_input(naive_matmul, a, b, block_n=48, match="power of two")
    check_bad_input(tiled_matmul, a, b, block_k=8, match="power of two")
    check_bad_input(tiled_matmul, a, b, block_m=512, match="limit")
    check_bad_input(tiled_matmul, a, b, input_precision="fp64", match="input_precision")
    check_bad_input(tiled_matmul, a.half(), b.half(), input_precision="ieee", match="fp32")
    check_bad_input(tiled_matmul, a, b, group_m=0, match="group_m")


GPU_SHAPES = [(_S["M"], _S["N"], _S["K"]) if ON_GPU else (4099, 4101, 4103), (1000, 3000, 257), (8192 + 1, 128, 64)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", GPU_SHAPES)
def test_tiled_gpu(shape, dtype):
    _check(tiled_matmul, *shape, dtype, seed=21)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["tf32", "ieee"])
def test_tiled_fp32_gpu(precision):
    _check(tiled_matmul, *GPU_SHAPES[0], torch.float32, seed=22, tf32=precision == "tf32", input_precision=precision)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_naive_gpu(dtype):
    _check(naive_matmul, 2048 + 3, 1024 + 5, 2048 + 7, dtype, seed=23)


@pytest.mark.slow
def test_kernels_compile_for_sm90():
    """Both matmul kernels compile for an H100/H200; fp32 dots become TF32 MMAs only when asked."""
    tiled = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, UPCAST=False)
    ptx = compile_for_sm90([("kernels.matmul.naive", "_naive_matmul_kernel", dict(BLOCK_N=64, BLOCK_K=64), {}),
                            ("kernels.matmul.tiled", "_tiled_matmul_kernel", {**tiled, "DOT_PRECISION": "tf32"}, {}),
                            ("kernels.matmul.tiled", "_tiled_matmul_kernel", {**tiled, "DOT_PRECISION": "ieee"}, {})])
    assert "tf32" in ptx["1/fp32"] and "tf32" not in ptx["2/fp32"]
