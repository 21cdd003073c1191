"""Memory kernels: copy, strided gather, L2 re-read and on-chip reuse against float64 oracles."""

import pytest
import torch
import triton
import triton.language as tl
from sm90 import compile_for_sm90

from kernels.device import DEVICE, ON_GPU, sizes
from kernels.memory import copy as copy_mod
from kernels.memory import (
    copy_memory,
    l2_reread,
    l2_reread_memory,
    reference_memory,
    sram_reuse,
    sram_reuse_memory,
    strided,
    strided_memory,
)
from kernels.testing import assert_close, check_bad_input, poisoned, randn, tolerance

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
NS = [1, 1000, 2048, 10_007]


def _run(pattern, fn, n, dtype, seed, **params):
    """Run ``fn`` into a poisoned output and compare with the oracle for ``pattern``."""
    x = randn(n, dtype=dtype, seed=seed)
    ref_params = dict(params)
    if pattern == "l2_reread" and "shift" not in params:
        ref_params["shift"] = l2_reread.shift_for(n, params["reuse"], params.get("block_size", 2048))
    ref_params.pop("block_size", None)
    ref = reference_memory(pattern, x, **ref_params)
    p = poisoned(ref.numel(), dtype=dtype)
    fn(x, out=p.out, **params)
    p.check(pattern)
    assert_close(pattern, ref, p.out, tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
def test_copy(n, dtype):
    _run("copy", copy_memory, n, dtype, seed=n, block_size=512)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,stride", [(1, 1), (1000, 3), (10_007, 8), (4099, 33)])
def test_strided(n, stride, dtype):
    _run("strided", strided_memory, n, dtype, seed=n + stride, stride=stride, block_size=256)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,reuse", [(1, 3), (1000, 1), (10_007, 4), (3001, 7)])
def test_l2_reread(n, reuse, dtype):
    _run("l2_reread", l2_reread_memory, n, dtype, seed=n + reuse, reuse=reuse, block_size=256)


def test_l2_reread_explicit_shift():
    _run("l2_reread", l2_reread_memory, 1001, torch.float32, seed=9, reuse=5, shift=333, block_size=128)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,reuse", [(1, 0), (1000, 1), (10_007, 9), (3001, 64)])
def test_sram_reuse(n, reuse, dtype):
    _run("sram_reuse", sram_reuse_memory, n, dtype, seed=n + reuse, reuse=reuse, block_size=256)


def test_every_element_read_reuse_times():
    """The re-read is a sum of ``reuse`` permutations of x: on ones, every output is exactly ``reuse``."""
    x = torch.ones(5003, device=DEVICE)
    assert torch.equal(l2_reread_memory(x, reuse=6, block_size=128), torch.full_like(x, 6.0))


def test_allocates_outputs():
    x = randn(3333, seed=4)
    assert copy_memory(x).shape == x.shape
    assert strided_memory(x, stride=10).shape == (334,)
    assert l2_reread_memory(x, reuse=2).shape == x.shape
    assert sram_reuse_memory(x, reuse=2).dtype == x.dtype


@triton.jit
def _unmasked_tail_copy_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n_elements), mask=offs < n_elements + 7)


def _overrunning_copy(x, *, out, block_size):
    """A copy whose store mask lets the last program write 7 elements past the end of the output."""
    _unmasked_tail_copy_kernel[(triton.cdiv(x.numel(), block_size),)](x, out, x.numel(), BLOCK_SIZE=block_size)
    return out


def test_broken_kernel_fails():
    with pytest.raises(AssertionError, match="out of bounds"):
        _run("copy", _overrunning_copy, 1000, torch.float32, seed=1, block_size=256)


def test_bad_input():
    x = randn(1000, seed=2)
    check_bad_input(copy_memory, x.to(torch.int64), match="dtype")
    check_bad_input(copy_memory, x.view(20, 50).t(), match="contiguous")
    check_bad_input(copy_memory, x[:0], match="empty")
    check_bad_input(copy_memory, x, block_size=1000, match="power of two")
    check_bad_input(copy_memory, x.to("meta"), match="meta")
    check_bad_input(copy_memory, x, out=torch.empty(999, device=DEVICE), match="shape")
    check_bad_input(copy_memory, x, out=torch.empty(1000, device=DEVICE, dtype=torch.float16), match="dtype")
    check_bad_input(strided_memory, x, stride=0, match="stride")
    check_bad_input(strided_memory, x, stride=2.0, match="int")
    check_bad_input(l2_reread_memory, x.view(10, 100), reuse=2, match="1-D")
    check_bad_input(l2_reread_memory, x, reuse=0, match="reuse")
    check_bad_input(l2_reread_memory, x, reuse=2, shift=1000, match="shift")
    check_bad_input(sram_reuse_memory, x, reuse=-1, match="reuse")
    check_bad_input(sram_reuse_memory, x, reuse=3, a="half", match="float")


