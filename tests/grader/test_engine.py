"""The engine's verdicts on deliberately broken kernels: each failure mode gives a message naming it."""

import runpy
import textwrap

import pytest
import torch
import triton
import triton.language as tl

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
    (lambda ref: lambda b, g, n: (b[g: g + n - 1].copy_(ref[:-1]), None), "exactly index 999 (of 1000)"),
    (lambda ref: lambda b, g, n: (b[g + 64: g + n].copy_(ref[64:]), None), "exactly indices 0-63 (of 1000)"),
    (lambda ref: lambda b, g, n: None, "nothing was written"),
    (lambda ref: lambda b, g, n: (b[g: g + n].copy_(ref), b[g + n].fill_(0)), "wrote out of bounds"),
    (lambda ref: lambda b, g, n: (b[g: g + n].copy_(ref), b[g - 1].fill_(float("nan"))), "wrote out of bounds"),
    (lambda ref: lambda b, g, n: (b[g: g + n].copy_(ref), b[g + 3].add_(1.0)), "relative error"),
])
def test_each_failure_has_its_message(scale_case, fill, match):
    ex, case, cpu, ref = scale_case
    outs = _outs(ex, case, cpu, fill(ref["out"].float()))
    problems = engine.verdict(ex, case, outs, {}, ref)
    assert problems and match in " ".join(problems), problems


def test_a_diagnosis_leads_only_where_the_values_are_off(scale_case):
    """``Exercise.diagnose`` names a mistake when every output is written and finite but off; an unwritten or stray
    output keeps its own message, undiagnosed."""
    import dataclasses

    ex, case, cpu, ref = scale_case
    seen = []

    def diagnose(inputs, got, case, want):
        seen.append(sorted(got))
        return "out: what doubling gives" if torch.allclose(got["out"], 2 * want["out"]) else None

    ex = dataclasses.replace(ex, diagnose=diagnose)
    doubled = _outs(ex, case, cpu, lambda b, g, n: b[g: g + n].copy_(2 * ref["out"].float()))
    problems = engine.verdict(ex, case, doubled, {}, ref, cpu)
    assert problems[0] == "out: what doubling gives" and "relative error" in problems[1], problems
    nudged = _outs(ex, case, cpu, lambda b, g, n: (b[g: g + n].copy_(ref["out"].float()), b[g + 3].add_(1.0)))
    assert "doubling" not in " ".join(engine.verdict(ex, case, nudged, {}, ref, cpu))
    calls = len(seen)
    for fill in (lambda b, g, n: None, lambda b, g, n: (b[g: g + n].copy_(2 * ref["out"].float()), b[g + n].fill_(0))):
        problems = engine.verdict(ex, case, _outs(ex, case, cpu, fill), {}, ref, cpu)
        assert problems and "doubling" not in " ".join(problems)
    assert len(seen) == calls == 2 and seen[0] == ["out"]
    assert engine.verdict(ex, case, doubled, {}, ref) and len(seen) == calls  # no inputs: nothing to diagnose


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
    ("offs < n + 5", False, "writes 5 element(s) past the end of `out`"),
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
    # the part that is not plain data is named where it sits, with its type
    assert "the value['k'][1] has type set" in engine.check_value(ex, ({"k": [1, {2}]}, None), False)
    assert "a key of the value has type tuple" in engine.check_value(ex, ({(1, 2): 3}, None), False)
    assert "the value has type torch.Tensor" in engine.check_value(ex, (torch.zeros(1), None), False)


def test_gpu_only_cases_are_reported_not_run():
    ex = get("90_grader_fixture.row_sum")
    run, skipped = engine.active_cases(ex, True)
    if not torch.cuda.is_available():
        assert skipped == ["M=4 N=100000"] and all(not c.gpu_only for _, c in run)
    assert isinstance(Case("x"), Case)


_TIMED = ["01_memory_hierarchy.copy_speed", "02_naive_hbm_loops.fused_speed", "03_tiled_sram.tile_choice",
          "90_grader_fixture.block_choice"]


@pytest.mark.parametrize("exercise_id", _TIMED)
def test_every_baseline_writes_the_outputs_it_is_compared_on(exercise_id):
    """Timing compares the student's outputs with the baseline's at the timed size: a baseline that leaves its
    (NaN-poisoned) outputs unwritten would fail every correct kernel there. Checked on a small case."""
    ex = get(exercise_id)
    assert ex.performance is not None
    case = ex.visible[0]
    cpu = engine.case_inputs(ex, case, 11)
    inputs, _ = engine.pad_inputs(cpu, "cpu")
    outs = engine.alloc_outputs(ex, case, cpu, device="cpu")
    ex.performance.baseline((), inputs, {k: p.out for k, p in outs.items()}, case)
    ref = engine.reference(ex, case, cpu)
    for name, p in outs.items():
        assert not torch.isnan(p.out).any(), f"{exercise_id}: the baseline left {name} unwritten"
        want = ref[name].double()
        err = ((p.out.double() - want).norm() / want.norm().clamp_min(1e-30)).item()
        assert err < 5e-2, f"{exercise_id}: the baseline's {name} is off by {err:.2e}"


@triton.jit
def _grid_stride_copy(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    start = tl.program_id(0) * BLOCK_SIZE
    for base in range(start, n_elements, tl.num_programs(0) * BLOCK_SIZE):
        offs = base + tl.arange(0, BLOCK_SIZE)
        m = offs < n_elements
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


def test_timing_accepts_a_baseline_that_returns_a_tensor(monkeypatch):
    """``out.copy_(x)`` returns a tensor: timing must treat only a dict as named results (it raised on the H200:
    "Boolean value of Tensor with more than one value is ambiguous"). Timed on the CPU here, by the wall clock."""
    import dataclasses

    import kernels.bench

    ex = get("01_memory_hierarchy.copy_speed")
    small = Case("n=3001 BLOCK_SIZE=256 P=3 fp32", dict(n=3001, BLOCK_SIZE=256, P=3))
    ex = dataclasses.replace(ex, performance=dataclasses.replace(ex.performance, case=small, warmup=0.1, rep=0.1))
    monkeypatch.setattr(kernels.bench, "copy_bandwidth", lambda nbytes=None: 1e12)
    timing = engine.time_performance(ex, (_grid_stride_copy,), 3)
    assert timing["mismatch"] == [] and timing["faults"] == [] and timing["launches"] >= 5
    assert timing["student_ms"] > 0 and timing["baseline_ms"] > 0
