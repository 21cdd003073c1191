"""The check engine at the edges: out-of-bounds accesses found before they touch memory and named, inputs a kernel
wrote into, aligned padding, student errors as check messages, ``check`` returning nothing, and timing on outputs a
kernel cannot tell from a fresh call's."""

import runpy
import textwrap

import pytest
import torch
import triton
import triton.language as tl
from l99_edges import COPY

from kernels.checks import engine
from kernels.checks.spec import Case, CheckFailed, get
from kernels.device import INTERPRET, ON_GPU
from kernels.testing import poisoned


@triton.jit
def _good(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride, mask=offs < n), mask=offs < n)


@triton.jit
def _store_past(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride, mask=offs < n), mask=offs < n + 5)


@triton.jit
def _read_wild(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride + (1 << 40), mask=offs < n), mask=offs < n)


@triton.jit
def _read_before(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + (offs - 2) * stride, mask=offs < n), mask=offs < n)


@triton.jit
def _unit_stride(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _writes_input(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs * stride, mask=offs < n)
    tl.store(out_ptr + offs, x, mask=offs < n)
    tl.store(x_ptr + offs * stride, x * 2, mask=offs < n)


@triton.jit
def _reads_twice(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs * stride, mask=offs < n) + tl.load(x_ptr + offs * stride, mask=offs < n)
    tl.store(out_ptr + offs, x / 2, mask=offs < n)


@triton.jit
def _bad_shape(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, 100)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def _judge(kernel, case=None, seed=1):
    case = case or COPY.visible[0]
    cpu = engine.case_inputs(COPY, case, seed)
    outs, result = engine.run_case(COPY, (kernel,), case, cpu, "cpu" if INTERPRET else None)
    outs = {k: engine.Poisoned(p.buffer.cpu(), p.out.cpu(), p.guard) for k, p in outs.items()}
    return outs, result, engine.verdict(COPY, case, outs, result, engine.reference(COPY, case, cpu))


def test_a_clean_kernel_passes_and_its_traffic_is_counted():
    _, result, problems = _judge(_good)
    assert problems == [] and engine.TRAFFIC not in result
    _, _, problems = _judge(_reads_twice)  # right values, twice the loads: the traffic rule speaks, last
    assert problems[0] == "x loaded 200 times"


def test_a_store_past_the_end_is_named_and_never_lands():
    outs, _, problems = _judge(_store_past)
    assert "out: out of bounds: the kernel writes 5 element(s) past the end of `out`" in problems[0]
    assert "mask=offs < n + 5" in problems[0]  # the source line of the access
    assert problems[-1] == "(this case is not a multiple of the block)"
    if INTERPRET:
        assert outs["out"].guards_intact()  # the lanes were masked off before the store ran


def test_a_wild_read_is_named_not_a_crash():
    _, _, problems = _judge(_read_wild)
    assert "reads 100 element(s) past the end of `x`" in problems[0]


def test_a_read_before_the_start_is_named():
    _, _, problems = _judge(_read_before)
    assert "reads 2 element(s) before the start of `x`" in problems[0]


def test_a_read_between_the_elements_of_a_strided_view_is_named():
    _, _, problems = _judge(_unit_stride, COPY.hidden[0])
    assert "between the elements of `x` (a strided view: shape (100,), strides (3,))" in problems[0]


def test_a_kernel_that_writes_its_input_fails():
    _, _, problems = _judge(_writes_input)
    assert problems[0].startswith("x: the kernel wrote into its input `x`: 100 of its elements changed")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("n", [1, 370, 1480, 4099, 100_003])
def test_every_tensor_a_check_hands_out_is_aligned(dtype, n):
    views, _ = engine.pad_inputs({"x": torch.ones(n, dtype=dtype), "y": torch.ones(2 * n, dtype=dtype)[::2]}, "cpu")
    assert all(v.data_ptr() % 64 == 0 for v in views.values())
    outs = engine.alloc_outputs(COPY, Case("n", dict(n=n), dtype), {}, "cpu")
    assert outs["out"].out.data_ptr() % 64 == 0


def test_a_student_error_is_a_failed_check_naming_the_case():
    out = engine.grade_local(COPY, (_bad_shape,), False)
    assert not out.passed and "failed on case 'n=100'" in out.message and "your code raised" in out.message
    assert out.error is not None


NOTEBOOK = '''
import kernels
import triton
import triton.language as tl
from kernels.checks import check
from kernels.checks.spec import CheckFailed


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride, mask=offs < n), mask=MASK)


RETURNED = check("99_edges.copy", copy_kernel)
'''


@pytest.mark.parametrize("mask, fails", [("offs < n", False), ("offs < n + 1", True)])
def test_check_prints_and_returns_nothing(tmp_path, capsys, monkeypatch, mask, fails):
    """A graded cell shows only what ``check`` prints: nbgrader takes a cell's last value for its score."""
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    path = tmp_path / "nb.py"
    path.write_text(textwrap.dedent(NOTEBOOK).replace("MASK", mask))
    if fails:
        with pytest.raises(CheckFailed, match="writes 1 element"):
            runpy.run_path(str(path), run_name="__main__")
        return
    ns = runpy.run_path(str(path), run_name="__main__")
    assert ns["RETURNED"] is None and "✓ 99_edges.copy: 1 case(s) passed" in capsys.readouterr().out


def test_check_chains_the_students_own_error(tmp_path):
    path = tmp_path / "nb.py"
    path.write_text("from kernels.checks import check\n\n\ndef sector_bytes(n, stride, itemsize):\n"
                    "    raise ValueError('my bug')\n\n\ncheck('01_memory_hierarchy.sector_bytes', sector_bytes)\n")
    with pytest.raises(CheckFailed, match="your code raised ValueError: my bug") as info:
        runpy.run_path(str(path), run_name="__main__")
    assert isinstance(info.value.__cause__, ValueError)


def test_an_unwritten_function_says_so():
    """A function answer still holding its stub raises a bare NotImplementedError: the message says what to do,
    as it does for a kernel stub, not an empty "raised NotImplementedError:"."""
    assert engine.your_code_raised("NotImplementedError", "").endswith(
        "not implemented yet: replace `raise NotImplementedError()` with your code")
    assert engine.your_code_raised("NotImplementedError", "complex inputs") == (
        "your code raised NotImplementedError: complex inputs")
    # given the exercise, the stub's message names the function to write
    ex = get("04_chunked_linear_attention.chunked_torch")
    assert engine.your_code_raised("NotImplementedError", "", ex) == (
        "your code raised NotImplementedError: `chunked_attention_torch` is not implemented yet: replace "
        "`raise NotImplementedError()` with your code")


@triton.jit
def _mismatched_dot(x_ptr, o_ptr, B: tl.constexpr):
    rows = tl.arange(0, B)
    a = tl.load(x_ptr + rows[:, None] * B + rows[None, :])
    b = tl.load(x_ptr + tl.arange(0, 2 * B)[:, None] * B + rows[None, :])
    tl.store(o_ptr + rows[:, None] * B + rows[None, :], tl.dot(a, b))


@pytest.mark.skipif(not INTERPRET, reason="the interpreter's error; compiled, the same line comes as a compile error")
def test_a_try_it_cells_error_names_the_learners_line():
    """A lesson's try-it cell prints what stopped the learner's kernel: the error inside Triton's InterpreterError
    (not the wrapper's bare name) and the kernel's line it came from; an error of theirs outside a kernel alike."""
    from kernels.checks import describe_error

    x, o = torch.randn(64 * 64), torch.empty(16 * 16)
    with pytest.raises(Exception) as info:
        _mismatched_dot[(1,)](x, o, B=16)
    said = describe_error(info.value)
    assert said.startswith("AssertionError: ") and "reduction" in said, said
    assert said.endswith("`tl.store(o_ptr + rows[:, None] * B + rows[None, :], tl.dot(a, b))`)"), said
    with pytest.raises(RuntimeError) as info:
        torch.zeros(3).add_(torch.zeros(4))
    assert describe_error(info.value).endswith("`torch.zeros(3).add_(torch.zeros(4))`)")


@triton.jit
def _matmul_operator(x_ptr, o_ptr, B: tl.constexpr):
    rows = tl.arange(0, B)
    a = tl.load(x_ptr + rows[:, None] * B + rows[None, :])
    tl.store(o_ptr + rows[:, None] * B + rows[None, :], a @ a)


def test_a_product_written_with_the_matmul_operator_is_told_to_use_tl_dot():
    """``a @ b`` on tiles: the interpreter's TypeError and the compiler's AttributeError about ``MatMult`` name no
    way out; the try-it cell's line and the check's rule on the source say tl.dot."""
    from kernels.checks import describe_error

    x, o = torch.randn(16 * 16), torch.empty(16 * 16)
    with pytest.raises(Exception) as info:
        _matmul_operator[(1,)](x, o, B=16)
    said = describe_error(info.value)
    assert said.startswith("TypeError") and "tl.dot(a, b)" in said, said
    assert "tl.dot(a, b)" in describe_error(AttributeError("'MatMult' object has no attribute '__name__'"))
    why = engine.matmul_operator_problem("def k(a, b):\n    acc = 0\n    acc += a @ b\n")
    assert why and "(`a @ b`)" in why and "tl.dot" in why
    assert engine.matmul_operator_problem("def k(a, b):\n    return tl.dot(a, b)\n") is None


def test_a_compile_errors_reason_and_line_are_what_a_try_it_cell_prints():
    """Compiled for a GPU, an error comes as Triton's "at 5:8:", the source, a caret and the reason: the reason
    and the line the caret marks are printed, not "at 5:8:"."""
    from kernels.checks import describe_error

    e = ValueError("at 5:8:\n    b = tl.load(x_ptr)\n    c = tl.dot(a, b)\n        ^\nshapes are not compatible")
    assert describe_error(e) == "ValueError: shapes are not compatible at `c = tl.dot(a, b)`"


def test_an_out_of_memory_that_torch_could_not_describe_says_out_of_memory():
    """Where NVML cannot start (a container, the grader's sandbox on an H100), torch's allocator meets an allocation
    it cannot make and then fails an internal assert while describing it: the message says what happened."""
    nvml = ('NVML_SUCCESS == DriverAPI::get()->nvmlInit_v2_() INTERNAL ASSERT FAILED at '
            '"/pytorch/c10/cuda/CUDACachingAllocator.cpp":1123, please report a bug to PyTorch.')
    said = engine.your_code_raised("RuntimeError", nvml)
    assert said.startswith("your code raised RuntimeError: the GPU is out of memory") and "nvmlInit_v2_" in said
    assert engine.your_code_raised("RuntimeError", "nvml is down") == "your code raised RuntimeError: nvml is down"


def test_a_compile_error_says_why_not_only_where():
    """Compiled for a GPU, Triton's CompilationError shows the learner's line and a caret, and keeps why in the error
    it was raised from (``tl.zeros([K, BV])`` with a runtime K: a TypeError); the check's message carries both, once,
    and a long one keeps its end, where the reason is."""
    from kernels.checks.bounds import explained

    where = "at 2:8:\ndef kern(x_ptr, K, BV: tl.constexpr):\n    s = tl.zeros([K, BV], dtype=tl.float32)\n        ^"
    why = "Shape element 0 must have type `constexpr[int]`, got `constexpr[<class 'triton.language.core.tensor'>]`"
    try:
        try:
            raise TypeError(why)
        except TypeError as cause:
            raise RuntimeError(where) from cause
    except RuntimeError as e:
        text = explained(e)
    assert text.startswith(where) and text.endswith(f"TypeError: {why}")
    plain = RuntimeError(f"{where}\n{why}")
    assert explained(plain) == str(plain)  # no cause: as it was
    long = engine.your_code_raised("CompilationError", "x" * 5000 + f"\nTypeError: {why}")
    assert long.endswith(why) and len(long) < 2100


def _timed_copy(device):
    x = torch.randn(1000, device=device)
    outs = {"out": poisoned(1000, device=device)}
    seen = []

    def launch(o, stray=False, touch=False):
        seen.append(bool(torch.isnan(o["out"]).all()))
        o["out"].copy_(x)
        if stray:
            outs["out"].buffer[-1] = 0.0
        if touch:
            x[0] = 1.0
    return x, outs, seen, launch


def test_every_timed_launch_starts_from_poisoned_outputs():
    x, outs, seen, launch = _timed_copy("cpu")
    timing = engine.time_fresh(launch, outs, warmup=1, rep=2, inputs=[x])
    assert all(seen) and timing["launches"] >= 5 and len(seen) >= timing["launches"] + 4
    assert timing["stray"] == {"out": (0, 0)} and timing["inputs_changed"] == []
    assert torch.equal(timing["after"]["out"].out, x) and timing["after"]["out"].guards_intact()
    assert timing["after"]["out"].out.data_ptr() != outs["out"].out.data_ptr()  # a fresh allocation


def test_timing_sees_stray_stores_and_changed_inputs():
    x, outs, _, launch = _timed_copy("cpu")
    timing = engine.time_fresh(lambda o: launch(o, stray=True, touch=True), outs, warmup=1, rep=2, inputs=[x])
    assert timing["stray"]["out"] == (0, 1) and timing["inputs_changed"] == [0]


@pytest.mark.gpu
def test_gpu_timed_launches_start_from_poisoned_outputs():
    x, outs, seen, launch = _timed_copy("cuda")
    timing = engine.time_fresh(launch, outs, warmup=1, rep=2, inputs=[x])
    assert all(seen) and timing["stray"] == {"out": (0, 0)} and torch.equal(timing["after"]["out"].out, x)


@pytest.mark.gpu
def test_gpu_timing_leaves_out_the_hosts_time_to_launch():
    """A launch that spends 2 ms on the host before its kernel (the grader's cubin path binds its arguments in
    Python, about a millisecond) is timed by its kernel alone: the spin queued before the start event covers it."""
    import time

    x, outs, _, copy = _timed_copy("cuda")

    def slow_host(o):
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 2e-3:
            pass
        copy(o)
    kernel = engine.time_fresh(copy, outs, warmup=1, rep=5, inputs=[x])["ms"]
    timing = engine.time_fresh(slow_host, outs, warmup=1, rep=5, inputs=[x])
    assert timing["ms"] < 0.5 + 2 * kernel, (timing["ms"], kernel)  # 2 ms or more where the host time counts


@pytest.mark.gpu
def test_gpu_small_cases_are_bounds_checked_before_the_device_runs_them():
    assert ON_GPU
    _, _, problems = _judge(_read_wild)  # far outside any allocation: on the device an illegal address
    assert "reads 100 element(s) past the end of `x`" in problems[0]


@pytest.mark.slow
def test_nbgrader_validate_reads_a_graded_check_cell_as_passing(tmp_path):
    """nbgrader scores a graded cell by its output: a value echoed under it ("cannot be converted to a float ...
    treating other output as full credit") would be misread. ``check`` prints, and returns nothing."""
    import pathlib
    import subprocess
    import sys

    import nbformat

    here = pathlib.Path(__file__).parent
    meta = {"grade": True, "grade_id": "check", "locked": True, "points": 1, "schema_version": 3, "solution": False}
    setup = textwrap.dedent(NOTEBOOK).replace("MASK", "offs < n").replace(
        'RETURNED = check("99_edges.copy", copy_kernel)\n', "")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(f"import sys\nsys.path.insert(0, {str(here)!r})\n" + setup),
                nbformat.v4.new_code_cell('check("99_edges.copy", copy_kernel)', metadata={"nbgrader": meta})]
    path = tmp_path / "edges.ipynb"
    nbformat.write(nb, path)
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "validate", str(path)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600)
    out = proc.stdout + proc.stderr
    assert "Success! Your notebook passes all the tests." in out, out[-3000:]
    assert "cannot be converted to a float" not in out, out[-3000:]


