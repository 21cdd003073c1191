"""Lesson 02's checks fail answers with a classic bug, each with a message that names the fault (the answers run
as one script, as a notebook's top level does: ``broken_outcomes`` in conftest.py)."""

from lessonkit import classic_bug_test, edit, zoo_source

BROKEN = """
@triton.jit
def naive_state_not_stored(q_ptr, k_ptr, v_ptr, o_ptr, s_ptr, scale, T, H, K, V,
                           stride_qb, stride_qt, stride_qh, stride_vb, stride_vt, stride_vh,
                           BK: tl.constexpr, BV: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    offs_k = tl.arange(0, BK)
    offs_v = tl.arange(0, BV)
    mk = offs_k < K
    mv = offs_v < V
    s = tl.zeros([BK, BV], dtype=tl.float32)
    for t in range(T):
        q = tl.load(q_ptr + b * stride_qb + t * stride_qt + h * stride_qh + offs_k, mask=mk, other=0.0)
        k = tl.load(k_ptr + b * stride_qb + t * stride_qt + h * stride_qh + offs_k, mask=mk, other=0.0)
        v = tl.load(v_ptr + b * stride_vb + t * stride_vt + h * stride_vh + offs_v, mask=mv, other=0.0)
        s += k.to(tl.float32)[:, None] * v.to(tl.float32)[None, :]
        o = tl.sum(q.to(tl.float32)[:, None] * s, axis=0) * scale
        tl.store(o_ptr + b * stride_vb + t * stride_vt + h * stride_vh + offs_v, o.to(o_ptr.dtype.element_ty),
                 mask=mv)


def naive_bytes_no_zeroing(B, T, H, K, V, itemsize):
    return B * T * H * (2 * K + 2 * V) * itemsize + 2 * T * B * H * K * V * 4


def fused_bytes_once(B, T, H, K, V, itemsize, BV):
    return B * T * H * (2 * K + 2 * V) * itemsize + B * H * K * V * 4

""" + edit(zoo_source("02_naive_hbm_loops.fused", "no-scale"), "def fused_kernel(", "def fused_without_scale(") \
  + "\n\n" + edit(edit(zoo_source("02_naive_hbm_loops.fused_speed", "solution"), "def fused_kernel(",
                       "def fused_state_K_rows("),
                  "s = tl.zeros([BK, BV], dtype=tl.float32)", "s = tl.zeros([K, BV], dtype=tl.float32)")

# each broken answer: the exercise, the objects its check is given, and what the message must mention
EXPECT = {
    "naive: state kept in registers": ("02_naive_hbm_loops.naive", "naive_state_not_stored", "not written"),
    "fused: scale forgotten": ("02_naive_hbm_loops.fused", "fused_without_scale",
                               "every element is 4 times the reference, and the final state in s is right: look at "
                               "the scale"),
    "fused: a state tile sized by the runtime K": ("02_naive_hbm_loops.fused", "fused_state_K_rows",
                                                   "Shape element 0 must have type `constexpr"),
    "fused_speed: scale forgotten": ("02_naive_hbm_loops.fused_speed", "fused_without_scale", "look at the scale"),
    "bytes: zeroing and V blocks not counted": ("02_naive_hbm_loops.bytes",
                                                "naive_bytes_no_zeroing, fused_bytes_once", ""),
}

test_a_classic_bug_fails_its_check_with_a_fitting_message = classic_bug_test(EXPECT)


def test_a_wrong_byte_count_is_shown_on_the_shape_it_is_wrong_on():
    """The counts come back as a vector over shapes drawn at random: the message names the first shape each count
    is wrong on, with both numbers as integers, not an index into the vector."""
    from lessonkit import assert_fails, grade

    def naive_bytes(B, T, H, K, V, itemsize):
        state = B * H * K * V * 4
        return B * T * H * (2 * K + 2 * V) * itemsize + state + 2 * T * state

    def fused_once(B, T, H, K, V, itemsize, BV):  # q and k counted once, not once per V block
        return B * T * H * (2 * K + 2 * V) * itemsize + B * H * K * V * 4

    out = grade("02_naive_hbm_loops.bytes", naive_bytes, fused_once)
    assert_fails(out, "fused_bytes(B=4, T=2048, H=16, K=64, V=64, itemsize=2, BV=32) returned 68,157,440, "
                      "expected 101,711,872 (", "of 12 shapes differ)")
    assert "naive_bytes(" not in out.message


def test_a_byte_count_returned_as_a_float_is_told_how_to_make_it_an_int():
    """`/` in place of `//` (or math.ceil(V / BV) times a float) gives a float: the message says how to stay in
    integers, not only that an int was expected."""
    from lessonkit import assert_fails, grade

    def naive_bytes(B, T, H, K, V, itemsize):
        state = B * H * K * V * 4
        return B * T * H * (2 * K + 2 * V) * itemsize + state + 2 * T * state

    def fused_true_division(B, T, H, K, V, itemsize, BV):
        return B * T * H * (2 * K * (V + BV - 1) / BV + 2 * V) * itemsize + B * H * K * V * 4

    assert_fails(grade("02_naive_hbm_loops.bytes", naive_bytes, fused_true_division), "expected an int", "`//`")
