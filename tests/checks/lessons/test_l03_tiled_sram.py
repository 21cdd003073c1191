"""Lesson 03's checks: the solution passes, and every broken twin of it fails with a message that says why."""

import pytest
from lessonkit import assert_fails as fails
from lessonkit import edit, function, grade, kernel, solution_cells

from kernels.checks.lessons.l03_tiled_sram import grouped_tile, traffic

CELLS = solution_cells("03_tiled_sram")
KERNEL = CELLS["ex1-tiled"]
TRAFFIC = CELLS["ex2-traffic"]


def tiles_value():
    ns: dict = {}
    exec(CELLS["ex3-tiles"], ns)
    return ns["TILES"]


def test_grouped_order_by_hand():
    # 3 tile rows, 2 tile columns, groups of 2 rows: down the first two rows, then across, then the short group
    assert [grouped_tile(p, 3, 2, 2) for p in range(6)] == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]
    assert [grouped_tile(p, 2, 3, 1) for p in range(6)] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


def test_traffic_by_hand():
    # 4096^3 bf16 in 128 x 128 tiles: A and B each read 32 times, C written once
    assert traffic(4096, 4096, 4096, 128, 128, 2) == 2 * (32 + 32 + 1) * 4096 * 4096
    assert traffic(5, 3, 7, 4, 2, 4) == 4 * (2 * 5 * 7 + 2 * 7 * 3 + 5 * 3)


@pytest.mark.parametrize("hidden", [False, True])
def test_solution_kernel_passes(hidden):
    out = grade("03_tiled_sram.tiled_matmul", kernel(KERNEL, "tiled_matmul_kernel"), hidden=hidden)
    assert out.passed, out.message


@pytest.mark.parametrize("old, new, words", [
    # no K tail mask on A: reads past the rows of A
    ("(offs_k[None, :] < K - k0)", "(offs_k[None, :] < BLOCK_K)", ["a: out of bounds", "past the end of `a`"]),
    ("mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))", "mask=offs_n[None, :] < N)", ["out of bounds"]),
    ("pid_m = first_m + (pid % per_group) % rows", "pid_m = pid // num_pid_n", ["grouped ordering"]),
    ("acc = tl.dot(a, b, acc, input_precision=PRECISION)", "acc = tl.dot(a, b, input_precision=PRECISION)",
     ["relative error"]),  # forgets to accumulate over k
])
def test_broken_kernel_fails(old, new, words):
    broken = kernel(edit(KERNEL, old, new), "tiled_matmul_kernel")
    fails(grade("03_tiled_sram.tiled_matmul", broken), *words)


def test_traffic_solution_passes_and_twins_fail():
    assert grade("03_tiled_sram.tile_traffic", function(TRAFFIC, "tile_traffic", {"math": __import__("math")})).passed
    no_c = function(edit(TRAFFIC, "reads_a + reads_b + M * N", "reads_a + reads_b"), "tile_traffic",
                    {"math": __import__("math")})
    fails(grade("03_tiled_sram.tile_traffic", no_c), "bytes")
    floor_div = function(edit(TRAFFIC, "math.ceil(N / block_n)", "(N // block_n)"), "tile_traffic",
                         {"math": __import__("math")})
    fails(grade("03_tiled_sram.tile_traffic", floor_div), "bytes")


def test_tile_choice_rules():
    k = kernel(KERNEL, "tiled_matmul_kernel")
    good = tiles_value()
    assert grade("03_tiled_sram.tile_choice", good, k).passed
    for change, words in [
        (dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=128, num_stages=4), ["shared memory"]),
        (dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=32, num_stages=2, num_warps=4), ["registers per thread"]),
        (dict(BLOCK_M=32, BLOCK_N=32), ["FLOP/byte"]),
        (dict(BLOCK_M=96), ["power of two"]),
        (dict(BLOCK_K=8), ["between 16 and 256"]),
    ]:
        fails(grade("03_tiled_sram.tile_choice", {**good, **change}, k), *words)
    fails(grade("03_tiled_sram.tile_choice", {k2: v for k2, v in good.items() if k2 != "GROUP_M"}, k), "GROUP_M")


@pytest.mark.gpu
def test_gpu_hidden_cases_bf16_and_large():
    out = grade("03_tiled_sram.tiled_matmul", kernel(KERNEL, "tiled_matmul_kernel"), hidden=True)
    assert out.passed and not out.not_graded, out.message


@pytest.mark.gpu
@pytest.mark.timed
def test_gpu_tile_choice_is_fast_enough():
    out = grade("03_tiled_sram.tile_choice", tiles_value(), kernel(KERNEL, "tiled_matmul_kernel"))
    assert out.passed and out.perf, out.message
    print(out.message)


@pytest.mark.gpu
@pytest.mark.timed
def test_gpu_tiny_tiles_are_too_slow():
    slow = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=16, GROUP_M=1, num_warps=1, num_stages=1)
    fails(grade("03_tiled_sram.tile_choice", slow, kernel(KERNEL, "tiled_matmul_kernel")), "too slow")


def test_a_copy_of_the_package_kernel_is_refused():
    import inspect
    import textwrap

    from kernels.checks.provenance import Rejected
    from kernels.matmul import tiled

    src = textwrap.dedent(inspect.getsource(tiled._tiled_matmul_kernel.fn))
    src = src.replace("_tiled_matmul_kernel", "tiled_matmul_kernel").replace("DOT_PRECISION", "PRECISION")
    with pytest.raises(Rejected, match="copy of the package's"):
        kernel(src, "tiled_matmul_kernel")


def test_a_kernel_calling_python_is_refused():
    from kernels.checks.provenance import Rejected, from_cells

    cheat = edit(KERNEL, "    pid = tl.program_id(0)\n", "    pid = tl.program_id(0)\n    help_me()\n")
    with pytest.raises(Rejected, match="Python function"):
        from_cells(["import triton\nimport triton.language as tl\n\n\ndef help_me():\n    return 0\n", cheat],
                   "tiled_matmul_kernel")


def test_the_solution_compiles_for_sm90_in_every_case():
    from kernels.checks import provenance
    from kernels.checks.provenance import from_cells

    ks = from_cells(["import triton\nimport triton.language as tl\n", KERNEL], "tiled_matmul_kernel")
    provenance.verify_compiles("03_tiled_sram.tiled_matmul", True, [{"entry": ks.entry, "text": ks.text}], [None])
