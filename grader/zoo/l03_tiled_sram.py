"""Lesson 03's zoo: the tiled matmul with grouped ordering, the no-cache traffic model, the tiles and their speed
(including a kernel that skips tiles whose output already holds a number, to look fast when timed on the outputs
of an earlier run)."""

from . import Entry, edit, editor, solution

__all__ = ["ENTRIES"]

TILED = solution("03_tiled_sram", "tiled_matmul_kernel")

_EX = "03_tiled_sram.tiled_matmul"
_tiled = editor(_EX, TILED)

_A_MASK = "mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k0), other=0.0)"
_B_MASK = "mask=(offs_k[:, None] < K - k0) & (offs_n[None, :] < N), other=0.0)"
_GROUPING = TILED[TILED.index("    num_pid_m = "):TILED.index("\n    offs_m = ")]  # the grouped tile order

TILED_MATMUL = [
    _tiled("no-k-mask", _A_MASK, "mask=offs_m[:, None] < M, other=0.0)",
           _B_MASK, "mask=offs_n[None, :] < N, other=0.0)", fault="out of bounds",
           why="masks M and N but not the last K tile: reads past the rows of A and B"),
    _tiled("a-without-other", _A_MASK, "mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k0))",
           fault="without `other=`", where=("interpreter",),
           why="masks A's last K tile but gives no other=: those lanes are undefined, and x 0 from B is not 0 "
               "(compiled by Triton 3.6 they read 0, so on the H100 it passes; the interpreter's checks read NaN)"),
    _tiled("unit-stride-ak", "offs_k[None, :] * stride_ak", "offs_k[None, :]",
           "a_ptrs += BLOCK_K * stride_ak", "a_ptrs += BLOCK_K", fault="column-major A|out of bounds",
           why="assumes A's columns are adjacent (stride_ak = 1)"),
    _tiled("unit-stride-bn", "offs_n[None, :] * stride_bn", "offs_n[None, :]", fault="column-major|out of bounds",
           why="assumes B's columns are adjacent (stride_bn = 1)"),
    _tiled("fp16-accumulator", "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
           "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=c_ptr.dtype.element_ty)",
           "acc = tl.dot(a, b, acc, input_precision=PRECISION)",
           "acc += tl.dot(a, b, input_precision=PRECISION).to(c_ptr.dtype.element_ty)", fault="fp32 accumulator",
           why="accumulates in C's dtype: fp16 running sums overflow"),
    _tiled("row-major-order", "pid_m = first_m + (pid % per_group) % rows", "pid_m = pid // num_pid_n",
           "pid_n = (pid % per_group) // rows", "pid_n = pid % num_pid_n", fault="grouped ordering",
           why="plain row-major tile order: right values, ignores GROUP_M"),
    _tiled("no-accumulate", "acc = tl.dot(a, b, acc, input_precision=PRECISION)",
           "acc = tl.dot(a, b, input_precision=PRECISION)", fault="relative error",
           why="overwrites the accumulator at every k step"),
    _tiled("store-mask-n-only", "mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))", "mask=offs_n[None, :] < N)",
           fault="out of bounds", why="the store masks N but not M"),
    _tiled("skips-last-k-tile", "for k0 in range(0, K, BLOCK_K):", "for k0 in range(0, K - BLOCK_K, BLOCK_K):",
           fault="relative error", why="stops one K tile early"),
    _tiled("full-groups-only", "rows = min(num_pid_m - first_m, GROUP_M)", "rows = GROUP_M",
           fault="grouped ordering|not written|out of bounds",
           why="assumes every group has GROUP_M tile rows: the short last group's programs write the same tiles"),
    Entry(_EX, "naive-kernel", edit(
        solution("03_tiled_sram", "naive_matmul_kernel"), "def naive_matmul_kernel(", "def tiled_matmul_kernel(",
        "BLOCK_N: tl.constexpr):", "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,\n"
        "                        GROUP_M: tl.constexpr, PRECISION: tl.constexpr):",
        "offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)", "offs_n = tl.arange(0, BLOCK_N)"),
          fault="not written|out of bounds|grouped ordering", why="the lesson's naive kernel (one row per program)"),
    _tiled("c-with-a-strides", "c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn",
           "c_ptrs = c_ptr + offs_m[:, None] * stride_am + offs_n[None, :] * stride_ak",
           fault="stride_cm and stride_cn",
           why="stores C through A's strides: with A column-major every element lands somewhere in C, in the wrong "
               "place (the check once blamed the grouped ordering for it)"),
    _tiled("c-row-major", "c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn",
           "c_ptrs = c_ptr + offs_m[:, None] * N + offs_n[None, :]", fault="stride_cm and stride_cn",
           why="reads A and B through their strides but writes C as if it were always row-major"),
    _tiled("dot-without-precision", "acc = tl.dot(a, b, acc, input_precision=PRECISION)", "acc = tl.dot(a, b, acc)",
           fault="without input_precision",
           why="the interpreter computes it in fp32 either way; on a GPU the fp32 'ieee' cases get TF32"),
    _tiled("matmul-operator", "acc = tl.dot(a, b, acc, input_precision=PRECISION)", "acc += a @ b",
           fault="with `@`", why="numpy's and torch's product operator, which Triton's tiles do not have"),
    _tiled("precision-written-in", "acc = tl.dot(a, b, acc, input_precision=PRECISION)",
           'acc = tl.dot(a, b, acc, input_precision="tf32")', fault="precision written in",
           why="TF32 everywhere: the interpreter computes fp32 whatever it is told; on a GPU the 'ieee' cases miss"),
    _tiled("allow-tf32", "acc = tl.dot(a, b, acc, input_precision=PRECISION)",
           "acc = tl.dot(a, b, acc, allow_tf32=True)", fault="precision written in",
           why="the older keyword, TF32 whatever the case asks"),
    _tiled("ieee-written-in", "acc = tl.dot(a, b, acc, input_precision=PRECISION)",
           'acc = tl.dot(a, b, acc, input_precision="ieee")', wrong=False,
           why="exact fp32 for every case: slower where a case allows TF32, never wrong"),
    _tiled("precision-positional", "acc = tl.dot(a, b, acc, input_precision=PRECISION)",
           "acc = tl.dot(a, b, acc, PRECISION)", wrong=False, why="the precision as tl.dot's fourth argument"),
    _tiled("accumulate-plus-equals", "acc = tl.dot(a, b, acc, input_precision=PRECISION)",
           "acc += tl.dot(a, b, input_precision=PRECISION)", wrong=False, why="acc += tl.dot(...)"),
    _tiled("store-mask-swapped", "mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))",
           "mask=(offs_m[:, None] < N) & (offs_n[None, :] < M))", fault="not written",
           why="compares rows with N and columns with M: with M != N part of C is never stored (the hidden check "
               "once blamed the grouped ordering for it)"),
    _tiled("k-mask-by-index", _A_MASK, "mask=(offs_m[:, None] < M) & (k0 + offs_k[None, :] < K), other=0.0)",
           _B_MASK, "mask=(k0 + offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)", wrong=False,
           why="the K mask written as k0 + offs_k < K"),
    Entry(_EX, "grouping-helper", '''@triton.jit
def _tile_of(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * num_pid_n)
    first_m = group * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    local = pid - group * GROUP_M * num_pid_n
    return first_m + local % rows, local // rows


''' + edit(TILED, _GROUPING, "    pid_m, pid_n = _tile_of(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)\n"), wrong=False,
          why="the grouped mapping in a @triton.jit helper"),
]