@triton.jit
def _never_ends(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    start = tl.program_id(0) * BLOCK
    while start < n:  # start never moves
        offs = start + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride, mask=offs < n), mask=offs < n)


@pytest.mark.skipif(not INTERPRET, reason="the interpreter runs a kernel's loops as Python, which an alarm stops")
def test_a_kernel_that_never_ends_is_stopped_with_a_message(monkeypatch):
    import signal
    import time

    if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None):
        pytest.skip("another SIGALRM handler is installed (pytest-timeout's signal method): the limit stands aside")
    monkeypatch.setattr(engine, "CASE_SECONDS", 2)
    t0 = time.time()
    out = engine.grade_local(COPY, (_never_ends,), False)
    assert not out.passed and "ran for more than 2 s" in out.message and "never ends" in out.message, out.message
    assert time.time() - t0 < 30
    assert engine.grade_local(COPY, (_good,), False).passed  # the alarm is off again


@pytest.mark.skipif(not INTERPRET, reason="runs the GPU machine's interpreter pre-check on this machine's CPU")
def test_a_kernel_that_never_ends_is_stopped_in_the_gpu_machines_precheck(monkeypatch):
    """On a GPU machine the small cases run first in the interpreter on CPU copies (the pre-check), with no alarm
    around the case (a GPU kernel cannot be interrupted): the pre-check carries its own, and its "never ends" is not
    swallowed with the pre-check's other errors, so the GPU never runs a kernel that would hang it."""
    import signal
    import time

    if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None):
        pytest.skip("another SIGALRM handler is installed (pytest-timeout's signal method): the limit stands aside")
    monkeypatch.setattr(engine, "INTERPRET", False)  # as on a GPU machine: the case itself runs unguarded
    monkeypatch.setattr(engine, "CASE_SECONDS", 2)
    ran = []
    real = engine.precheck
    monkeypatch.setattr(engine, "precheck", lambda *a: ran.append(1) or real(*a))
    t0 = time.time()
    out = engine.grade_local(COPY, (_never_ends,), False)
    assert ran and not out.passed and "ran for more than 2 s" in out.message, out.message
    assert time.time() - t0 < 30
    assert engine.grade_local(COPY, (_good,), False).passed  # the alarm is off again


