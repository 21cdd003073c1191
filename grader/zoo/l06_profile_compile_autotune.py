"""Plausible answers to lesson 06's exercises: shared-memory formulas, instruction names, fixes, tuning spaces."""

import json

from . import Entry, edit

LESSON = "06_profile_compile_autotune"
PREDICT = '''def predict_shared(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages):
    return {body}
'''


def _predict(name, body, **kw):
    return Entry(f"{LESSON}.predict_shared", name, PREDICT.format(body=body), **kw)


def _instruction(name, value, **kw):
    """An answer naming the slow instruction, and its cell as the learner writes it (``SLOW_INSTRUCTION = "..."``)."""
    return Entry(f"{LESSON}.slow_instruction", name, f"SLOW_INSTRUCTION = {json.dumps(value)}",
                 namespace=(("SLOW_INSTRUCTION", value),), **kw)


def _space(name, source, **kw):
    """A tuning space, as its cell writes it (``SPACE = [...]``)."""
    value = eval(source.split("=", 1)[1].strip(), {"dict": dict})
    return Entry(f"{LESSON}.autotune_space", name, source, namespace=(("SPACE", value),), **kw)


KERNEL = '''@triton.jit{decorator}
def fixed_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                        stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id({pid_m}) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id({pid_n}) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, {k_end}, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * stride_am + ({koff})[None, :] * stride_ak,
                    mask={mask_a}, other=0.0)
        b = tl.load(b_ptr + {b_addr},
                    mask={mask_b}, other=0.0)
        acc = {dot}
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask={mask_c})
'''
_GOOD = dict(decorator="", pid_m="0", pid_n="1", k_end="K", koff="k + ks",
             mask_a="(rows[:, None] < M) & ((k + ks)[None, :] < K)",
             b_addr="(k + ks)[:, None] * stride_bk + cols[None, :] * stride_bn",
             mask_b="((k + ks)[:, None] < K) & (cols[None, :] < N)", dot="tl.dot(a, b, acc)",
             mask_c="(rows[:, None] < M) & (cols[None, :] < N)")
_DNS = '(do_not_specialize=["M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", ' \
       '"stride_cn"])'


def _kernel(name, exercise="fixed", **changes):
    kw = {k: changes.pop(k) for k in list(changes) if k in _GOOD}
    return Entry(f"{LESSON}.{exercise}", name, KERNEL.format(**{**_GOOD, **kw}), **changes)


_INCREMENTS = '''@triton.jit
def _tile_mask(rows, cols, R, C):
    return (rows[:, None] < R) & (cols[None, :] < C)


@triton.jit
def fixed_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                        stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=_tile_mask(rows, ks, M, K - k * BLOCK_K), other=0.0)
        b = tl.load(b_ptrs, mask=_tile_mask(ks, cols, K - k * BLOCK_K, N), other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=_tile_mask(rows, cols, M, N))
'''

_BLOCK_POINTERS = '''@triton.jit
def fixed_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                        stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    a_blk = tl.make_block_ptr(a_ptr, shape=(M, K), strides=(stride_am, stride_ak), offsets=(pid_m * BLOCK_M, 0),
                              block_shape=(BLOCK_M, BLOCK_K), order=(1, 0))
    b_blk = tl.make_block_ptr(b_ptr, shape=(K, N), strides=(stride_bk, stride_bn), offsets=(0, pid_n * BLOCK_N),
                              block_shape=(BLOCK_K, BLOCK_N), order=(1, 0))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_blk, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_blk, boundary_check=(0, 1), padding_option="zero")
        acc = tl.dot(a, b, acc)
        a_blk = tl.advance(a_blk, (0, BLOCK_K))
        b_blk = tl.advance(b_blk, (BLOCK_K, 0))
    c_blk = tl.make_block_ptr(c_ptr, shape=(M, N), strides=(stride_cm, stride_cn),
                              offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N), block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
    tl.store(c_blk, acc.to(c_ptr.dtype.element_ty), boundary_check=(0, 1))
'''

_DESCRIPTORS = '''@triton.jit
def fixed_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                        stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N])
    m0 = tl.program_id(0) * BLOCK_M
    n0 = tl.program_id(1) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        acc = tl.dot(a_desc.load([m0, k]), b_desc.load([k, n0]), acc)
    c_desc.store([m0, n0], acc.to(c_ptr.dtype.element_ty))
'''