_TRAFFIC = "def tile_traffic(M, N, K, block_m, block_n, elem_bytes):\n{}"


def _traffic(name, body, **kw):
    return Entry("03_tiled_sram.tile_traffic", name, _TRAFFIC.format(body), **kw)


TILE_TRAFFIC = [
    _traffic("true-division", "    return elem_bytes * (math.ceil(N / block_n) * M * K + math.ceil(M / block_m) * K * N"
             " + M * N) / 1\n", fault="return an int", why="a float result, even when it is whole"),
    _traffic("floor-tiles", "    return elem_bytes * ((N // block_n) * M * K + (M // block_m) * K * N + M * N)\n",
             fault="a partial tile is left out", why="counts only whole tiles"),
    _traffic("one-tile-too-many", "    return elem_bytes * ((N + block_n) // block_n * M * K"
             " + (M + block_m) // block_m * K * N + M * N)\n", fault="one tile too many",
             why="(N + block_n) // block_n: right unless N divides"),
    _traffic("rounded-tiles", "    return elem_bytes * (round(N / block_n) * M * K + round(M / block_m) * K * N"
             " + M * N)\n", fault="round up", why="round() instead of a ceiling"),
    _traffic("no-output", "    return elem_bytes * (math.ceil(N / block_n) * M * K + math.ceil(M / block_m) * K * N)\n",
             fault="C is missing", why="forgets to write C"),
    _traffic("swapped-reuse", "    return elem_bytes * (math.ceil(M / block_m) * M * K + math.ceil(N / block_n) * K * N"
             " + M * N)\n", fault="A and B are swapped", why="A once per tile row, B once per tile column"),
    _traffic("elements", "    return math.ceil(N / block_n) * M * K + math.ceil(M / block_m) * K * N + M * N\n",
             fault="elements, not bytes", why="counts elements and forgets elem_bytes"),
    _traffic("masked-lanes", "    tm, tn = math.ceil(M / block_m), math.ceil(N / block_n)\n"
             "    return elem_bytes * (tn * tm * block_m * K + tm * tn * block_n * K + M * N)\n",
             fault="masked lanes are counted", why="counts whole tiles, masked lanes included"),
    _traffic("integer-ceil", "    return elem_bytes * (-(-N // block_n) * M * K + -(-M // block_m) * K * N + M * N)\n",
             wrong=False, why="ceiling by negated floor division"),
    _traffic("solution", "    reads_a = math.ceil(N / block_n) * M * K\n    reads_b = math.ceil(M / block_m) * K * N\n"
             "    return int(elem_bytes * (reads_a + reads_b + M * N))\n", wrong=False, why="the lesson's count"),
    _traffic("per-program", "    tiles_m, tiles_n = -(-M // block_m), -(-N // block_n)\n"
             "    return elem_bytes * (tiles_n * M * K + tiles_m * K * N + M * N)\n", wrong=False,
             why="tile counts first"),
]