@triton.jit
def _misaligned_descriptor(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    desc = tl.make_tensor_descriptor(x_ptr, shape=[10, 10], strides=[10, 1], block_shape=[16, 16])  # 40-byte rows
    tile = desc.load([0, 0])
    r = tl.arange(0, 16)
    tl.store(out_ptr + r[:, None] * 10 + r[None, :], tile, mask=(r[:, None] < 10) & (r[None, :] < 10))


@pytest.mark.skipif(not INTERPRET, reason="runs the GPU machine's interpreter pre-check on this machine's CPU")
def test_the_gpu_precheck_reports_a_descriptor_rule_the_hardware_enforces():
    """The pre-check leaves what the interpreter objects to for the GPU run to decide, but a tensor descriptor whose
    rows are not a multiple of 16 bytes would fault there (the CUDA context lost): that one is reported."""
    case = COPY.visible[0]
    cpu = engine.case_inputs(COPY, case, 1)
    with pytest.raises(AssertionError, match="16-byte aligned.*TMA unit enforces"):
        engine.precheck(COPY, (_misaligned_descriptor,), case, cpu)
    assert engine.precheck(COPY, (_good,), case, cpu) == ([], [])


def test_a_lost_cuda_context_is_announced_on_a_gpu_only(monkeypatch):
    """The interpreter's out-of-bounds error says "illegal address" too: under the interpreter nothing is lost, and
    telling the learner to restart the kernel there was false."""
    from kernels.checks.bounds import OutOfBoundsError

    oob = OutOfBoundsError("load outside its tensor: on a GPU such an access is an illegal address")
    fault = RuntimeError("CUDA error: an illegal memory access was encountered")
    monkeypatch.setattr(engine, "ON_GPU", False)
    assert "restart" not in engine._raised(oob) and "restart" not in engine._raised(fault)
    monkeypatch.setattr(engine, "ON_GPU", True)
    assert "restart" not in engine._raised(oob)
    assert "CUDA context is now lost: restart the notebook's kernel" in engine._raised(fault)


def test_counts_are_described_as_exact_answers():
    """An exercise of functions that count (bytes, sectors) is exact: its cases say so, whether the check is passed
    one function or two, never a dtype and a tolerance of 0e+00."""
    for name in ("01_memory_hierarchy.sector_bytes", "02_naive_hbm_loops.bytes"):
        ex = get(name)
        text = engine.describe_case(ex, ex.visible[0], seed=1)
        assert "exact answers" in text and "tolerance" not in text, text


@pytest.mark.parametrize("call,named", [
    ("tl.dot(a, b, acc)", "without input_precision"),
    ("tl.dot(a, b, acc, input_precision=PRECISION)", None),
    ("tl.dot(a, b, acc, PRECISION)", None),
    ('tl.dot(a, b, acc, input_precision="tf32")', "precision written in"),
    ('tl.dot(a, b, acc, "tf32")', "precision written in"),
    ("tl.dot(a, b, acc, allow_tf32=True)", "precision written in"),
    ('tl.dot(a, b, acc, input_precision="ieee")', None),  # exact everywhere, only slower where TF32 is allowed
    ("tl.dot(a, b, acc, allow_tf32=False)", None),
])
def test_a_dots_precision_is_the_cases_or_exact(call, named):
    """The interpreter computes every fp32 dot exactly, so the source is where a GPU's TF32 is seen: a dot without
    a precision, or with TF32 written in, is named; PRECISION, or IEEE written in, is not."""
    from kernels.checks.spec import get

    ex = get("03_tiled_sram.tiled_matmul")
    why = engine.dot_precision_problem(ex, f"def k(a, b, acc, PRECISION):\n    acc = {call}\n")
    assert (why is None) if named is None else (named in why), why
