"""Lesson 01's zoo: the grid-stride copy (and its speed on a GPU), the column read, the sector count."""

from . import Entry, editor

__all__ = ["ENTRIES"]

_COPY = '''@triton.jit
def copy_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
{}'''
_LOOP = ("    pid = tl.program_id(axis=0)\n"
         "    step = tl.num_programs(axis=0) * BLOCK_SIZE\n"
         "    for start in range(pid * BLOCK_SIZE, n_elements, step):\n"
         "        offs = start + tl.arange(0, BLOCK_SIZE)\n")
_MASKED = ("        mask = offs < n_elements\n"
           "        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)\n")
_FAST = ("        if {full}:\n"
         "            tl.store(out_ptr + offs, tl.load(x_ptr + offs))\n"
         "        else:\n"
         "            mask = offs < n_elements\n"
         "            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)\n")
SOLUTION = _COPY.format(_LOOP + _FAST.format(full="start + BLOCK_SIZE <= n_elements"))


def _copy(name, body, exercise="01_memory_hierarchy.copy", **kw):
    return Entry(exercise, name, _COPY.format(body), **kw)


COPY = [
    _copy("fast-path-off-by-one", _LOOP + _FAST.format(full="start + BLOCK_SIZE <= n_elements + 1"),
          fault="out of bounds", why="the unmasked fast path also takes a last block one element short"),
    _copy("fast-path-no-tail", _LOOP + "        tl.store(out_ptr + offs, tl.load(x_ptr + offs))\n",
          fault="out of bounds", why="every block unmasked, the last one too"),
    _copy("one-block-per-program", "    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n"
          "    mask = offs < n_elements\n"
          "    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)\n",
          fault="not written", why="lesson 00's one block per program: with P < blocks most blocks are skipped"),
    _copy("tail-load-unmasked", _LOOP + "        mask = offs < n_elements\n"
          "        tl.store(out_ptr + offs, tl.load(x_ptr + offs), mask=mask)\n",
          fault="reads", why="masks the store only: the last block reads past the end of x"),
    _copy("skips-last-block", _LOOP.replace("range(pid * BLOCK_SIZE, n_elements, step)",
                                            "range(pid * BLOCK_SIZE, n_elements - BLOCK_SIZE, step)")
          + "        tl.store(out_ptr + offs, tl.load(x_ptr + offs))\n",
          fault="not written", why="stops a block early to avoid the mask, leaving the tail"),
    _copy("start-at-pid", "    step = tl.num_programs(axis=0) * BLOCK_SIZE\n"
          "    for start in range(tl.program_id(axis=0), n_elements, step):\n"
          "        offs = start + tl.arange(0, BLOCK_SIZE)\n" + _MASKED,
          fault="not written", why="starts program p at element p instead of block p"),
    _copy("arange-256", _LOOP.replace("tl.arange(0, BLOCK_SIZE)", "tl.arange(0, 256)") + _MASKED,
          fault="not written|written more than once", why="256 lanes per block whatever BLOCK_SIZE is"),
    _copy("mask-off-by-one", _LOOP + _MASKED.replace("offs < n_elements", "offs <= n_elements"),
          fault="out of bounds", why="`<=` copies one element past the end"),
    _copy("column-kernel", "    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n"
          "    mask = offs < n_elements\n"
          "    tl.store(out_ptr + offs, tl.load(x_ptr + offs * 2, mask=mask), mask=mask)\n",
          fault="not written|out of bounds|relative error", why="exercise 2's strided read, one block per program"),
    _copy("every-program-copies-all", "    for start in range(0, n_elements, BLOCK_SIZE):\n"
          "        offs = start + tl.arange(0, BLOCK_SIZE)\n" + _MASKED, fault="written more than once",
          why="ignores its program id: every program copies the whole array, right but P times the work"),
    _copy("steps-by-one-block", _LOOP.replace("range(pid * BLOCK_SIZE, n_elements, step)",
                                              "range(pid * BLOCK_SIZE, n_elements, BLOCK_SIZE)") + _MASKED,
          fault="written more than once", why="steps by one block, not P: program p copies from block p to the end"),
    _copy("masked-every-block", _LOOP + _MASKED, wrong=False,
          why="the mask on every block: correct, only slower on a GPU (the lesson's text says by how much)"),
    _copy("block-index-loop", "    nblocks = tl.cdiv(n_elements, BLOCK_SIZE)\n"
          "    for b in range(tl.program_id(0), nblocks, tl.num_programs(0)):\n"
          "        offs = b * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n" + _MASKED,
          wrong=False, why="loops over block indices instead of element offsets"),
    Entry("01_memory_hierarchy.copy", "helper-for-tail", '''@triton.jit
def _copy_block(x_ptr, out_ptr, offs, n_elements, FULL: tl.constexpr):
    if FULL:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))
    else:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n_elements), mask=offs < n_elements)


@triton.jit
def copy_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK_SIZE)
    full_blocks = n_elements // BLOCK_SIZE
    for b in range(pid, full_blocks, tl.num_programs(0)):
        _copy_block(x_ptr, out_ptr, b * BLOCK_SIZE + lanes, n_elements, True)
    if pid == full_blocks % tl.num_programs(0):
        _copy_block(x_ptr, out_ptr, full_blocks * BLOCK_SIZE + lanes, n_elements, False)
''', wrong=False, why="full blocks in one loop, the tail once, by the program whose turn it is; a helper"),
]

