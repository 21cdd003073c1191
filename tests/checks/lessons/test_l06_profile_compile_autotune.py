"""Lesson 06's checks: the solutions pass; a wrong shared-memory formula, instruction or space fails with a message
that says why; the hints name the mistake. (The zoo grades many more answers; these pin the messages.)"""

import pytest
from lessonkit import assert_fails as fails
from lessonkit import edit, function, grade, kernel, solution_cells

from kernels.checks.lessons import l06_profile_compile_autotune as l06

LESSON = "06_profile_compile_autotune"
CELLS = solution_cells(LESSON)


def _space():
    ns = {"dict": dict}
    exec(CELLS["ex4-space"], ns)
    return ns["SPACE"]


def test_predict_shared_solution_passes_and_a_one_stage_formula_fails():
    ok = function(CELLS["ex1-predict"], "predict_shared")
    out = grade(f"{LESSON}.predict_shared", ok)
    assert out.passed, out.message
    one = function(edit(CELLS["ex1-predict"], "return num_stages * ", "return "), "predict_shared")
    fails(grade(f"{LESSON}.predict_shared", one), "the compiler allocates 98304 B", "one stage's tiles")


def test_shared_hints_name_the_mistake():
    cfg = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=3)
    want = 3 * (64 * 32 + 32 * 128) * 2
    assert "one stage's tiles" in l06._shared_hint(cfg, want // 3, want)
    assert "counts elements" in l06._shared_hint(cfg, want // 2, want)
    assert "4 bytes per element" in l06._shared_hint(cfg, want * 2, want)
    assert "num_stages - 1" in l06._shared_hint(cfg, 2 * want // 3, want)
    assert "output tile" in l06._shared_hint(cfg, 3 * 64 * 128 * 4, want)
    assert "num_warps does not change it" in l06._shared_hint(cfg, 4 * want, want)
    assert "size in KiB" in l06._shared_hint(cfg, want // 1024, want)  # 36 for 36864 bytes
    assert l06._shared_hint(cfg, 12345, want) == l06._TILES


def test_shared_hints_probe_the_formula():
    """One value can fit two mistakes (at the lesson's 128 x 128 x 64 tiles, fp32 bytes and the output tile give
    the same number): the answer's function, called at other configurations, tells which it is."""
    cfg = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3)
    want = 3 * (128 * 64 + 64 * 128) * 2

    def output(m, n, k, w, s):
        return s * m * n * 4

    def fp32(m, n, k, w, s):
        return s * (m * k + k * n) * 4

    def plus_output(m, n, k, w, s):
        return s * (m * k + k * n) * 2 + m * n * 2

    def per_warp(m, n, k, w, s):
        return s * (m * k + k * n) * 2 * w // 4

    def a_only(m, n, k, w, s):
        return s * m * k * 2

    # at square tiles A's tile alone is the element count; the probes say which it is
    assert a_only(128, 128, 64, 8, 3) == want // 2
    assert "A's tile alone" in l06._shared_hint(cfg, a_only(128, 128, 64, 8, 3), want, a_only)
    assert output(128, 128, 64, 8, 3) == fp32(128, 128, 64, 8, 3)
    assert "output tile" in l06._shared_hint(cfg, output(128, 128, 64, 8, 3), want, output)
    assert "4 bytes per element" in l06._shared_hint(cfg, fp32(128, 128, 64, 8, 3), want, fp32)
    assert "output tile" in l06._shared_hint(cfg, plus_output(128, 128, 64, 8, 3), want, plus_output)
    assert "num_warps does not change it" in l06._shared_hint(cfg, per_warp(128, 128, 64, 8, 3), want, per_warp)


def test_shared_pool_fits_and_varies():
    pool = l06.shared_pool()
    assert len(pool) == 24 and {c["num_stages"] for c in pool} == {1, 2, 3, 4}
    assert all(c["num_stages"] * (c["BLOCK_M"] * c["BLOCK_K"] + c["BLOCK_K"] * c["BLOCK_N"]) * 2 <= l06.SMEM_LIMIT
               for c in pool)


@pytest.mark.parametrize("answer, words", [
    ("ld.global.b16", None), ("LDG.E.U16", None), ("  @%p7 ld.global.b16 %rs1, [ %rd9 + 0 ];", None),
    ("/*0eb0*/ @P4 LDG.E.U16 R182, desc[UR24][R158.64] ;", None),
    ("st.global.b16", ["a store"]), ("ld.global.v4.b32", ["does not occur", "ld instructions"]),
    ("wgmma.fence.sync.aligned", ["in the fixed one"]), ("LDGSTS.E.BYPASS.128", ["only in the fixed kernel"]),
    ("", ["must be a string"]), (None, ["must be a string"]),
])
def test_slow_instruction(answer, words):
    why = l06.instruction_problems(answer)
    if words is None:
        assert why is None, why
    else:
        assert why and all(w in why for w in words), why


def test_space_structure():
    good = _space()
    assert l06._structure(good) is None
    assert "at least 4" in l06._structure(good[:2])
    assert "keep it to 12" in l06._structure(good * 3)
    assert "exactly" in l06._structure([{**good[0], "GROUP_M": 8}] + good[1:])
    assert "allowed" in l06._structure([{**good[0], "BLOCK_K": 48}] + good[1:])
    assert "twice" in l06._structure([good[0]] + good[:-1])
    assert "vary at least two" in l06._structure([dict(good[0], num_stages=s) for s in (1, 2, 3, 4)])
    assert "list of dicts" in l06._structure({"BLOCK_M": 128})


def test_space_solution_compiles_and_too_much_shared_memory_is_named():
    assert l06.space_problems(_space(), measure=False) is None
    big = _space()[:3] + [dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4)]
    why = l06.space_problems(big, measure=False)
    assert "out of resources" in why and "262144 B" in why, why


def test_fixed_solution_passes_and_the_stub_is_refused():
    mine = kernel(CELLS["ex3-kernel"], "fixed_matmul_kernel")
    out = grade(f"{LESSON}.fixed", mine)
    assert out.passed, out.message
    stub = CELLS["ex3-kernel"].split("### BEGIN SOLUTION")[0] + "    raise NotImplementedError()\n"
    with pytest.raises(AssertionError, match="not implemented yet"):
        kernel(stub, "fixed_matmul_kernel")


def test_fixed_refuses_the_planted_decorator_with_its_loads():
    """Right numbers are not the fix: a kernel that still may not specialise its strides compiles to one-element
    loads, and the check says so without a GPU."""
    planted = edit(CELLS["ex3-kernel"], "@triton.jit\n",
                   '@triton.jit(do_not_specialize=["stride_am", "stride_ak", "stride_bk", "stride_bn"])\n')
    fails(grade(f"{LESSON}.fixed", kernel(planted, "fixed_matmul_kernel")), "one element at a time",
          "16-bit load", "look at the decorator")


def test_a_kernel_that_does_not_compile_is_told_the_compilers_reason_and_line():
    """Compiled at the lesson's tiles, ``tl.dot(b, a, acc)`` is refused by the compiler: the check gives its
    reason and the line it marks, not the kernel's source cut off before them."""
    from kernels.checks.engine import CheckFailed

    swapped = kernel(edit(CELLS["ex3-kernel"], "tl.dot(a, b, acc)", "tl.dot(b, a, acc)"), "fixed_matmul_kernel")
    with pytest.raises(CheckFailed) as info:
        l06._loads_wide(swapped)
    said = str(info.value)
    assert said.startswith("fixed_matmul_kernel does not compile for sm_90: ") and "for a GPU (sm_90)" not in said
    assert said.endswith("at `acc = tl.dot(b, a, acc)`"), said
    assert "BEGIN SOLUTION" not in said and len(said) < 300


def test_narrow_loads_point_at_the_decorator_only_where_it_keeps_something_unspecialised():
    """A kernel whose decorator specialises everything yet still compiles to one-element loads (a mask such as
    ``<= K``) is sent to its masks and offsets, not told to look at a decorator it does not have."""
    plain = kernel(CELLS["ex3-kernel"], "fixed_matmul_kernel")
    planted = kernel(edit(CELLS["ex3-kernel"], "@triton.jit\n", '@triton.jit(do_not_specialize=["stride_ak"])\n'),
                     "fixed_matmul_kernel")
    assert "look at the decorator" in l06._why_narrow(planted)
    why = l06._why_narrow(plain)
    assert "decorator keeps everything specialised" in why and "<= K" in why, why


def test_narrow_loads_read_the_decorator_through_the_compile_pass_recorder():
    """The notebook's check compiles the kernel for sm_90 through a Recorder that wraps it; the hint must still see
    the decorator behind it, not tell a learner with `do_not_specialize` that it keeps everything specialised."""
    from kernels.checks.provenance import Recorder

    planted = kernel(edit(CELLS["ex3-kernel"], "@triton.jit\n", '@triton.jit(do_not_specialize=["stride_ak"])\n'),
                     "fixed_matmul_kernel")
    assert "look at the decorator" in l06._why_narrow(Recorder(planted))
    why = l06._why_narrow(Recorder(kernel(CELLS["ex3-kernel"], "fixed_matmul_kernel")))
    assert "decorator keeps everything specialised" in why, why


def test_tma_copies_count_as_wide_loads():
    """Tensor-descriptor (TMA) copies move whole tiles and have no per-thread width: the wide-load check passes
    them instead of telling a kernel built on them that it loads a and b one element at a time."""
    from grader.zoo.l06_profile_compile_autotune import _DESCRIPTORS

    l06._loads_wide(kernel(_DESCRIPTORS, "fixed_matmul_kernel"))