def test_bytes_moved():
    n = 1 << 20
    assert copy_mod.bytes_moved(n, 4) == 8 * n
    # stride 8 in fp32 = 32 bytes: a whole sector per gathered element, 8x the useful read
    assert strided.bytes_moved(n, 8, 4) == (n // 8) * 32 + (n // 8) * 4
    assert strided.useful_bytes(n, 8, 4) == 2 * (n // 8) * 4
    # stride 2 still touches every sector: the whole array is read
    assert strided.bytes_moved(n, 2, 4) == 4 * n + 2 * n
    assert l2_reread.bytes_moved(n, 4, reuse=8) == 8 * n
    assert l2_reread.bytes_moved(n, 4, reuse=8, l2_bytes=n) == 9 * 4 * n
    assert l2_reread.bytes_read(n, 8, 4) == 9 * 4 * n
    assert sram_reuse.bytes_moved(n, 2) == 4 * n and sram_reuse.flops(n, 16) == 32 * n


def test_shift_reads_other_programs_blocks():
    n, reuse, bs = 10_000, 4, 256
    shift = l2_reread.shift_for(n, reuse, bs)
    assert shift % bs == 0 and shift * reuse >= n - bs


# GPU sizes: past L2 (60 MiB on an H200) so HBM is exercised, small enough that a float64 check takes a second.
GPU_N = 2**24 + 17


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_copy_gpu(dtype):
    assert ON_GPU
    _run("copy", copy_memory, GPU_N, dtype, seed=21)


@pytest.mark.gpu
def test_strided_gpu():
    _run("strided", strided_memory, GPU_N, torch.float32, seed=22, stride=sizes("memory")["stride"])


@pytest.mark.gpu
@pytest.mark.parametrize("n", [2**21 + 17, 2**25 + 17])
def test_l2_reread_gpu(n):
    _run("l2_reread", l2_reread_memory, n, torch.float32, seed=23, reuse=sizes("memory")["reuse"])


@pytest.mark.gpu
@pytest.mark.parametrize("reuse", [8, 256])
def test_sram_reuse_gpu(reuse):
    _run("sram_reuse", sram_reuse_memory, GPU_N, torch.float32, seed=24, reuse=reuse)


def test_bench_report():
    from kernels.memory import bench

    row = {"problem": "copy n=10", "bytes": 8e9, "useful_bytes": 4e9, "flops": 2e12,
           "versions": {"triton": {"status": "ok", "ms": 1000.0}, "torch": {"status": "skipped"}}}
    text = bench.report({"copy_bandwidth_Bps": 4e9, "rows": [row]})
    assert "triton" in text and "torch" not in text.splitlines()[-1]
    assert text.splitlines()[-1].split()[-5:] == ["8", "2.00", "4", "1.00", "2.00"]


@pytest.mark.slow
def test_kernels_compile_for_sm90():
    """Every memory kernel compiles for an H100/H200 (no GPU needed), and the copy keeps its vector accesses."""
    ptx = compile_for_sm90([
        ("kernels.memory.copy", "_copy_memory_kernel", dict(BLOCK_SIZE=4096), dict(num_warps=8)),
        ("kernels.memory.strided", "_strided_memory_kernel", dict(BLOCK_SIZE=1024), {}),
        ("kernels.memory.l2_reread", "_l2_reread_memory_kernel", dict(BLOCK_SIZE=2048), dict(num_warps=8)),
        ("kernels.memory.sram_reuse", "_sram_reuse_memory_kernel", dict(BLOCK_SIZE=1024), {}),
    ], dtypes=("fp32", "bf16"), scalars={"a": "fp32"})
    assert ".v4." in ptx["0/fp32"], "the copy lost its 16-byte vector accesses"


def test_lesson_01_copy_solution_keeps_16_byte_accesses(tmp_path, monkeypatch):
    """Lesson 01 says a grid-stride copy that leaves its full blocks unmasked compiles to 16-byte loads and stores
    even when n is not a multiple of 16 (its timed check needs them), and one masked on every step does not:
    both compiled for sm_90 from the solution's own cell."""
    import os

    from grader.course import solution_notebook

    nb = solution_notebook("01_memory_hierarchy", validate=False)
    src = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "copy_kernel")
    head = "import triton\nimport triton.language as tl\n\n"
    full = "        if start + BLOCK_SIZE <= n_elements:"
    assert full in src, "the solution no longer splits full blocks from the last one"
    masked = src.replace(full, "        if False:")
    (tmp_path / "l01_copy_solution.py").write_text(head + src)
    (tmp_path / "l01_copy_masked.py").write_text(head + masked)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    spec = (dict(BLOCK_SIZE=4096), dict(num_warps=8))
    ptx = compile_for_sm90([("l01_copy_solution", "copy_kernel", *spec), ("l01_copy_masked", "copy_kernel", *spec)])
    assert "ld.global.v4" in ptx["0/fp32"] and "st.global.v4" in ptx["0/fp32"], "no 16-byte accesses"
    assert "ld.global.v4" not in ptx["1/fp32"], "the all-masked copy vectorised after all: the lesson's text is wrong"
