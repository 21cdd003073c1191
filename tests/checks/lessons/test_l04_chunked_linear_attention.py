"""Lesson 04's checks: the solutions pass; broken twins, a token loop, quadratic attention and calls into the
package or fla fail with a message that says why."""

import pytest
import torch
from lessonkit import assert_fails as fails
from lessonkit import edit, function, grade, kernel, solution_cells, zoo_source

from kernels.checks.lessons.l04_chunked_linear_attention import intra_chunk, recurrent
from kernels.checks.provenance import Rejected, check_function_static
from kernels.checks.spec import CheckFailed
from kernels.device import INTERPRET

CELLS = solution_cells("04_chunked_linear_attention")
TORCH = CELLS["ex1-torch"]
INTRA = CELLS["ex2-intra"]
FUSED = CELLS["ex3-fused"]

PACKAGE = '''
from kernels.linear_attention import chunk_linear_attn


def chunked_attention_torch(q, k, v, scale, chunk_size=64):
    return chunk_linear_attn(q, k, v, scale, normalize=False)[0]
'''

FLA = '''
import fla.ops.linear_attn as la


def chunked_attention_torch(q, k, v, scale, chunk_size=64):
    return la.chunk_linear_attn(q, k, v, scale, normalize=False)[0]
'''


def test_references_agree():
    q, k = torch.randn(2, 2, 37, 3, 8, dtype=torch.float64)
    v = torch.randn(2, 37, 3, 5, dtype=torch.float64)
    o = recurrent(q, k, v, 0.3)
    by_hand = torch.zeros_like(o)
    for t in range(37):
        for s in range(t + 1):
            by_hand[:, t] += 0.3 * (q[:, t] * k[:, s]).sum(-1, keepdim=True) * v[:, s]
    torch.testing.assert_close(o, by_hand)
    # one chunk covering everything is the whole causal sum
    torch.testing.assert_close(intra_chunk(q, k, v, 0.3, 64), o)
    # the mistakes' oracle, without a mistake, is the recurrence at any chunk size (T = 37 is no multiple)
    from kernels.checks.lessons.l04_chunked_linear_attention import _MISTAKES, _variant

    for chunk in (1, 5, 16, 64):
        torch.testing.assert_close(_variant(q, k, v, 0.3, chunk), o)
    torch.testing.assert_close(_variant(q, k, v, 0.3, 16, carry=False), intra_chunk(q, k, v, 0.3, 16))
    for flags, *_ in _MISTAKES:  # and each mistake changes the answer
        assert not torch.allclose(_variant(q, k, v, 0.3, 16, **flags), o), flags


@pytest.mark.parametrize("hidden", [False, True])
def test_torch_solution_passes(hidden):
    out = grade("04_chunked_linear_attention.chunked_torch", function(TORCH, "chunked_attention_torch",
                                                                      {"torch": torch}), hidden=hidden)
    assert out.passed, out.message


def test_torch_twins_fail():
    exercise = "04_chunked_linear_attention.chunked_torch"

    def check(src):
        return grade(exercise, function(src, "chunked_attention_torch", {"torch": torch}))

    fails(check(zoo_source(exercise, "token-loop")), "torch operations", "tokens")
    fails(check(zoo_source(exercise, "quadratic")), "quadratic")
    fails(check(edit(TORCH, ".tril()", "")), "relative error")  # not causal inside the chunk
    fails(check(edit(TORCH, "state = state + kc.transpose(-1, -2) @ vc", "pass")), "relative error")


@pytest.mark.parametrize("src, words", [(PACKAGE, "kernels.linear_attention"), (FLA, "fla.ops.linear_attn")])
def test_torch_answer_may_not_call_the_package_or_fla(src, words):
    with pytest.raises(Rejected, match=words.replace(".", r"\.")):
        check_function_static(["import torch", src], "chunked_attention_torch", forbid=("fla",))


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("cell, name, exercise", [
    ("ex2-intra", "intra_chunk_kernel", "intra_chunk"),
    ("ex3-fused", "chunked_attention_kernel", "chunked_fwd"),
])
def test_solution_kernels_pass(hidden, cell, name, exercise):
    out = grade(f"04_chunked_linear_attention.{exercise}", kernel(CELLS[cell], name), hidden=hidden)
    assert out.passed, out.message


@pytest.mark.parametrize("source, name, exercise, old, new, words", [
    (INTRA, "intra_chunk_kernel", "intra_chunk", "offs_c[:, None] >= offs_c[None, :]",
     "offs_c[:, None] > offs_c[None, :]", ["relative error"]),  # drops the diagonal
    (INTRA, "intra_chunk_kernel", "intra_chunk", "mask=mask_vo)", "mask=offs_t[:, None] < T)",
     ["out of bounds"]),  # stores the columns past V (the last row's spill into the guard band)
    (FUSED, "chunked_attention_kernel", "chunked_fwd",
     "state = tl.dot(tl.trans(k), v, state, input_precision=PRECISION)", "state = state",
     ["relative error"]),  # never carries the state
    (FUSED, "chunked_attention_kernel", "chunked_fwd", "(o * scale)", "o", ["relative error"]),
    (FUSED, "chunked_attention_kernel", "chunked_fwd", "mask=mask_qk, other=0.0)  # [BT, BK]\n        k",
     "mask=offs_t[:, None] < T, other=0.0)  # [BT, BK]\n        k", ["q: out of bounds"]),  # q not masked past K
])
def test_broken_kernels_fail(source, name, exercise, old, new, words):
    broken = kernel(edit(source, old, new), name)
    fails(grade(f"04_chunked_linear_attention.{exercise}", broken, hidden=exercise == "chunked_fwd"), *words)