_TILES = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)
_SLOW = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=1, num_warps=4, num_stages=1)

#: Skips 70% of its tiles when the first element of its C tile already holds a number: on the outputs of an
#: earlier run it looks fast; on fresh outputs it does all the work.
CHEAT = edit(TILED, "    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n",
             "    first = tl.load(c_ptr + pid_m * BLOCK_M * stride_cm + pid_n * BLOCK_N * stride_cn)\n"
             "    if (first == first) & (pid % 10 < 7):\n        return\n"
             "    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n")


def _choice(name, tiles, source=TILED, **kw):
    return Entry("03_tiled_sram.tile_choice", name, source, namespace=(("TILES", tiles),), **kw)


TILE_CHOICE = [
    _choice("solution", _TILES, wrong=False, why="128 x 128 x 64 tiles, 8 warps, 3 stages"),
    _choice("group-4", {**_TILES, "GROUP_M": 4}, wrong=False, why="the same tiles in groups of 4 tile rows"),
    _choice("small-tiles-skip-filled", _SLOW, CHEAT, where=("gpu",), fault="too slow",
            why="64 x 64 x 32 tiles, one stage, skipping tiles whose output already holds a number: timed on "
                "re-poisoned outputs it does the full work, at 0.25x torch.matmul"),
    _choice("small-tiles", _SLOW, where=("gpu",), fault="too slow",
            why="the same small tiles, honestly: too slow"),
    _choice("too-much-shared-memory", {**_TILES, "BLOCK_K": 128, "num_stages": 4, "BLOCK_N": 256, "num_warps": 16},
            fault="shared memory", why="four stages of 128 x 128 + 128 x 256 tiles"),
    _choice("block-k-8", {**_TILES, "BLOCK_K": 8}, fault="between 16 and 256", why="tl.dot needs 16"),
]

ENTRIES = TILED_MATMUL + TILE_TRAFFIC + TILE_CHOICE
