"""Lesson 02's zoo: the naive recurrence (state through global memory), the fused one (state in registers) and
its speed, the byte counts."""

from . import Entry, edit, editor, moved, solution

__all__ = ["ENTRIES"]

NAIVE = solution("02_naive_hbm_loops", "naive_kernel")

FUSED = solution("02_naive_hbm_loops", "fused_kernel")

_naive = editor("02_naive_hbm_loops.naive", NAIVE)
_fused = editor("02_naive_hbm_loops.fused", FUSED)

_NO_SCALE = (".to(tl.float32) * scale\n", ".to(tl.float32)\n")
_AS_NAIVE = ("def fused_kernel(", "def naive_kernel(")
_AS_FUSED = ("def naive_kernel(", "def fused_kernel(")

NAIVE_ENTRIES = [
    Entry("02_naive_hbm_loops.naive", "state-in-registers", edit(
        FUSED, *_AS_NAIVE, "j, bh = tl.program_id(axis=0), tl.program_id(axis=1)", "j, bh = 0, tl.program_id(axis=0)"),
        fault="round trip", why="exercise 2's fused kernel on the naive grid: right values, but the state never goes "
                                "through s"),
    _naive("padded-state", "s_ptrs = s_ptr + bh.to(tl.int64) * K * V + offs_k[:, None] * V + offs_v[None, :]",
           "s_ptrs = s_ptr + bh * BK * BV + offs_k[:, None] * BV + offs_v[None, :]",
           "tl.store(s_ptrs, tl.zeros([BK, BV], dtype=tl.float32), mask=mask_s)",
           "tl.store(s_ptrs, tl.zeros([BK, BV], dtype=tl.float32))",
           "s = tl.load(s_ptrs, mask=mask_s, other=0.0) + k[:, None] * v[None, :]",
           "s = tl.load(s_ptrs) + k[:, None] * v[None, :]", "tl.store(s_ptrs, s, mask=mask_s)", "tl.store(s_ptrs, s)",
           fault="out of bounds",
           why="addresses the state as a padded [B*H, BK, BV] block: writes far past the end of s"),
    _naive("k-load-unmasked", "k = tl.load(k_ptr + qk_base + t * stride_qt + offs_k, mask=mask_k, other=0.0)",
           "k = tl.load(k_ptr + qk_base + t * stride_qt + offs_k)", fault="out of bounds",
           why="an unmasked k load: past K it reads the next head's k, and past the end of k at the last step"),
    _naive("k-with-v-strides", "k = tl.load(k_ptr + qk_base + t * stride_qt + offs_k",
           "k = tl.load(k_ptr + b * stride_vb + h * stride_vh + t * stride_vt + offs_k",
           fault="out of bounds|relative error", why="addresses k with v's strides"),
    _naive("no-zero-state", "    tl.store(s_ptrs, tl.zeros([BK, BV], dtype=tl.float32), mask=mask_s)\n", "",
           fault="NaN", why="never writes S_0 = 0: the first step adds to whatever s held"),
    _naive("output-before-update", "        s = tl.load(s_ptrs, mask=mask_s, other=0.0) + k[:, None] * v[None, :]\n"
           "        tl.store(s_ptrs, s, mask=mask_s)\n        o = tl.sum(q[:, None] * s, axis=0)\n",
           "        s = tl.load(s_ptrs, mask=mask_s, other=0.0)\n        o = tl.sum(q[:, None] * s, axis=0)\n"
           "        s += k[:, None] * v[None, :]\n        tl.store(s_ptrs, s, mask=mask_s)\n",
           fault="before token t", why="o_t from S_{t-1}: misses the current token"),
    _naive("no-scale", *_NO_SCALE, fault="relative error", why="forgets the scale"),
    _naive("swapped-batch-head", "b, h = bh // H, bh % H", "b, h = bh % H, bh // H", fault="out of bounds",
           why="splits the program id the wrong way round"),
    _naive("skips-last-step", "for t in range(T):", "for t in range(T - 1):", fault="not written|relative error",
           why="stops one step early: the last output row is never written, the state misses a token"),
    _naive("one-v-column", "offs_v = tl.arange(0, BV)", "offs_v = tl.arange(0, BV) * 0",
           fault="relative error|not written", why="every lane reads column 0 of v"),
    _naive("pointer-steps", "    for t in range(T):\n        q = tl.load(q_ptr + qk_base + t * stride_qt + offs_k",
           "    for t in range(T):\n        q = tl.load(q_ptr + (qk_base + t * stride_qt) + offs_k", wrong=False,
           why="the same addresses, grouped differently"),
    _naive("reload-after-store", "        o = tl.sum(q[:, None] * s, axis=0)\n",
           "        o = tl.sum(q[:, None] * tl.load(s_ptrs, mask=mask_s, other=0.0), axis=0)\n", wrong=False,
           why="reads the state back from s for the output: one more round trip, same values"),
    _naive("no-upcast", ".to(tl.float32) * scale\n", " * scale\n",
           "k = tl.load(k_ptr + qk_base + t * stride_qt + offs_k, mask=mask_k, other=0.0).to(tl.float32)",
           "k = tl.load(k_ptr + qk_base + t * stride_qt + offs_k, mask=mask_k, other=0.0)", wrong=False,
           why="q and k in their own dtype; the state stays fp32"),
]

