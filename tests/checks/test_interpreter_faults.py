"""Triton 3.6's interpreter computes bf16 wrongly; each fault is pinned here on the unpatched interpreter (a Triton
that fixes one fails its ``test_fault_*``, and the workaround for it can go), and ``kernels.checks.interp`` must
make each right, as the check engine runs kernels."""

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from kernels.checks.bounds import run_checked
from kernels.checks.interp import FAULTS, bf16_fixed, to_bf16, to_f32


def interpreted(kernel):
    """The kernel run by the interpreter on CPU tensors, whatever mode this process is in."""
    return kernel if isinstance(kernel, InterpretedFunction) else InterpretedFunction(kernel.fn)


@triton.jit
def _arith(x_ptr, y_ptr, o_ptr, B: tl.constexpr):
    r = tl.arange(0, B)
    x = tl.load(x_ptr + r)
    y = tl.load(y_ptr + r)
    tl.store(o_ptr + r, (x + y) * x - y / 2)


@triton.jit
def _compare(x_ptr, y_ptr, o_ptr, B: tl.constexpr):
    r = tl.arange(0, B)
    tl.store(o_ptr + r, (tl.load(x_ptr + r) < tl.load(y_ptr + r)).to(tl.float32))


@triton.jit
def _dot(a_ptr, b_ptr, c_ptr, B: tl.constexpr):
    r = tl.arange(0, B)
    a = tl.load(a_ptr + r[:, None] * B + r[None, :])
    b = tl.load(b_ptr + r[:, None] * B + r[None, :])
    tl.store(c_ptr + r[:, None] * B + r[None, :], tl.dot(a, b))


@triton.jit
def _reduce(x_ptr, o_ptr, B: tl.constexpr):
    r = tl.arange(0, B)
    x = tl.load(x_ptr + r)
    tl.store(o_ptr, tl.sum(x, axis=0))
    tl.store(o_ptr + 1, tl.max(x, axis=0))


@triton.jit
def _cast(x_ptr, h_ptr, f_ptr, B: tl.constexpr):
    r = tl.arange(0, B)
    x = tl.load(x_ptr + r)
    tl.store(h_ptr + r, x.to(tl.float16))
    tl.store(f_ptr + r, tl.load(f_ptr + r).to(tl.bfloat16).to(tl.float32))


@triton.jit
def _constant(x_ptr, o_ptr, B: tl.constexpr):
    r = tl.arange(0, B)
    tl.store(o_ptr + r, tl.load(x_ptr + r) * 0.5)


def _bf16(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def _run(kernel, *args, fixed: bool, **meta):
    """One launch in the interpreter as the check engine runs one, bounds-checked (``run_checked``, which also lets a
    process that compiles for a GPU interpret Triton's own @jit helpers: ``tl.sum``, ``tl.max``)."""
    def launch():
        interpreted(kernel)[(1,)](*args, **meta)

    if fixed:
        with bf16_fixed():
            run_checked(launch)
    else:
        run_checked(launch)


def _arith_error(fixed):
    x, y = _bf16(16, seed=0), _bf16(16, seed=1)
    o = torch.empty_like(x)
    _run(_arith, x, y, o, B=16, fixed=fixed)
    xf, yf = x.float(), y.float()
    return ((o.float() - ((xf + yf) * xf - yf / 2)).abs().max() / ((xf + yf) * xf).abs().max()).item()


def _compare_wrong(fixed):
    x, y = _bf16(64, seed=2), _bf16(64, seed=3)
    o = torch.empty(64)
    _run(_compare, x, y, o, B=64, fixed=fixed)
    return int((o != (x < y).float()).sum())


def _dot_error(fixed):
    a, b = _bf16(16, 16, seed=4), _bf16(16, 16, seed=5)
    c = torch.empty(16, 16)
    _run(_dot, a, b, c, B=16, fixed=fixed)
    ref = a.float() @ b.float()
    return ((c - ref).norm() / ref.norm()).item()


def _reduce_error(fixed):
    x = _bf16(32, seed=6)
    o = torch.empty(2, dtype=torch.bfloat16)
    _run(_reduce, x, o, B=32, fixed=fixed)
    want = torch.tensor([x.float().sum(), x.float().max()])
    return (o.float() - want).abs().max().item()


def _cast_errors(fixed):
    x = _bf16(16, seed=7)
    h = torch.empty(16, dtype=torch.float16)
    f = torch.full((16,), 1 + 3 * 2**-9)  # past the midpoint of 1 and 1 + 2^-7: rounds up
    _run(_cast, x, h, f, B=16, fixed=fixed)
    return (h.float() - x.float()).abs().max().item(), f[0].item()


def _constant_result(fixed):
    x = _bf16(16, seed=8)
    o = torch.empty_like(x)
    _run(_constant, x, o, B=16, fixed=fixed)
    return (o.float() - x.float() * 0.5).abs().max().item()


def test_every_fault_has_a_pin():
    assert set(FAULTS) == {"arithmetic", "compare", "dot", "reduce", "cast", "constant"}


def test_fault_arithmetic():
    assert _arith_error(fixed=False) > 1.0  # bit patterns added as integers


def test_fault_compare():
    with pytest.raises(Exception, match="reshape"):  # a bool result labelled bf16: its cast breaks
        _compare_wrong(fixed=False)


def test_fault_dot():
    assert _dot_error(fixed=False) > 1.0  # relative error around 1e10


def test_fault_reduce():
    assert _reduce_error(fixed=False) > 1.0


def test_fault_cast():
    to_half, rounded = _cast_errors(fixed=False)
    assert to_half < 1e-3  # bf16 -> fp16 goes through fp32 and is right
    assert rounded == 1.0  # fp32 -> bf16 truncates: 1 + 3·2^-9 rounds to 1 + 2^-7 on a GPU


def test_fault_constant():
    with pytest.raises(Exception, match="get_bf16"):
        _constant_result(fixed=False)


def test_the_workaround_computes_bf16_as_a_gpu_does():
    assert _arith_error(fixed=True) < 2**-7
    assert _compare_wrong(fixed=True) == 0
    assert _dot_error(fixed=True) < 1e-6  # bf16 inputs, fp32 products and sums
    assert _reduce_error(fixed=True) < 0.1
    to_half, rounded = _cast_errors(fixed=True)
    assert to_half < 1e-3 and rounded == 1 + 2**-7
    assert _constant_result(fixed=True) == 0.0


def test_the_workaround_is_undone():
    before = _arith_error(fixed=False)
    _arith_error(fixed=True)
    assert _arith_error(fixed=False) == before


def test_bf16_rounding_is_to_nearest_even():
    values = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -2.5, np.inf, -np.inf, 3e38, np.nan], dtype=np.float32)
    want = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    got = to_bf16(values)
    assert np.array_equal(got[:-1], want[:-1]) and np.isnan(to_f32(got[-1:]))[0]
    back = torch.from_numpy(want.view(np.int16)).view(torch.bfloat16).float().numpy()
    assert np.array_equal(to_f32(want), back, equal_nan=True)


def test_other_dtypes_are_untouched():
    x, y = torch.randn(16), torch.randn(16)
    o_plain, o_fixed = torch.empty(16), torch.empty(16)
    interpreted(_arith)[(1,)](x, y, o_plain, B=16)
    with bf16_fixed():
        interpreted(_arith)[(1,)](x, y, o_fixed, B=16)
    assert torch.equal(o_plain, o_fixed)