COPY_SPEED = [
    Entry("01_memory_hierarchy.copy_speed", "solution", SOLUTION, wrong=False,
          why="unmasked full blocks, one masked tail: near torch's copy on a GPU"),
    _copy("forgot-num-programs", _LOOP.replace("step = tl.num_programs(axis=0) * BLOCK_SIZE", "step = BLOCK_SIZE")
          + _FAST.format(full="start + BLOCK_SIZE <= n_elements"), exercise="01_memory_hierarchy.copy_speed",
          fault="written more than once",
          why="steps one block, not the grid's width: right, but program p copies everything from block p on"),
    _copy("fast-path-off-by-one", _LOOP + _FAST.format(full="start + BLOCK_SIZE <= n_elements + 1"),
          exercise="01_memory_hierarchy.copy_speed", fault="out of bounds",
          why="the speed exercise's visible case catches the off-by-one fast path too"),
]

_COLUMN_DEF = "@triton.jit\ndef column_kernel(x_ptr, out_ptr, M, stride_m, col, BLOCK_M: tl.constexpr):\n"
_COLUMN = _COLUMN_DEF + '''    offs_m = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask = offs_m < M
    tl.store(out_ptr + offs_m, tl.load(x_ptr + offs_m * stride_m + col, mask=mask), mask=mask)
'''
_column = editor("01_memory_hierarchy.column", _COLUMN)

COLUMN = [
    _column("load-unmasked", " + col, mask=mask)", " + col)", fault="reads",
            why="masks the store only: the last block reads rows past the end of x"),
    _column("no-mask", "    mask = offs_m < M\n", "", ", mask=mask), mask=mask)", "))", fault="out of bounds",
            why="no mask at all"),
    _column("column-zero", " + col, mask", ", mask", fault="column 0's", why="forgets col: always reads column 0"),
    _column("row-not-column", "offs_m * stride_m + col", "col * stride_m + offs_m",
            fault="the rows after it|out of bounds", why="reads row col instead of column col"),
    _column("stride-is-M", "offs_m * stride_m", "offs_m * M", fault="out of bounds|relative error",
            why="assumes the row stride is M"),
    _column("forgot-program-id", "tl.program_id(axis=0) * BLOCK_M + ", "", fault="not written",
            why="every program reads the first block of rows"),
    _column("mask-off-by-one", "offs_m < M", "offs_m <= M", fault="out of bounds",
            why="`<=` reads and writes one row past the end"),
    _column("arange-128", "tl.arange(0, BLOCK_M)", "tl.arange(0, 128)", fault="not written", visible=False,
            why="128 rows per program: right while BLOCK_M <= 128 (the visible cases), wrong beyond"),
    _column("copy-kernel", "x_ptr + offs_m * stride_m + col", "x_ptr + offs_m", fault="contiguous copy",
            why="exercise 1's contiguous copy"),
    _column("int64-rows", "tl.program_id(axis=0)", "tl.program_id(axis=0).to(tl.int64)", wrong=False,
            why="64-bit row offsets: a large matrix's last rows lie past 2**31 elements"),
    _column("column-pointer-first", source=_COLUMN_DEF + "    first = x_ptr + col\n"
            "    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)\n"
            "    vals = tl.load(first + rows * stride_m, mask=rows < M, other=0.0)\n"
            "    tl.store(out_ptr + rows, vals, mask=rows < M)\n", wrong=False,
            why="moves the base pointer to the column first"),
    _column("where-clamped", "    tl.store(", "    safe = tl.where(mask, offs_m, 0)\n    tl.store(",
            "offs_m * stride_m + col, mask=mask)", "safe * stride_m + col)", wrong=False,
            why="clamps the row index instead of masking the load: every address it reads is inside x"),
]