FUSED_ENTRIES = [
    _fused("forgot-v-block", "offs_v = j * BV + tl.arange(0, BV)", "offs_v = tl.arange(0, BV)",
           fault="not written", why="every V block's program handles block 0"),
    _fused("state-row-stride-BV", "offs_k[:, None] * V + offs_v[None, :]", "offs_k[:, None] * BV + offs_v[None, :]",
           fault="out of bounds|relative error|not written", why="stores the final state with a row stride of BV"),
    _fused("no-final-state", "    tl.store(s_ptrs, s, mask=mask_k[:, None] & mask_v[None, :])\n", "",
           fault="not written", why="never writes the final state"),
    _fused("no-scale", *_NO_SCALE, fault="relative error", why="forgets the scale"),
    _fused("output-before-update", *moved("        s += k[:, None] * v[None, :]\n", "        q_ptrs += stride_qt\n"),
           fault="before token t", why="o_t from S_{t-1}: misses the current token (at T=1 o is all zero, which "
                                       "the scale's diagnosis once took for a factor of 0)"),
    _fused("v-load-unmasked", "v = tl.load(v_ptrs, mask=mask_v, other=0.0)", "v = tl.load(v_ptrs)",
           fault="out of bounds", why="an unmasked v load: the last V block reads past each row, and past v's end"),
    _fused("q-with-v-strides", "q_ptrs = q_ptr + b * stride_qb + h * stride_qh + offs_k",
           "q_ptrs = q_ptr + b * stride_vb + h * stride_vh + offs_k", fault="out of bounds|relative error",
           why="addresses q with v's strides"),
    Entry("02_naive_hbm_loops.fused", "naive-kernel", edit(NAIVE, *_AS_FUSED), fault="out of bounds|relative error",
          why="the naive kernel on the fused grid (cdiv(V, BV), B*H)"),
    _fused("o-by-program", "o_ptrs = o_ptr + b * stride_vb + h * stride_vh + offs_v",
           "o_ptrs = o_ptr + bh * stride_vh + offs_v", fault="not written|out of bounds|relative error",
           why="addresses o with the program id as a head index"),
    _fused("skips-last-step", "for _ in range(T):", "for _ in range(T - 1):", fault="not written",
           why="stops one step early"),
    _fused("state-pointer-per-step", "        q_ptrs += stride_qt\n",
           "        q_ptrs = q_ptr + b * stride_qb + h * stride_qh + offs_k + (_ + 1) * stride_qt\n", wrong=False,
           why="recomputes q's pointers from the step number"),
    Entry("02_naive_hbm_loops.fused", "rank-one-helper", '''@triton.jit
def _rank_one(s, k, v):
    return s + k.to(tl.float32)[:, None] * v.to(tl.float32)[None, :]


''' + edit(FUSED, "        s += k[:, None] * v[None, :]\n", "        s = _rank_one(s, k, v)\n"), wrong=False,
          why="the state update in a @triton.jit helper"),
    _fused("int64-state-offset", "s_ptrs = s_ptr + bh.to(tl.int64) * K * V", "s_ptrs = s_ptr + bh * (K * V)",
           wrong=False, why="32-bit state offsets: fine at these sizes"),
]

