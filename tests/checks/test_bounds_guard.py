"""``guard_launches`` (kernels/checks/bounds.py): a notebook's own launches under the interpreter are bounds-checked,
so a learner's out-of-bounds store stops with an error naming it instead of corrupting the kernel's heap."""

import warnings

import pytest
import torch
import triton
import triton.language as tl

from kernels.checks.bounds import OutOfBoundsError, UndefinedLanesWarning, guard_launches, run_checked
from kernels.device import INTERPRET

pytestmark = pytest.mark.skipif(not INTERPRET, reason="the guard hooks Triton's interpreter")


@triton.jit
def _copy(x_ptr, y_ptr, n, stride_x, EXTRA: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs * stride_x, mask=offs < n + EXTRA, other=0.0)
    tl.store(y_ptr + offs, v, mask=offs < n + EXTRA)


@pytest.fixture
def guard():
    assert guard_launches()
    yield
    guard_launches(False)


def _launch(x, y, n, extra=0, stride=1, block=32):
    _copy[(triton.cdiv(n + extra, block),)](x, y, n, stride, EXTRA=extra, BLOCK=block)


def test_a_store_past_the_end_is_named_and_never_happens(guard):
    n = 97
    storage = torch.full((n + 40,), float("nan"))  # y is a view: what lies after it must stay untouched
    x = torch.randn(n + 40)
    with pytest.raises(OutOfBoundsError) as e:
        _launch(x, storage[:n], n, extra=3)
    text = str(e.value)
    assert text.startswith("_copy: y: out of bounds: the kernel writes 3 element(s) past the end of `y`")
    assert "tl.store(y_ptr + offs" in text.splitlines()[0] and "nothing outside the tensors was touched" in text
    assert "reads 3 element(s) past the end of `x`" not in text  # x is 40 longer: those loads are in bounds
    assert storage[n:].isnan().all(), "the stray lanes were stored"
    assert torch.equal(storage[:n], x[:n])


def test_a_load_through_a_wrong_stride_is_named(guard):
    n = 50
    x, y = torch.randn(n), torch.full((n,), float("nan"))
    with pytest.raises(OutOfBoundsError, match=r"reads .* past the end of `x`"):
        _launch(x, y, n, stride=3)


def test_a_right_kernel_computes_the_same_under_the_guard(guard):
    n = 1001
    x = torch.randn(2 * n)
    guarded = torch.full((n,), float("nan"))
    _launch(x, guarded, n, stride=2)
    guard_launches(False)
    plain = torch.full((n,), float("nan"))
    _launch(x, plain, n, stride=2)
    assert torch.equal(guarded, plain) and torch.equal(plain, x[::2])


def test_a_checked_run_reports_as_before_under_the_guard(guard):
    """The checks' own recorder sees the launch; the guard steps aside instead of raising over it."""
    n = 40
    x, y = torch.randn(n), torch.full((n,), float("nan"))
    _, found = run_checked(lambda: _launch(x, y, n, extra=1))
    assert len(found.problems()) == 2 and found.launches == 1  # x's read and y's write, each once


def test_the_guard_comes_off():
    from triton.runtime.interpreter import InterpretedFunction

    before = InterpretedFunction.run
    assert guard_launches() and InterpretedFunction.run is not before
    assert guard_launches() and guard_launches(False) is False
    assert InterpretedFunction.run is before


@pytest.mark.slow
def test_a_notebook_kernel_survives_a_learners_stray_store():
    """A lesson's setup cell, then a kernel storing 5000 elements past a tensor's end: the cell fails with the
    error, the kernel process lives on and runs the next cell."""
    import nbformat

    from grader.course.run import execute

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import kernels\nfrom kernels.checks import guard_launches\n\n"
                                  "guard_launches()\nprint(kernels.describe())"),
        nbformat.v4.new_code_cell(
            "import torch, triton, triton.language as tl\n\n@triton.jit\n"
            "def fill(out_ptr, n, BLOCK: tl.constexpr):\n"
            "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
            "    tl.store(out_ptr + offs, offs.to(tl.float32))  # no mask\n\n"
            "out = torch.empty(3)\nfill[(5,)](out, 3, BLOCK=1024)"),
        nbformat.v4.new_code_cell("print('still alive', out.shape)"),
    ]
    for i, cell in enumerate(nb.cells):
        cell.id = f"c{i}"
    run = execute(nb, lesson="guard", copy="test", cell_timeout=300)
    assert "OutOfBoundsError" in run.errors.get("c1", ""), run.errors
    assert "c2" not in run.errors
    assert "still alive" in "".join(o.get("text", "") for o in nb.cells[2].outputs)


