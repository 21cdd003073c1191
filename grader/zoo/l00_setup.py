"""Lesson 00's zoo: vector add on a 1-D grid, row-bias add on a 2-D grid with row strides."""

from . import Entry

__all__ = ["ENTRIES"]

_ADD = '''@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
{}'''
_BIAS = '''@triton.jit
def add_bias_kernel(x_ptr, bias_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_N: tl.constexpr):
{}'''


def _add(name, body, **kw):
    return Entry("00_setup.vector_add", name, _ADD.format(body), **kw)


def _bias(name, body, **kw):
    return Entry("00_setup.add_bias", name, _BIAS.format(body), **kw)


_OFFS = "    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n"
_STORE = "    tl.store(out_ptr + offs, (x.to(tl.float32) + y.to(tl.float32)).to(out_ptr.dtype.element_ty), mask=mask)\n"
_LOAD = ("    x = tl.load(x_ptr + offs, mask=mask)\n"
         "    y = tl.load(y_ptr + offs, mask=mask)\n")

VECTOR_ADD = [
    _add("no-mask", _OFFS + "    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))\n",
         fault="out of bounds", why="no mask: the last block reads and writes past the end"),
    _add("mask-on-store-only", _OFFS + "    mask = offs < n_elements\n"
         "    x = tl.load(x_ptr + offs)\n    y = tl.load(y_ptr + offs)\n" + _STORE,
         fault="reads", why="the store is masked, the loads are not: reads past the end of x and y"),
    _add("mask-off-by-one", _OFFS + "    mask = offs <= n_elements\n" + _LOAD + _STORE,
         fault="out of bounds", why="`<=` lets one lane past the end"),
    _add("mask-short", _OFFS + "    mask = offs < n_elements - 1\n" + _LOAD + _STORE,
         fault="not written", why="the last element is never written"),
    _add("stride-128", "    offs = tl.program_id(0) * 128 + tl.arange(0, BLOCK_SIZE)\n    mask = offs < n_elements\n"
         + _LOAD + _STORE, fault="not written", why="blocks start 128 apart whatever BLOCK_SIZE is"),
    _add("arange-128", "    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, 128)\n    mask = offs < n_elements\n"
         + _LOAD + _STORE, fault="not written|out of bounds", why="each program covers 128 lanes, not BLOCK_SIZE"),
    _add("forgot-program-id", "    offs = tl.arange(0, BLOCK_SIZE)\n    mask = offs < n_elements\n" + _LOAD + _STORE,
         fault="not written", why="every program writes the first block"),
    _add("overlapping-blocks", "    offs = tl.program_id(0) * (BLOCK_SIZE - 1) + tl.arange(0, BLOCK_SIZE)\n"
         "    mask = offs < n_elements\n" + _LOAD + _STORE,
         fault="not written", why="neighbouring programs write the same element; the tail is left unwritten"),
    _add("x-plus-x", _OFFS + "    mask = offs < n_elements\n    x = tl.load(x_ptr + offs, mask=mask)\n"
         "    tl.store(out_ptr + offs, x + x, mask=mask)\n", fault="relative error", why="adds x to itself"),
    _add("always-fp16", _OFFS + "    mask = offs < n_elements\n" + _LOAD
         + "    tl.store(out_ptr + offs, (x + y).to(tl.float16), mask=mask)\n",
         fault="relative error", why="rounds every sum to fp16 before the fp32 store"),
    _add("broadcast-y0", _OFFS + "    mask = offs < n_elements\n"
         "    x = tl.load(x_ptr + offs, mask=mask)\n"
         "    tl.store(out_ptr + offs, x + tl.load(y_ptr), mask=mask)\n",
         fault="relative error", why="a broadcast in the style of exercise 2: adds y[0] to every element"),
    _add("no-upcast", _OFFS + "    mask = offs < n_elements\n" + _LOAD
         + "    tl.store(out_ptr + offs, x + y, mask=mask)\n", wrong=False,
         why="adds in the inputs' dtype: one rounding, like the fp32 sum's store (the interpreter's bf16 is fixed)"),
    _add("interleaved", "    pid = tl.program_id(0)\n"
         "    offs = pid + tl.arange(0, BLOCK_SIZE) * tl.num_programs(0)\n    mask = offs < n_elements\n"
         + _LOAD + _STORE, wrong=False, why="program p owns elements p, p + P, p + 2P...: a different, complete cover"),
    Entry("00_setup.vector_add", "helper-function", '''@triton.jit
def _sum32(a, b):
    return a.to(tl.float32) + b.to(tl.float32)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    out = _sum32(tl.load(x_ptr + offs, mask=mask, other=0.0), tl.load(y_ptr + offs, mask=mask, other=0.0))
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)
''', wrong=False, why="the addition in a @triton.jit helper, masked lanes loaded as 0"),
]

