"""The engine's verdicts on deliberately broken kernels: each failure mode gives a message naming it."""

import runpy
import textwrap

import pytest
import torch

from kernels.checks import engine
from kernels.checks.spec import Case, CheckFailed, get


def _outs(ex, case, cpu, fill):
    outs = engine.alloc_outputs(ex, case, cpu, device="cpu")
    p = outs["out"]
    fill(p.buffer, p.guard, p.out.numel())
    return outs


@pytest.fixture
def scale_case():
    ex = get("90_grader_fixture.scale")
    case = ex.visible[0]
    cpu = engine.case_inputs(ex, case, 7)
    return ex, case, cpu, engine.reference(ex, case, cpu)


def test_correct_output_passes(scale_case):
    ex, case, cpu, ref = scale_case
    outs = _outs(ex, case, cpu, lambda b, g, n: b[g: g + n].copy_(ref["out"].float()))
    assert engine.verdict(ex, case, outs, {}, ref) == []


@pytest.mark.parametrize("fill, match", [
    (lambda ref: lambda b, g, n: None, "output not written"),
    (lambda ref: lambda b, g, n: (b[g: g + n - 1].copy_(ref[:-1]), None), "1 of 1000 elements still hold"),
    (lambda ref: lambda b, g, n: (b[g: g + n].copy_(ref), b[g + n].fill_(0)), "wrote out of bounds"),
    (lambda ref: lambda b, g, n: (b[g: g + n].copy_(ref), b[g - 1].fill_(float("nan"))), "wrote out of bounds"),
    (lambda ref: lambda b, g, n: (b[g: g + n].copy_(ref), b[g + 3].add_(1.0)), "relative error"),
])
def test_each_failure_has_its_message(scale_case, fill, match):
    ex, case, cpu, ref = scale_case
    outs = _outs(ex, case, cpu, fill(ref["out"].float()))
    problems = engine.verdict(ex, case, outs, {}, ref)
    assert problems and match in " ".join(problems), problems


def test_inputs_sit_in_nan_padding():
    x = torch.arange(12.0).view(3, 4).t()
    views, bufs = engine.pad_inputs({"x": x, "n": 3}, "cpu")
    v = views["x"]
    assert torch.equal(v, x) and v.stride() == x.stride() and views["n"] == 3
    assert torch.isnan(bufs[0][: v.storage_offset()]).all()
    assert torch.isnan(bufs[0][v.storage_offset() + 12:]).all()


def test_seeds_are_fresh_and_inputs_reproducible():
    ex = get("90_grader_fixture.scale")
    a, b = engine.case_inputs(ex, ex.visible[0], 1), engine.case_inputs(ex, ex.visible[0], 1)
    assert torch.equal(a["x"], b["x"]) and engine.draw_seed() != engine.draw_seed()


def test_perf_verdict_floor_and_speedup():
    ex = get("90_grader_fixture.block_choice")
    ok = {"student_ms": 1.0, "baseline_ms": 0.9, "floor_ms": 0.5, "case": "c"}
    assert engine.perf_verdict(ex, ok) == []
    assert "too slow" in engine.perf_verdict(ex, dict(ok, student_ms=3.0))[0]
    assert "faster than the hardware floor" in engine.perf_verdict(ex, dict(ok, student_ms=0.1))[0]


NOTEBOOK = '''
import kernels
import torch
import triton
import triton.language as tl
from kernels.checks import check


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * alpha, mask=MASK)


RESULT = None
try:
    check("90_grader_fixture.scale", scale_kernel, hidden=HIDDEN)
    RESULT = "passed"
except AssertionError as e:
    RESULT = str(e)
'''


@pytest.mark.parametrize("mask, hidden, want", [
    ("offs < n", False, "passed"),
    ("offs < n + 5", False, "wrote out of bounds"),
    ("offs < n - 1", True, "output not written"),
])
def test_interactive_check_in_the_notebook(tmp_path, mask, hidden, want):
    """``check`` as a notebook calls it: the kernel is defined in ``__main__`` and rebuilt from its source."""
    path = tmp_path / "nb.py"
    path.write_text(textwrap.dedent(NOTEBOOK).replace("MASK", mask).replace("HIDDEN", str(hidden)))
    out = runpy.run_path(str(path), run_name="__main__")
    assert want in out["RESULT"], out["RESULT"]


def test_interactive_check_refuses_a_package_kernel():
    from kernels.memory.copy import _copy_memory_kernel

    with pytest.raises(CheckFailed, match="comes from the module kernels.memory.copy"):
        engine.check("90_grader_fixture.scale", _copy_memory_kernel)


def test_value_rule_and_plain_data():
    ex = get("90_grader_fixture.block_choice")
    assert engine.check_value(ex, ({"BLOCK": 1024}, None), False) is None
    assert "power of two" in engine.check_value(ex, ({"BLOCK": 1000}, None), False)
    assert "plain data" in engine.check_value(ex, (torch.zeros(1), None), False)


def test_gpu_only_cases_are_reported_not_run():
    ex = get("90_grader_fixture.row_sum")
    run, skipped = engine.active_cases(ex, True)
    if not torch.cuda.is_available():
        assert skipped == ["M=4 N=100000"] and all(not c.gpu_only for _, c in run)
    assert isinstance(Case("x"), Case)
