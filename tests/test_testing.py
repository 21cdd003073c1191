"""The harness itself: tolerances, inputs, NaN poisoning, assert_close's messages, the device decision, and the
interpreter's bf16 ``tl.dot`` trap."""

import math
import os

import pytest
import torch
import triton
import triton.language as tl

import kernels
from kernels import device
from kernels.device import DEVICE, INTERPRET, ON_GPU, pick, sizes, upcast_for_dot
from kernels.matmul import reference_matmul, tiled_matmul
from kernels.testing import (
    TOLERANCE,
    assert_close,
    check_bad_input,
    generator,
    poisoned,
    randn,
    rel_error,
    tolerance,
)


def test_tolerance_table():
    assert tolerance(torch.float32) == TOLERANCE["ieee"] == 1e-5
    assert tolerance(torch.float32, tf32=True) == TOLERANCE["tf32"]
    assert tolerance(torch.float16) == TOLERANCE["fp16"]
    assert tolerance(torch.bfloat16) == TOLERANCE["bf16"]
    assert tolerance(torch.float16, tf32=True) == TOLERANCE["fp16"]  # tf32 concerns fp32 inputs only
    assert tolerance(torch.float64) == TOLERANCE["ieee"]
    assert TOLERANCE["ieee"] < TOLERANCE["tf32"] and TOLERANCE["fp16"] < TOLERANCE["bf16"]
    with pytest.raises(TypeError, match="int32"):
        tolerance(torch.int32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_tolerance_covers_one_rounding(dtype):
    """Rounding a float64 result once to ``dtype`` stays within that dtype's tolerance, with room to spare."""
    ref = torch.randn(10_000, generator=generator(0), dtype=torch.float64)
    assert rel_error(ref.to(dtype), ref) < tolerance(dtype) / 2


def test_randn_is_reproducible():
    a = randn(3, 5, seed=7)
    assert torch.equal(a, randn(3, 5, seed=7))
    assert not torch.equal(a, randn(3, 5, seed=8))
    assert a.device.type == DEVICE.type and a.dtype == torch.float32
    assert randn(4, dtype=torch.bfloat16, seed=1).dtype == torch.bfloat16
    g = generator(3)
    first, second = randn(6, gen=g), randn(6, gen=g)
    assert not torch.equal(first, second)
    assert torch.allclose(randn(1000, seed=2, scale=3.0).std().cpu(), torch.tensor(3.0), rtol=0.1)


def test_poisoned_starts_nan_and_detects_unwritten():
    p = poisoned(4, 5, guard=8)
    assert p.out.shape == (4, 5) and p.buffer.numel() == 20 + 16
    assert torch.isnan(p.buffer).all()
    assert p.unwritten() == 20
    with pytest.raises(AssertionError, match="20 of 20 elements were never written"):
        p.check()
    p.out[:, :4] = 1.0
    with pytest.raises(AssertionError, match="4 of 20"):
        p.check("c")
    p.out.fill_(2.0)
    p.check()


def test_poisoned_detects_guard_writes():
    for where in (0, -1):
        p = poisoned(10, guard=4, dtype=torch.float16)
        p.out.fill_(0.0)
        p.buffer[where] = 0.0
        with pytest.raises(AssertionError, match="out of bounds"):
            p.check("y")
    p = poisoned(10, guard=4)
    p.buffer[3] = 1.0  # the guard element just before the output
    p.out.fill_(0.0)
    assert not p.guards_intact()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_poisoned_sees_a_nan_stored_into_a_guard_band(dtype):
    """An unmasked kernel that loads NaN padding and stores it past the end writes NaN into the guard: the
    guard's own bit pattern must show it."""
    p = poisoned(10, guard=4, dtype=dtype)
    p.out.fill_(1.0)
    p.check()  # intact
    x = torch.full((3,), float("nan"), dtype=dtype)
    p.buffer[-2] = x[0] + x[1]  # a NaN computed from NaN inputs, as a stray store would write
    assert torch.isnan(p.buffer[-2]) and torch.isnan(p.buffer[: p.guard]).all()  # NaN either way
    with pytest.raises(AssertionError, match="out of bounds"):
        p.check("y")


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
def test_poisoned_integer_outputs(dtype):
    """Integer and bool outputs (the engine allocates every exercise's outputs here) get their own poison, and a
    stray write on either side is counted."""
    p = poisoned(6, guard=3, dtype=dtype)
    assert p.stray_writes() == (0, 0) and p.guards_intact()
    p.buffer[1] = 0
    p.buffer[-1] = 0
    p.buffer[-2] = 0
    assert p.stray_writes() == (1, 2) and not p.guards_intact()


def test_rel_error():
    ref = torch.tensor([3.0, 4.0])
    assert rel_error(ref, ref) == 0
    assert rel_error(torch.tensor([3.0, 4.5]), ref) == pytest.approx(0.1)
    assert rel_error(torch.tensor([math.nan, 4.0]), ref) == math.inf
    assert rel_error(torch.tensor([0.5]), torch.tensor([0.0])) == 0.5  # zero reference: absolute error
    with pytest.raises(AssertionError, match="shape"):
        rel_error(torch.zeros(3), torch.zeros(4))


def test_assert_close_messages():
    ref = torch.arange(1.0, 7.0, dtype=torch.float64).view(2, 3)
    out = ref.clone()
    assert assert_close("ok", ref, out, 1e-12) == 0
    out[1, 2] += 1.0
    with pytest.raises(AssertionError) as e:
        assert_close("o", ref, out, 1e-3)
    msg = str(e.value)
    assert msg.startswith("o: relative error") and "tolerance 1.0e-03" in msg and "ratio" in msg
    assert "(1, 2)" in msg and "got 7" in msg and "expected 6" in msg
    out[0, 1] = math.nan
    with pytest.raises(AssertionError, match=r"1 of 6 elements are NaN/inf \(first at \(0, 1\)\)"):
        assert_close("o", ref, out, 1.0)
    with pytest.raises(AssertionError, match="does not match"):
        assert_close("o", ref, ref[0], 1.0)


def test_assert_close_compares_in_float64():
    ref = torch.full((100,), 1.0 + 2**-9 + 2**-40, dtype=torch.float64)
    assert assert_close("x", ref, ref.float(), 1e-5) < 1e-9
    with pytest.raises(AssertionError):
        assert_close("x", ref, ref.bfloat16(), 1e-5)


def test_check_bad_input():
    def raises(kind, msg):
        def fn(*a, **k):
            raise kind(msg)
        return fn

    check_bad_input(raises(ValueError, "x has dtype int32"), match="DTYPE")
    check_bad_input(raises(TypeError, "bad stride"), match="stride")
    with pytest.raises(AssertionError, match="does not mention"):
        check_bad_input(raises(ValueError, "shape is wrong"), match="dtype")
    with pytest.raises(AssertionError, match="succeeded"):
        check_bad_input(lambda: None, match="dtype")
    with pytest.raises(RuntimeError):
        check_bad_input(raises(RuntimeError, "dtype"), match="dtype")


def test_device_decision():
    assert DEVICE.type == ("cuda" if ON_GPU else "cpu")
    assert kernels.MODE == ("gpu" if ON_GPU else "interpreter")
    assert ON_GPU != INTERPRET or (INTERPRET and torch.cuda.is_available())
    if not torch.cuda.is_available():
        assert INTERPRET and os.environ["TRITON_INTERPRET"] == "1"
    assert kernels.describe().startswith("GPU:") == ON_GPU
    assert pick(cpu="small", gpu="big") == ("big" if ON_GPU else "small")


def test_sizes():
    s = sizes("matmul")
    assert set(s) == {"M", "N", "K"}
    s["M"] = -1
    assert sizes("matmul")["M"] != -1  # a fresh dict every call
    with pytest.raises(KeyError, match="known"):
        sizes("no_such_topic")
    for topic in ("vector_add", "memory", "recurrent", "matmul"):
        assert all(isinstance(v, int) and v > 0 for v in sizes(topic).values())


def test_gpu_sizes_are_not_round():
    """The GPU shapes leave tails: they are neither powers of two nor block multiples."""
    gpu = {t: device._SIZES[t]["gpu"] for t in ("vector_add", "memory", "matmul")}
    assert gpu["vector_add"]["n"] % 2 and gpu["memory"]["n"] % 2
    assert all(v % 16 for v in gpu["matmul"].values())


def test_upcast_for_dot():
    assert upcast_for_dot(torch.bfloat16) == INTERPRET
    assert not upcast_for_dot(torch.float16) and not upcast_for_dot(torch.float32)


@triton.jit
def _raw_dot_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
    b = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :])
    tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], tl.dot(a, b))