_SECTORS = "def sector_bytes(n, stride, itemsize):\n{}"


def _sectors(name, body, **kw):
    return Entry("01_memory_hierarchy.sector_bytes", name, _SECTORS.format(body), **kw)


SECTOR_BYTES = [
    _sectors("no-rounding", "    return n * stride * itemsize\n", fault="the span n·stride·itemsize",
             why="counts the span, not the sectors"),
    _sectors("bytes-asked-for", "    return n * itemsize\n", fault="the bytes asked for",
             why="the bytes the program asks for, as if memory moved single elements"),
    _sectors("every-element-a-sector", "    return 32 * n\n", fault="one sector per element",
             why="right only once elements are at least 32 bytes apart"),
    _sectors("span-rounded-up", "    return 32 * -(-(n * stride * itemsize) // 32)\n", fault="the whole span",
             why="rounds the span up to sectors: counts sectors no element touches"),
    _sectors("span-rounded-down", "    step = stride * itemsize\n    if step >= 32:\n        return 32 * n\n"
             "    return 32 * max(1, n * step // 32)\n", visible=False,
             why="the span n·step in whole sectors, rounded down: short by one sector whenever the last element "
                 "starts a sector of its own (33 bytes asks for 2 sectors; the visible draws often miss it)"),
    _sectors("float-result", "    if stride * itemsize >= 32:\n        return 32.0 * n\n"
             "    return 32 * math.ceil(((n - 1) * stride * itemsize + 1) / 32)\n", fault="expected an int",
             why="returns a float for wide strides"),
    _sectors("brute-force", "    return 32 * len({(i * stride * itemsize) // 32 for i in range(n)})\n", wrong=False,
             why="counts the distinct sectors by brute force"),
    _sectors("two-regimes", "    if n <= 0:\n        return 0\n    step = stride * itemsize\n    if step >= 32:\n"
             "        return 32 * n\n    return 32 * ((n - 1) * step // 32 + 1)\n", wrong=False,
             why="sparse and dense strides in closed form"),
    _sectors("ceil-of-last-byte", "    last = (n - 1) * stride * itemsize + itemsize - 1\n"
             "    return 32 * n if stride * itemsize >= 32 else 32 * (last // 32 + 1)\n", wrong=False,
             why="the sector of the last byte, for dense strides"),
    _sectors("numpy-integer", "    import numpy as np\n    return np.int64(32) * len({(i * stride * itemsize) // 32 "
             "for i in range(n)})\n", wrong=False, why="a numpy integer: an int all the same"),
    _sectors("sector-count", "    return len({(i * stride * itemsize) // 32 for i in range(n)})\n",
             fault="the number of sectors", why="the sectors, not their bytes"),
    _sectors("no-return", "    32 * len({(i * stride * itemsize) // 32 for i in range(n)})\n",
             fault="`return` missing", why="computes the bytes and never returns them"),
]

ENTRIES = COPY + COPY_SPEED + COLUMN + SECTOR_BYTES
