"""Lesson 01's checks fail answers with a classic bug, each with a message that names the fault (the answers run
as one script, as a notebook's top level does: ``broken_outcomes`` in conftest.py)."""

from lessonkit import classic_bug_test

BROKEN = """
@triton.jit
def copy_one_block_per_program(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def column_zero(x_ptr, out_ptr, M, stride_m, col, BLOCK_M: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask = offs < M
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride_m, mask=mask), mask=mask)


def sectors_without_rounding(n, stride, itemsize):
    return n * stride * itemsize


def sectors_from_the_package(n, stride, itemsize):
    from kernels.memory.strided import bytes_moved
    return bytes_moved((n - 1) * stride + 1, stride, itemsize) - n * itemsize
"""

# each broken answer: the exercise, the objects its check is given, and what the message must mention
EXPECT = {
    "copy: one block per program": ("01_memory_hierarchy.copy", "copy_one_block_per_program", "not written"),
    "copy_speed: one block per program": ("01_memory_hierarchy.copy_speed", "copy_one_block_per_program",
                                          "not written"),
    "column: always column 0": ("01_memory_hierarchy.column", "column_zero", "relative error"),
    "sector_bytes: no sector rounding": ("01_memory_hierarchy.sector_bytes", "sectors_without_rounding", ""),
    "sector_bytes: calls the package": ("01_memory_hierarchy.sector_bytes", "sectors_from_the_package", "kernels."),
}

test_a_classic_bug_fails_its_check_with_a_fitting_message = classic_bug_test(EXPECT)


def test_the_copy_speed_check_says_on_the_cpu_when_every_block_is_masked():
    """Under the interpreter nothing is timed, but the sm_90 compile of the check's launches shows what the GPU will
    time: a copy masked on every block has no 16-byte load or store, and the check's line says so; the lesson's own
    copy (full blocks unmasked) gets no note."""
    from lessonkit import zoo_source

    from kernels.checks import provenance
    from kernels.checks.provenance import from_cells

    def notes(name):
        source = zoo_source("01_memory_hierarchy.copy_speed" if name == "solution" else "01_memory_hierarchy.copy",
                            name)
        ks = from_cells(["import triton\nimport triton.language as tl\n", source], "copy_kernel")
        return provenance.verify_compiles("01_memory_hierarchy.copy_speed", False,
                                          [{"entry": ks.entry, "text": ks.text}], [None])

    assert notes("solution") == []
    (said,) = notes("masked-every-block")
    assert "none of 16 (ld.global.v4): every block is masked" in said and "0.73" in said, said