def test_a_load_through_x_that_lands_in_the_next_tensor_is_outside_x():
    """``tl.load(x_ptr + ...)`` with offsets past x that land in the tensor stored right after it reads outside x:
    the access is judged against the tensor its pointer expression names, not the one the addresses hit."""
    buf = torch.randn(128)
    x, y = buf[:64], buf[64:]
    _, found = run_checked(lambda: _copy[(2,)](x, y, 64, 2, EXTRA=0, BLOCK=32), {x.data_ptr(): "x", y.data_ptr(): "y"})
    text = " ".join(found.problems())
    assert "past the end of `x`" in text and "`y`" not in text, text


@triton.jit
def _sum_rows(x_ptr, out_ptr, n, OTHER: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if OTHER:
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    else:
        x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr, tl.sum(x.to(tl.float32)))
    tl.store(out_ptr + 1 + offs, x, mask=offs < n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_masked_off_lanes_without_other_read_nan_and_are_named(dtype):
    """Compiled, the masked-off lanes of a load without ``other=`` hold whatever the register held; the plain
    interpreter reads 0, hiding a sum over them. Checked, they read NaN, and the load is named once NaN is stored."""
    n = 13
    x = torch.randn(n).to(dtype)
    for other in (True, False):
        out = torch.full((n + 1,), float("nan"), dtype=torch.float32)
        _, found = run_checked(lambda out=out, other=other: _sum_rows[(1,)](x, out, n, OTHER=other, BLOCK=16),
                               {x.data_ptr(): "x"})
        assert torch.equal(out[1:], x.float()), "the lanes inside the mask load as they are"
        if other:
            assert out[0].item() == pytest.approx(x.float().sum().item(), rel=1e-2)
            assert not found.undefined and found.undefined_lines() == []
        else:
            assert out[0].isnan(), "a sum over undefined lanes"
            assert list(found.undefined.values()) == [3]
            (line,) = found.undefined_lines()
            assert "tl.load(x_ptr + offs, mask=offs < n)" in line and "without `other=`" in line


def test_undefined_lanes_that_no_store_keeps_are_not_named():
    n = 13
    x, out = torch.randn(n), torch.full((n + 1,), 5.0)
    _, found = run_checked(lambda: _sum_rows[(1,)](x, out, n, OTHER=False, BLOCK=16))
    assert found.undefined, "the load had masked-off lanes"
    out2 = torch.full((n,), float("nan"))
    _, found = run_checked(lambda: _copy_no_other[(1,)](x, out2, n, BLOCK=16))
    assert found.undefined and not found.nan_stored and found.undefined_lines() == []
    assert torch.equal(out2, x)


@triton.jit
def _copy_no_other(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def test_the_guard_warns_of_a_nan_stored_from_undefined_lanes(guard):
    """In a notebook, a sum over lanes loaded without ``other=`` comes out NaN: the guard says which load."""
    n = 13
    x, out = torch.randn(n), torch.zeros(n + 1)
    with pytest.warns(UndefinedLanesWarning, match=r"_sum_rows: `x = tl.load\(x_ptr \+ offs, mask=offs < n\)`"):
        _sum_rows[(1,)](x, out, n, OTHER=False, BLOCK=16)
    assert out[0].isnan()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _sum_rows[(1,)](x, out, n, OTHER=True, BLOCK=16)
        _copy_no_other[(1,)](x, out, n, BLOCK=16)  # undefined lanes, never stored: nothing to say