_SPACE_GOOD = '''SPACE = [dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3),
         dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3),
         dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4),
         dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=3)]
'''

ENTRIES = [
    _predict("one-stage", "(BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * 2", fault="one stage's tiles",
             why="counts the tiles once, forgetting the pipeline's copies"),
    _predict("elements", "num_stages * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N)", fault="counts elements",
             why="elements, not bytes"),
    _predict("fp32-bytes", "num_stages * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * 4", fault="4 bytes per element",
             why="takes the accumulator's fp32 for the tiles' fp16"),
    _predict("stages-minus-one", "max(1, num_stages - 1) * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * 2",
             fault="num_stages - 1", why="counts only the loads in flight ahead of the current iteration"),
    _predict("nothing-at-one-stage",
             "num_stages * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * 2 if num_stages > 1 else 0", visible=False,
             fault="tl.dot still reads its operands from shared memory",
             why="no pipeline at one stage, so no shared memory: the tiles are staged there all the same"),
    _predict("a-tile-only", "num_stages * BLOCK_M * BLOCK_K * 2", fault="A's tile alone",
             why="stages A's tile and forgets B's (at square tiles the same number as counting elements)"),
    _predict("output-tile", "num_stages * BLOCK_M * BLOCK_N * 4", fault="output tile",
             why="stages the accumulator instead of the input tiles"),
    _predict("per-warp", "num_warps * num_stages * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * 2",
             fault="num_warps does not change it", why="shared memory per warp"),
    _predict("float", "num_stages * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * 2.0", wrong=False,
             why="a whole number of bytes written as a float (as a true division gives it)"),
    Entry(f"{LESSON}.predict_shared", "numpy-integer", "import numpy as np\n\n\n" + PREDICT.format(
        body="num_stages * 2 * np.prod([BLOCK_K, BLOCK_M + BLOCK_N])"), wrong=False,
          why="the formula through np.prod, which returns a numpy integer"),
    _predict("plus-output", "num_stages * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * 2 + BLOCK_M * BLOCK_N * 2",
             fault="output tile", why="adds the output tile, which lives in registers, not in shared memory"),
    _predict("warps-scaled", "num_stages * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * 2 * num_warps // 8",
             fault="num_warps does not change it",
             why="scales with num_warps: right at 8 warps, wrong at 4 (shared memory is the program's)"),
    _predict("square-tiles", "num_stages * 2 * BLOCK_M * BLOCK_K * 2", fault="shared memory", visible=False,
             why="assumes BLOCK_N == BLOCK_M: right for the lesson's square tiles, wrong for 64 x 128"),
    _predict("bytes", "num_stages * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * 2", wrong=False,
             why="the formula"),
    _predict("bytes-helper", "int(sum(t * 2 for t in (BLOCK_M * BLOCK_K, BLOCK_K * BLOCK_N)) * num_stages)",
             wrong=False, why="the same, written per tile"),
    _predict("kib", "(num_stages * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * 2 // 1024) * 1024", wrong=False,
             why="in KiB and back: exact, every tile size here is a multiple of 512 elements"),

    _instruction("vector-load", "ld.global.v4.b32", fault="does not occur",
                 why="the fast kernel's load, which the planted one does not have"),
    _instruction("mma", "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", fault="in the fixed one",
                 why="the tensor-core instruction, the same in both"),
    _instruction("narrow-store", "st.global.b16", fault="a store",
                 why="only the planted kernel has it, but it runs once per program"),
    _instruction("shared-store", "st.shared.b16", fault="a store",
                 why="the planted kernel's copy into shared memory, not the wait"),
    _instruction("cp-async", "cp.async.cg.shared.global", fault="only in the fixed kernel",
                 why="the fixed kernel's instruction"),
    _instruction("prose", "the loads are not vectorised", fault="does not occur", why="a description, not a mnemonic"),
    _instruction("number", 16, fault="must be a string", why="the width, not the instruction"),
    _instruction("ptx", "ld.global.b16", wrong=False, why="the PTX mnemonic"),
    _instruction("sass", "LDG.E.U16", wrong=False, why="the SASS mnemonic"),
    _instruction("line", "@%p1 ld.global.b16 { %rs1 }, [ %rd5 + 0 ];", wrong=False,
                 why="a whole predicated line of the listing"),
    _instruction("sass-line", "/*0eb0*/ @P4 LDG.E.U16 R182, desc[UR24][R158.64] ;", wrong=False,
                 why="a whole line of the SASS listing, its address and predicate included, as the lesson prints it"),

    _kernel("no-k-mask", mask_a="rows[:, None] < M", mask_b="cols[None, :] < N", fault="out of bounds|NaN",
            why="drops the K masks: K = 70 is not a multiple of 32"),
    _kernel("no-store-mask", mask_c="rows[:, None] < M", fault="out of bounds",
            why="masks the store on rows only"),
    _kernel("row-mask-only-a", mask_a="(k + ks)[None, :] < K", fault="out of bounds|NaN",
            why="forgets the rows past M in a's last tile"),
    _kernel("b-strides-swapped", b_addr="(k + ks)[:, None] * stride_bn + cols[None, :] * stride_bk",
            fault="relative error|out of bounds", why="addresses b with its strides swapped"),
    _kernel("b-unit-inner-stride", b_addr="(k + ks)[:, None] * stride_bk + cols[None, :]",
            fault="relative error|out of bounds", why="assumes b's columns are contiguous: not for a column-major b"),
    Entry(f"{LESSON}.fixed", "a-unit-inner-stride",
          edit(KERNEL.format(**_GOOD), "(k + ks)[None, :] * stride_ak", "(k + ks)[None, :]"),
          fault="relative error|out of bounds", visible=False,
          why="assumes a's rows are contiguous (no stride_ak): not for a column-major a"),
    Entry(f"{LESSON}.fixed", "fp16-accumulator",
          edit(KERNEL.format(**_GOOD), "dtype=tl.float32", "dtype=tl.float16",
               "tl.dot(a, b, acc)", "acc + tl.dot(a, b, out_dtype=tl.float16)"),
          fault="relative error|NaN or inf|acc has initial type", visible=False,
          why="accumulates in fp16 (a zeroed fp16 accumulator): the running sums overflow fp16 (compiled for a GPU, "
              "Triton refuses the loop: the accumulator's fp16 becomes fp32 in it)"),
    _kernel("first-k-tile-only", koff="ks", mask_a="(rows[:, None] < M) & (ks[None, :] < K)",
            b_addr="ks[:, None] * stride_bk + cols[None, :] * stride_bn",
            mask_b="(ks[:, None] < K) & (cols[None, :] < N)", fault="relative error",
            why="forgets to advance along K: multiplies the first tiles again and again"),
    _kernel("skips-last-k-tile", k_end="K - BLOCK_K", fault="relative error",
            why="stops one tile early, as if K were a multiple of BLOCK_K plus one"),
    _kernel("operands-swapped", dot="tl.dot(b, a, acc)", fault="relative error|incompatible at `acc = tl.dot(b, a",
            why="b times a: wrong values at square tiles; at the lesson's own the compiler's reason and the line it "
                "marks, not the kernel's source cut short"),
    _kernel("no-accumulate", dot="tl.dot(a, b)", fault="relative error",
            why="overwrites the accumulator: only the last K tile counts"),
    _kernel("pid-axes-swapped", pid_m="1", pid_n="0", fault="not written|out of bounds|relative error", visible=False,
            why="takes the row tile from axis 1 of a grid whose axis 0 runs over rows"),
    _kernel("planted-copy", decorator=_DNS, where=("gpu",), fault="too slow", exercise="fixed_speed",
            why="the planted kernel itself: right numbers, one-element loads"),
    _kernel("fixed", why="the fix: the same body, specialised as usual", wrong=False),
    _kernel("k-mask-one-past", mask_a="(rows[:, None] < M) & ((k + ks)[None, :] <= K)",
            mask_b="((k + ks)[:, None] <= K) & (cols[None, :] < N)", fault="out of bounds",
            why="masks K with <=: reads one element past each row of a and one row past the end of b"),
    _kernel("fixed-sizes-only", decorator='(do_not_specialize=["M", "N", "K"])', fault="one element at a time",
            why="keeps one binary for all sizes: the masks on K and N no longer prove 8 elements alike, every load "
                "is one element wide"),
    _kernel("fixed-rows-only", decorator='(do_not_specialize=["M"])', wrong=False,
            why="one binary for every number of rows: the row mask is constant along a row of a, loads stay wide"),
    _kernel("planted-copy", decorator=_DNS, fault="one element at a time",
            why="the planted kernel itself: right numbers, and its compile still loads element by element"),
    _kernel("strides-not-specialised", fault="one element at a time",
            decorator='(do_not_specialize=["stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", '
                      '"stride_cn"])',
            why="lets the sizes specialise but not the strides: a unit inner stride is no longer known"),
    _kernel("one-stride-not-specialised", decorator='(do_not_specialize=["stride_ak"])', fault="one element at a time",
            why="keeps one stride unspecialised: b's tiles load 16 bytes at a time, a's one element at a time, at "
                "about the planted kernel's speed"),
    _kernel("fixed-speed", exercise="fixed_speed", wrong=False, why="the fix, timed on a GPU"),
    Entry(f"{LESSON}.fixed", "pointer-increments", _INCREMENTS, wrong=False,
          why="pointers advanced by BLOCK_K each step, a @triton.jit mask helper, a tile-count loop"),
    Entry(f"{LESSON}.fixed", "block-pointers", _BLOCK_POINTERS, wrong=False,
          why="tl.make_block_ptr tiles, advanced along K, edges by boundary_check"),
    Entry(f"{LESSON}.fixed", "block-pointers-unchecked",
          _BLOCK_POINTERS.replace(", boundary_check=(0, 1)", "").replace(', padding_option="zero"', ""),
          fault="out of bounds", why="block pointers without boundary_check: the edge tiles reach past a, b and c"),
    Entry(f"{LESSON}.fixed", "tensor-descriptors", _DESCRIPTORS, fault="16-byte aligned",
          why="TMA tiles through tl.make_tensor_descriptor: wide loads, but a descriptor's outer strides must be "
              "multiples of 16 bytes (K = 70 fp16 is not) and its inner stride 1 (a column-major a is not)"),

    _space("too-few", "SPACE = [dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3)]",
           fault="at least 4", why="one configuration is not a search"),
    _space("too-many", "SPACE = [dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=k, num_warps=w, num_stages=3) "
           "for m in (64, 128) for n in (64, 128) for k in (32, 64) for w in (4, 8)]", fault="keep it to 12",
           why="16 configurations: the first call would compile and time all of them"),
    _space("too-much-smem", _SPACE_GOOD.replace("BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3",
                                                "BLOCK_N=256, BLOCK_K=128, num_warps=8, num_stages=4"),
           fault="out of resources", why="4 stages of 128 x 128 + 128 x 256 fp16 tiles: 384 KiB"),
    _space("missing-key", _SPACE_GOOD.replace(", num_stages=3)", ")", 1), fault="exactly",
           why="leaves num_stages to the default"),
    _space("odd-block", _SPACE_GOOD.replace("BLOCK_K=32", "BLOCK_K=48"), fault="allowed",
           why="a block size that is not a power of two"),
    _space("one-axis", "SPACE = [dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, "
           "num_stages=s) for s in (1, 2, 3, 4)]", fault="vary at least two", why="tunes stages only"),
    _space("duplicate", _SPACE_GOOD.replace("BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, num_warps=4",
                                            "BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8"),
           fault="twice", why="the same configuration listed twice"),
    _space("tiny-tiles", "SPACE = [dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=16, num_warps=w, "
           "num_stages=1) for m in (16, 32) for n in (16, 32) for w in (1, 2)]", fault="slower than the lesson",
           where=("gpu",), visible=False, why="tiles too small to reuse anything, no pipeline: loses on a GPU"),
    _space("good", _SPACE_GOOD, wrong=False, why="Hopper-sized tiles, 3-4 stages"),
    _space("tuple-list", "SPACE = [dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=64, num_warps=w, "
           "num_stages=s) for (m, n, w, s) in ((128, 128, 8, 3), (128, 128, 4, 4), (128, 256, 8, 3), "
           "(64, 128, 4, 3), (128, 64, 4, 3))]", wrong=False, why="built by a comprehension"),
]