FUSED_SPEED = [
    _fused("solution", exercise="02_naive_hbm_loops.fused_speed", wrong=False,
           why="the state in registers: about 2.5x the naive kernel on an H200"),
    Entry("02_naive_hbm_loops.fused_speed", "state-round-trip", edit(
        FUSED, "    s_ptrs = s_ptr + bh.to(tl.int64) * K * V + offs_k[:, None] * V + offs_v[None, :]\n", "",
        "    tl.store(s_ptrs, s, mask=mask_k[:, None] & mask_v[None, :])\n", "",
        "    s = tl.zeros([BK, BV], dtype=tl.float32)\n",
        "    s_ptrs = s_ptr + bh.to(tl.int64) * K * V + offs_k[:, None] * V + offs_v[None, :]\n"
        "    tl.store(s_ptrs, tl.zeros([BK, BV], dtype=tl.float32), mask=mask_k[:, None] & mask_v[None, :])\n",
        "        s += k[:, None] * v[None, :]\n",
        "        s = tl.load(s_ptrs, mask=mask_k[:, None] & mask_v[None, :], other=0.0) + k[:, None] * v[None, :]\n"
        "        tl.store(s_ptrs, s, mask=mask_k[:, None] & mask_v[None, :])\n"),
        where=("gpu",), fault="too slow",
        why="the fused grid with the naive kernel's round trip: right values, the naive kernel's speed"),
]

_BYTES = '''def naive_bytes(B, T, H, K, V, itemsize):
{naive}

def fused_bytes(B, T, H, K, V, itemsize, BV):
{fused}'''
_NAIVE_OK = ("    io = B * T * H * (2 * K + 2 * V) * itemsize\n    state = B * H * K * V * 4\n"
             "    return io + state + T * 2 * state\n")
_FUSED_OK = "    return B * T * H * (2 * K * -(-V // BV) + 2 * V) * itemsize + B * H * K * V * 4\n"


def _bytes(name, naive=_NAIVE_OK, fused=_FUSED_OK, **kw):
    return Entry("02_naive_hbm_loops.bytes", name, _BYTES.format(naive=naive, fused=fused), **kw)


BYTES = [
    _bytes("no-zeroing", naive="    return B * T * H * (2 * K + 2 * V) * itemsize + T * 2 * B * H * K * V * 4\n",
           fault="values differ", why="forgets the zeroed state written before the loop"),
    _bytes("one-way-state", naive=_NAIVE_OK.replace("T * 2 * state", "T * state"), fault="values differ",
           why="counts the state once per step, not read and written"),
    _bytes("qk-once", fused="    return B * T * H * (2 * K + 2 * V) * itemsize + B * H * K * V * 4\n",
           fault="values differ", why="reads q and k once, not once per V block"),
    _bytes("state-in-itemsize", naive=_NAIVE_OK.replace("K * V * 4", "K * V * itemsize"), fault="values differ",
           why="counts the fp32 state in the inputs' itemsize"),
    _bytes("floor-blocks", fused=_FUSED_OK.replace("-(-V // BV)", "(V // BV)"), fault="values differ",
           why="floor instead of ceiling for the number of V blocks"),
    _bytes("per-tensor", naive="    per_step = (2 * K + 2 * V) * itemsize + 2 * K * V * 4\n"
           "    return B * H * (T * per_step + K * V * 4)\n",
           fused="    blocks = math.ceil(V / BV)\n    qk = 2 * B * T * H * K * itemsize * blocks\n"
           "    return qk + 2 * B * T * H * V * itemsize + B * H * K * V * 4\n", wrong=False,
           why="per-tensor sums, math.ceil for the blocks"),
    _bytes("solution", wrong=False, why="the lesson's counts"),
    _bytes("loop-over-blocks", fused="    total = B * H * K * V * 4\n    for start in range(0, V, BV):\n"
           "        total += B * T * H * (2 * K + 2 * min(BV, V - start)) * itemsize\n    return total\n",
           wrong=False, why="adds up the V blocks one by one"),
]

ENTRIES = NAIVE_ENTRIES + FUSED_ENTRIES + FUSED_SPEED + BYTES
