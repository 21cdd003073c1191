"""A correct kernel passes every seed, including seeds whose output nearly cancels.

Lesson 02's hidden case B=1 T=1 H=1 K=3 V=5 fp32 with seed 174225119239141 draws q·k = -0.0022 from products whose
absolute values sum to 1.6: fp32 rounding is then 4e-5 of the output, over the 1e-5 tolerance, and the lesson's
own solution failed it in a CI run of the demo class. Exercises built from sums of products (``magnitude=True``)
take the relative error against the same computation on the inputs' absolute values where that is larger.
"""

import pytest
from lessonkit import edit, kernel, solution_cells

from kernels.checks import engine
from kernels.checks.spec import get

SEED = 174225119239141
CASE = "B=1 T=1 H=1 K=3 V=5"


def _verdict(kern):
    ex = get("02_naive_hbm_loops.naive")
    case = next(c for c in ex.cases(True) if c.label.startswith(CASE))
    cpu = engine.case_inputs(ex, case, SEED)
    ref = engine.reference(ex, case, cpu)
    outs, result = engine.run_case(ex, (kern,), case, cpu)
    return engine.verdict(ex, case, outs, result, ref), ref


def test_a_seed_that_cancels_passes_the_solution():
    problems, ref = _verdict(kernel(solution_cells("02_naive_hbm_loops")["naive_kernel"], "naive_kernel"))
    assert ref["o"].norm() < ref.scale["o"] / 100  # the seed does cancel: 0.0033 against 2.4
    assert problems == []


_OUT = "o = tl.sum(q[:, None] * s, axis=0)"


@pytest.mark.parametrize("old, new", [
    (_OUT, _OUT + " * 1.1"),  # 10% off: far above the rounding of the terms
    ("+ k[:, None] * v[None, :]", "+ k[:, None] * v[None, :] * 0.999"),  # the state does not cancel: 0.1% shows
], ids=["output", "state"])
def test_the_same_seed_still_fails_a_wrong_kernel(old, new):
    src = edit(solution_cells("02_naive_hbm_loops")["naive_kernel"], old, new)
    problems, _ = _verdict(kernel(src, "naive_kernel"))
    assert any("relative error" in p for p in problems), problems


def test_a_small_error_hidden_by_one_cancelling_seed_fails_the_check():
    # at that seed an output 0.1% off is within the rounding the terms allow; the check's other cases are not
    src = edit(solution_cells("02_naive_hbm_loops")["naive_kernel"], _OUT, _OUT + " * 1.001")
    assert _verdict(kernel(src, "naive_kernel"))[0] == []
    out = engine.grade_local(get("02_naive_hbm_loops.naive"), (kernel(src, "naive_kernel"),), True)
    assert not out.passed and "relative error" in out.message


def test_magnitude_is_declared_where_results_are_sums_of_products():
    marked = {"02_naive_hbm_loops.naive", "02_naive_hbm_loops.fused", "02_naive_hbm_loops.fused_speed",
              "03_tiled_sram.tiled_matmul", "04_chunked_linear_attention.chunked_torch",
              "04_chunked_linear_attention.intra_chunk", "04_chunked_linear_attention.chunked_fwd",
              "05_ptx_export_rust.build_launch"}
    for exercise_id in marked:
        assert get(exercise_id).magnitude, exercise_id
    for exercise_id in ("00_setup.vector_add", "01_memory_hierarchy.copy", "02_naive_hbm_loops.bytes"):
        assert not get(exercise_id).magnitude, exercise_id
