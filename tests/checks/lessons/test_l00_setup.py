"""Lesson 00's checks fail answers with a classic bug, each with a message that names the fault (the answers run
as one script, as a notebook's top level does: ``broken_outcomes`` in conftest.py)."""

from lessonkit import classic_bug_test

BROKEN = """
@triton.jit
def add_no_mask(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))


@triton.jit
def bias_assumes_contiguous(x_ptr, bias_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask)
    tl.store(out_ptr + row * stride_om + offs, x + tl.load(bias_ptr + offs, mask=mask), mask=mask)


@triton.jit
def bias_out_rows_N_apart(x_ptr, bias_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = offs < N
    x = tl.load(x_ptr + row * stride_xm + offs, mask=mask)
    tl.store(out_ptr + row * N + offs, x + tl.load(bias_ptr + offs, mask=mask), mask=mask)

from kernels.vector_add.naive import _naive_vector_add_kernel
"""

# each broken answer: the exercise, the objects its check is given, and what the message must mention
EXPECT = {
    "vector_add: no mask": ("00_setup.vector_add", "add_no_mask", "out of bounds"),
    "vector_add: the package's kernel": ("00_setup.vector_add", "_naive_vector_add_kernel", "your own"),
    "add_bias: assumes row stride N": ("00_setup.add_bias", "bias_assumes_contiguous", "row stride 320"),
    "add_bias: out's rows N apart": ("00_setup.add_bias", "bias_out_rows_N_apart",
                                     "between the elements of `out` (a strided view"),
}

test_a_classic_bug_fails_its_check_with_a_fitting_message = classic_bug_test(EXPECT)