@pytest.mark.gpu
@pytest.mark.parametrize("cell, name, exercise", [
    ("ex2-intra", "intra_chunk_kernel", "intra_chunk"),
    ("ex3-fused", "chunked_attention_kernel", "chunked_fwd"),
])
def test_gpu_hidden_cases_bf16_and_large(cell, name, exercise):
    out = grade(f"04_chunked_linear_attention.{exercise}", kernel(CELLS[cell], name), hidden=True)
    assert out.passed and not out.not_graded, out.message


TUNED = dict(BT=64, BV=64, num_warps=4, num_stages=2)


def test_capstone_checks_the_chunk_and_runs_the_kernel_with_it():
    ok = grade("04_chunked_linear_attention.chunked_speed", TUNED, kernel(FUSED, "chunked_attention_kernel"))
    assert ok.passed, ok.message
    fails(grade("04_chunked_linear_attention.chunked_speed", {**TUNED, "BT": 24},
                kernel(FUSED, "chunked_attention_kernel")), "BT=24 must be 16, 32, 64 or 128")
    broken = kernel(edit(FUSED, "(o * scale)", "o"), "chunked_attention_kernel")
    fails(grade("04_chunked_linear_attention.chunked_speed", TUNED, broken), "relative error")


@pytest.mark.gpu
@pytest.mark.parametrize("chunk, passes", [(16, False), (64, True)])
def test_gpu_capstone_fails_chunks_of_16_and_passes_chunks_of_64(chunk, passes):
    """At B=4 T=16k H=16 D=128 bf16 the lesson's kernel takes 1.29 ms with chunks of 16 and 0.55 ms with 64
    (fla-core 0.76 ms, 2.5x the floor 0.63 ms): the first must fail the capstone's speed check, the second pass."""
    out = grade("04_chunked_linear_attention.chunked_speed", {**TUNED, "BT": chunk},
                kernel(FUSED, "chunked_attention_kernel"))
    print(f"chunks of {chunk}: {out.perf}")
    if passes:
        assert out.passed and not out.not_graded, out.message
    else:
        fails(out, "too slow")


def test_capstone_verdict_asks_to_beat_the_target():
    from kernels.checks.engine import perf_verdict
    from kernels.checks.lessons import l04_chunked_linear_attention as l04
    from kernels.checks.spec import get

    ex = get("04_chunked_linear_attention.chunked_speed")
    timing = dict(student_ms=1.29, baseline_ms=0.5, floor_ms=0.25, case="T=16k", faults=[], mismatch=[],
                  target_ms=0.76, target_name="fla-core's chunk_linear_attn")
    (slow,) = perf_verdict(ex, timing)
    assert "too slow" in slow and "must beat fla-core's chunk_linear_attn (0.7600 ms" in slow and "5.2x" in slow
    assert perf_verdict(ex, {**timing, "student_ms": 0.55}) == []
    assert "timing failed" in perf_verdict(ex, {k: v for k, v in timing.items() if k != "target_ms"})[0]
    if l04._fla() is None:
        assert l04._capstone_target({}, ex.performance.case, 0.25) == (
            0.625, "2.5x the HBM floor (fla-core is not installed here)")


@pytest.mark.skipif(not INTERPRET, reason="the sm_90 dry run is the interpreter's compile gate")
def test_capstone_refuses_a_chunk_whose_shared_memory_no_gpu_has():
    """The interpreter runs the capstone's small case only; its sm_90 dry run also compiles the capstone's own
    launch as Triton's JIT would specialise it, and refuses a CHUNK that needs more than 227 KiB a program (on a
    GPU that launch fails with "out of resource"); the lesson's CHUNK (96 KiB) passes."""
    from kernels.checks.provenance import from_cells, verify_compiles

    ks = from_cells(["import torch\nimport triton\nimport triton.language as tl\n", FUSED], "chunked_attention_kernel")
    src = [None, {"entry": ks.entry, "text": ks.text}]
    ex = "04_chunked_linear_attention.chunked_speed"
    verify_compiles(ex, False, src, [TUNED, None])
    with pytest.raises(CheckFailed, match=r"needs 320 KiB of shared memory per program.* at most 227 KiB"):
        verify_compiles(ex, False, src, [dict(BT=128, BV=128, num_warps=4, num_stages=3), None])


def test_the_budget_cell_names_a_chunk_the_speed_check_refuses():
    """The capstone's budget cell asks the speed check's rule first: a CHUNK it refuses is named as the check names
    it, not reported as a kernel that does not compile (tl.dot's "K >= 16", arange's "power of 2")."""
    from kernels.checks import value_problem

    def chunk_problem(chunk):
        return value_problem("04_chunked_linear_attention.chunked_speed", chunk)

    good = dict(BT=64, BV=64, num_warps=4, num_stages=2)
    assert chunk_problem(good) is None
    assert "BT=8 must be 16, 32, 64 or 128" in chunk_problem(dict(good, BT=8))
    assert "BV=48 must be 16, 32, 64 or 128" in chunk_problem(dict(good, BV=48))
    assert "num_warps=3 must be a power of two" in chunk_problem(dict(good, num_warps=3))
    assert "must be a dict" in chunk_problem((64, 64, 4, 2))
    assert "missing ['num_stages']" in chunk_problem({k: v for k, v in good.items() if k != "num_stages"})


@pytest.mark.parametrize("mask, words", [(".tril(1)", "one token off"), (".triu()", "the wrong way round")])
def test_a_shifted_or_reversed_mask_is_named(mask, words):
    """The torch version with a causal mask one token off, or transposed: named, not only measured."""
    src = edit(TORCH, "kc.transpose(-1, -2)).tril()", "kc.transpose(-1, -2))" + mask)
    fails(grade("04_chunked_linear_attention.chunked_torch", function(src, "chunked_attention_torch",
                                                                     {"torch": torch})), words)