_ROW = ("    row = tl.program_id(0)\n"
        "    offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)\n")
_BSTORE = ("    tl.store(out_ptr + row * stride_om + offs, (x.to(tl.float32) + b.to(tl.float32))"
           ".to(out_ptr.dtype.element_ty), mask=mask)\n")
_BLOAD = ("    x = tl.load(x_ptr + row * stride_xm + offs, mask=mask)\n"
          "    b = tl.load(bias_ptr + offs, mask=mask)\n")

ADD_BIAS = [
    _bias("row-stride-N", _ROW + "    mask = offs < N\n    x = tl.load(x_ptr + row * N + offs, mask=mask)\n"
          "    b = tl.load(bias_ptr + offs, mask=mask)\n" + _BSTORE,
          fault="strided view", why="assumes x's rows are N apart (the lesson's most common matrix bug): reads the "
          "gaps between x's rows"),
    _bias("x-stride-for-out", _ROW + "    mask = offs < N\n" + _BLOAD
          + _BSTORE.replace("row * stride_om", "row * stride_xm"),
          fault="out of bounds|not written", why="writes out with x's row stride"),
    _bias("out-row-stride-N", _ROW + "    mask = offs < N\n" + _BLOAD
          + _BSTORE.replace("row * stride_om", "row * N"), fault="strided view",
          why="assumes out's rows are N apart: writes into the gaps between the rows of a strided out"),
    _bias("no-mask", _ROW + "    x = tl.load(x_ptr + row * stride_xm + offs)\n    b = tl.load(bias_ptr + offs)\n"
          + _BSTORE.replace(", mask=mask)", ")"), fault="out of bounds", why="no mask at the end of a row"),
    _bias("mask-on-store-only", _ROW + "    mask = offs < N\n    x = tl.load(x_ptr + row * stride_xm + offs)\n"
          "    b = tl.load(bias_ptr + offs)\n" + _BSTORE,
          fault="out of bounds", why="reads past the end of each row of x and of bias"),
    _bias("mask-off-by-one", _ROW + "    mask = offs <= N\n" + _BLOAD + _BSTORE,
          fault="out of bounds", why="`<=` lets one column past the end"),
    _bias("bias-by-row", _ROW + "    mask = offs < N\n    x = tl.load(x_ptr + row * stride_xm + offs, mask=mask)\n"
          "    b = tl.load(bias_ptr + row)\n" + _BSTORE, fault="relative error|out of bounds",
          why="adds bias[row], not bias[column]"),
    _bias("swapped-axes", "    row = tl.program_id(1)\n    offs = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)\n"
          "    mask = offs < N\n" + _BLOAD + _BSTORE, fault="not written|out of bounds",
          why="takes the row from axis 1 and the column block from axis 0"),
    _bias("arange-128", "    row = tl.program_id(0)\n    offs = tl.program_id(1) * BLOCK_N + tl.arange(0, 128)\n"
          "    mask = offs < N\n" + _BLOAD + _BSTORE, fault="not written",
          why="128 columns per program whatever BLOCK_N is"),
    _bias("vector-add-kernel", "    offs = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)\n"
          "    mask = offs < M * N\n"
          "    x = tl.load(x_ptr + offs, mask=mask)\n    b = tl.load(bias_ptr + offs % N, mask=mask)\n"
          "    tl.store(out_ptr + offs, x + b, mask=mask)\n", fault="out of bounds|not written",
          why="exercise 1's 1-D indexing over M*N elements, on the 2-D grid"),
    _bias("no-upcast", _ROW + "    mask = offs < N\n" + _BLOAD
          + "    tl.store(out_ptr + row * stride_om + offs, x + b, mask=mask)\n", wrong=False,
          why="adds in the inputs' dtype"),
    _bias("int64-rows", "    row = tl.program_id(0).to(tl.int64)\n"
          "    offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)\n    mask = offs < N\n" + _BLOAD + _BSTORE,
          wrong=False, why="64-bit row offsets, safe for large matrices"),
    _bias("pointer-blocks", "    row = tl.program_id(0)\n"
          "    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)\n"
          "    x_row = x_ptr + row * stride_xm\n    o_row = out_ptr + row * stride_om\n    inside = cols < N\n"
          "    total = tl.load(x_row + cols, mask=inside, other=0.0).to(tl.float32)\n"
          "    total += tl.load(bias_ptr + cols, mask=inside, other=0.0).to(tl.float32)\n"
          "    tl.store(o_row + cols, total.to(out_ptr.dtype.element_ty), mask=inside)\n", wrong=False,
          why="row base pointers first, an accumulate-style sum"),
]

ENTRIES = VECTOR_ADD + ADD_BIAS
