"""Vector add: the naive kernel against the float64 oracle, its input checks, and a broken twin that must fail."""

import pytest
import torch
import triton
import triton.language as tl

from kernels.device import DEVICE, ON_GPU, sizes
from kernels.testing import assert_close, check_bad_input, poisoned, randn, tolerance
from kernels.vector_add import naive_vector_add, reference_vector_add
from kernels.vector_add.naive import bytes_moved

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@triton.jit
def _dropped_tail_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def _dropped_tail(x, y, *, block_size=1024, out=None):
    """The naive kernel launched on ``n // BLOCK_SIZE`` programs: the tail block is never written."""
    out = torch.empty_like(x) if out is None else out
    _dropped_tail_kernel[(x.numel() // block_size,)](x, y, out, x.numel(), BLOCK_SIZE=block_size)
    return out


def _check(fn, n, dtype, seed, block_size):
    x = randn(n, dtype=dtype, seed=seed)
    y = randn(n, dtype=dtype, seed=seed + 1)
    p = poisoned(n, dtype=dtype)
    fn(x, y, block_size=block_size, out=p.out)
    p.check("naive_vector_add")
    assert_close("naive_vector_add", reference_vector_add(x, y), p.out, tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,block_size", [(1, 16), (1000, 128), (1025, 1024), (4099, 256)])
def test_naive(n, block_size, dtype):
    _check(naive_vector_add, n, dtype, seed=n, block_size=block_size)


def test_naive_allocates_output():
    x, y = randn(777, seed=1), randn(777, seed=2)
    out = naive_vector_add(x, y)
    assert out.shape == x.shape and out.dtype == x.dtype
    assert_close("naive_vector_add", reference_vector_add(x, y), out, tolerance(torch.float32))


def test_naive_multidimensional():
    x, y = randn(7, 13, 11, seed=3), randn(7, 13, 11, seed=4)
    assert_close("naive_vector_add", reference_vector_add(x, y), naive_vector_add(x, y, block_size=64), 1e-6)


def test_broken_kernel_fails():
    with pytest.raises(AssertionError, match="never written"):
        _check(_dropped_tail, 1000, torch.float32, seed=5, block_size=128)


def test_bad_input():
    x, y = randn(100, seed=6), randn(100, seed=7)
    check_bad_input(naive_vector_add, x.to(torch.int32), y.to(torch.int32), match="dtype")
    check_bad_input(naive_vector_add, x, y.half(), match="dtype")
    check_bad_input(naive_vector_add, x, randn(99, seed=8), match="shape")
    check_bad_input(naive_vector_add, x, y, block_size=100, match="power of two")
    check_bad_input(naive_vector_add, x, y, out=torch.empty(50, device=DEVICE), match="shape")
    check_bad_input(naive_vector_add, x.view(10, 10).t(), y.view(10, 10), match="contiguous")
    check_bad_input(naive_vector_add, x, y.to("meta"), match="meta")
    check_bad_input(naive_vector_add, x.tolist(), y, match="torch.Tensor")


def test_bytes_moved():
    assert bytes_moved(1000, 4) == 12_000
    assert bytes_moved(1000, 2) == 6_000


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_naive_gpu(dtype):
    assert ON_GPU
    _check(naive_vector_add, sizes("vector_add")["n"], dtype, seed=11, block_size=1024)