def test_interpreter_bf16_dot_trap_is_handled():
    """A raw bf16 ``tl.dot`` is wrong under the interpreter; the package's matmul upcasts and stays right."""
    a = randn(32, 32, dtype=torch.bfloat16, seed=1)
    b = randn(32, 32, dtype=torch.bfloat16, seed=2)
    ref = reference_matmul(a, b)
    raw = torch.empty(32, 32, dtype=torch.float32, device=DEVICE)
    _raw_dot_kernel[(1,)](a, b, raw, BLOCK=32)
    if INTERPRET:
        assert not rel_error(raw, ref) <= 1.0, "the interpreter's bf16 tl.dot is right now: revisit upcast_for_dot"
    else:
        assert_close("raw bf16 tl.dot", ref, raw, tolerance(torch.bfloat16))
    assert_close("tiled_matmul bf16", ref, tiled_matmul(a, b, block_m=16, block_n=16, block_k=16),
                 tolerance(torch.bfloat16))
    fp16 = torch.empty(32, 32, dtype=torch.float32, device=DEVICE)
    _raw_dot_kernel[(1,)](a.half(), b.half(), fp16, BLOCK=32)
    assert_close("raw fp16 tl.dot", reference_matmul(a.half(), b.half()), fp16, tolerance(torch.float16))



def test_repoison_restores_a_fresh_output_and_keeps_the_guards():
    from kernels.testing import guard_changed, poisoned, repoison

    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32):
        p = poisoned(7, dtype=dtype, guard=4, device="cpu")
        fresh = p.buffer.clone()
        p.out.fill_(3)
        p.buffer[-1] = 5  # a stray store into the guard band
        repoison(p)
        assert torch.equal(p.out.view(torch.int8), fresh[4:11].view(torch.int8))
        assert not guard_changed(p.buffer[:4]).any() and guard_changed(p.buffer[-1:]).all()
