"""Lesson 03 (tiled SRAM): the tiled matmul kernel with grouped ordering, the no-cache traffic model, the tiles.

The kernel is launched on a 1-D grid of ``cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)`` programs. Besides the full launch,
every case launches only the first few programs into a second NaN buffer and checks that exactly the C tiles of
grouped order were written: that is how the mapping from program id to tile is graded.
"""

import math

import torch
import triton

from ...device import pick
from ...testing import guard_changed, guard_filled, randn
from ..provenance import Recorder
from ..spec import Case, CheckFailed, Exercise, Performance, register, settings_problem, wrong_call

__all__ = ["TILED_MATMUL", "TILE_TRAFFIC", "TILE_CHOICE", "grouped_tile", "traffic", "tile_problems"]

SMEM_LIMIT = 232_448  # bytes of shared memory one H200 block may use (227 KiB)
ACC_PER_THREAD = 128  # fp32 accumulator registers per thread the tile may take
MIN_INTENSITY = 30.0  # FLOP per byte of no-cache traffic at 4096^3 bf16 (64 x 64 tiles: 31.8)


def grouped_tile(pid: int, num_pid_m: int, num_pid_n: int, group_m: int) -> tuple[int, int]:
    """The (tile row, tile column) that program ``pid`` owns in grouped order."""
    per_group = group_m * num_pid_n
    first_m = (pid // per_group) * group_m
    rows = min(num_pid_m - first_m, group_m)
    return first_m + (pid % per_group) % rows, (pid % per_group) // rows


def traffic(M: int, N: int, K: int, block_m: int, block_n: int, elem_bytes: int) -> int:
    """No-cache HBM bytes of a tiled matmul: A read once per tile column, B once per tile row, C written once."""
    return elem_bytes * (math.ceil(N / block_n) * M * K + math.ceil(M / block_m) * K * N + M * N)


# ---- exercise 1: the tiled kernel ----------------------------------------------------------------------------

def _matmul_inputs(case, gen):
    M, N, K = case["M"], case["N"], case["K"]
    if case.get("overflow"):
        return _cancelling(M, N, K, case.dtype, gen)
    if case.get("a_t"):
        a = randn(K, M, gen=gen, dtype=case.dtype, device="cpu").t()  # a column-major view
    else:
        a = randn(M, K, gen=gen, dtype=case.dtype, device="cpu")
    if case.get("b_t"):
        b = randn(N, K, gen=gen, dtype=case.dtype, device="cpu").t()  # a column-major view
    else:
        b = randn(K, N, gen=gen, dtype=case.dtype, device="cpu")
    return {"a": a, "b": b}


def _cancelling(M, N, K, dtype, gen):
    """A = [P, P + E], B = [Q; -Q] with P, Q in [14, 18] and E ~ N(0, 1): C = -E Q is a few hundred, but the
    running sum over the first half of K reaches K/2 · 256, past fp16's largest value (65504) once K/2 > 256."""
    half = K // 2
    p = 14 + 4 * torch.rand(M, half, generator=gen)
    q = 14 + 4 * torch.rand(half, N, generator=gen)
    a = torch.cat([p, p + torch.randn(M, half, generator=gen)], dim=1)
    b = torch.cat([q, -q], dim=0)
    return {"a": a.to(dtype), "b": b.to(dtype)}


def _launch(kernel, a, b, c, case, grid, blocks):
    M, K = a.shape
    N = b.shape[1]
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 BLOCK_M=blocks["BLOCK_M"], BLOCK_N=blocks["BLOCK_N"], BLOCK_K=blocks["BLOCK_K"],
                 GROUP_M=blocks["GROUP_M"], PRECISION=case.precision or "ieee",
                 **{k: blocks[k] for k in ("num_warps", "num_stages") if k in blocks})


def _check_order(kernel, a, b, case, blocks):
    """Launch the first programs only; exactly their tiles of C (in grouped order) must be written."""
    M, N = a.shape[0], b.shape[1]
    BM, BN, G = blocks["BLOCK_M"], blocks["BLOCK_N"], blocks["GROUP_M"]
    num_m, num_n = triton.cdiv(M, BM), triton.cdiv(N, BN)
    first = min(case.get("first", 3), num_m * num_n)
    c = guard_filled(M * N, a.dtype, a.device).view(M, N)
    _launch(kernel, a, b, c, case, (first,), blocks)
    written = guard_changed(c).cpu()  # bit for bit: a tile the kernel filled with NaN was written too
    if _mixed_tile(written, BM, BN):
        # elements written without filling whole tiles: C's store addresses are wrong, not the order of the
        # tiles; the comparison of the full launch's values names that
        return
    want = torch.zeros(M, N, dtype=torch.bool)
    for pid in range(first):
        tm, tn = grouped_tile(pid, num_m, num_n, G)
        want[tm * BM:(tm + 1) * BM, tn * BN:(tn + 1) * BN] = True
    if not torch.equal(written, want):
        got = sorted({(int(i) // BM, int(j) // BN) for i, j in written.nonzero().tolist()})
        expect = [grouped_tile(p, num_m, num_n, G) for p in range(first)]
        raise CheckFailed(f"grouped ordering: launching only programs 0..{first - 1} ({num_m} x {num_n} tiles, "
                          f"GROUP_M={G}) wrote tiles (row, col) {got}; grouped order gives {expect}")


def _matmul_run(args, inputs, outputs, case):
    (kernel,) = args
    a, b, c = inputs["a"], inputs["b"], outputs["c"]
    blocks = {k: case[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")}
    grid = (triton.cdiv(a.shape[0], blocks["BLOCK_M"]) * triton.cdiv(b.shape[1], blocks["BLOCK_N"]),)
    _launch(kernel, a, b, c, case, grid, blocks)
    # a dry run compiles and launches nothing; a full launch that left part of a tile of C unwritten (or NaN) has a
    # mask or load at fault, which the comparison names: the partial launch would seem to show a wrong ordering
    if case.get("first") and not isinstance(kernel, Recorder) and not _partly_written(c, blocks):
        _check_order(kernel, a, b, case, blocks)


def _partly_written(c, blocks) -> bool:
    """Whether some BLOCK_M x BLOCK_N tile of ``c`` holds both NaN and numbers (a program mapped to the wrong tile
    leaves whole tiles unwritten; a wrong mask, part of one)."""
    return _mixed_tile(torch.isnan(c).cpu(), blocks["BLOCK_M"], blocks["BLOCK_N"])


def _mixed_tile(flags, BM: int, BN: int) -> bool:
    """Whether some BM x BN tile of the boolean matrix ``flags`` is partly set."""
    for i in range(0, flags.shape[0], BM):
        for j in range(0, flags.shape[1], BN):
            tile = flags[i:i + BM, j:j + BN]
            if bool(tile.any()) and not bool(tile.all()):
                return True
    return False


def _matmul_diagnose(inputs, got, case, ref):
    """Names a store of C through strides other than its own (A's, or a layout assumed): every product is in C,
    each at another element's place, C row-major where it is column-major or the other way round."""
    c, want = got["c"].double(), ref["c"].double()
    M, N = want.shape
    actual = (1, M) if case.get("c_t") else (N, 1)
    for assumed, layout in (((N, 1), "row-major"), ((1, M), "column-major")):
        if assumed == actual:
            continue
        memory = torch.empty(M * N, dtype=torch.float64)
        m, n = torch.meshgrid(torch.arange(M), torch.arange(N), indexing="ij")
        memory[(m * assumed[0] + n * assumed[1]).flatten()] = want.flatten()
        seen = memory[(m * actual[0] + n * actual[1]).flatten()].view(M, N)
        if torch.linalg.norm(c - seen) <= 1e-2 * torch.linalg.norm(want):
            return (f"c: every product is in C, each at another element's place: C was stored as if it were "
                    f"{layout} (element (m, n) at m·{assumed[0]} + n·{assumed[1]}), where here stride_cm is "
                    f"{actual[0]} and stride_cn is {actual[1]}: address C through stride_cm and stride_cn")
    return None


def _blocks(bm, bn, bk, g, **kw):
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=g, **kw)


TILED_MATMUL = Exercise(
    id="03_tiled_sram.tiled_matmul",
    magnitude=True,
    args=("kernel",),
    signature="tiled_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, "
              "stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, "
              "GROUP_M: tl.constexpr, PRECISION: tl.constexpr), launched on grid "
              "(cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N),) with programs in grouped order",
    description="C = A @ B accumulated in fp32, stored in C's dtype; tl.dot(..., input_precision=PRECISION)",
    make_inputs=_matmul_inputs,
    outputs=lambda case, inputs: {"c": ((case["M"], case["N"]), case.dtype, (1, 0) if case.get("c_t") else None)},
    run=_matmul_run,
    reference=lambda inputs, case: {"c": inputs["a"] @ inputs["b"]},
    diagnose=_matmul_diagnose,
    visible=[
        Case("M=45 N=37 K=70 fp32 ieee, 16x16x32 tiles, GROUP_M=2, column-major A",
             dict(M=45, N=37, K=70, a_t=True, **_blocks(16, 16, 32, 2), first=3), precision="ieee",
             purpose="passes A as a column-major view (stride_ak is M, stride_am is 1), has sizes that are not "
                     "multiples of the tiles (a last k step of 6) and groups of 2 tile rows: address A through "
                     "stride_am and stride_ak, and mask rows, columns and k past the ends"),
        Case("M=33 N=50 K=40 fp16, 16x32x16 tiles, GROUP_M=3, column-major B and C",
             dict(M=33, N=50, K=40, b_t=True, c_t=True, **_blocks(16, 32, 16, 3), first=4), torch.float16,
             purpose="passes B and C as column-major views (stride_bn is K, stride_cn is M): address B through "
                     "stride_bk and stride_bn, and C through stride_cm and stride_cn"),
        Case("M=20 N=24 K=576 fp16, 16x16x64 tiles, running sums past fp16's range",
             dict(M=20, N=24, K=576, overflow=True, **_blocks(16, 16, 64, 1)), torch.float16,
             purpose="has running sums over K that pass fp16's largest value (65504) before they cancel: only an "
                     "fp32 accumulator holds them"),
    ],
    hidden=[
        Case("M=1 N=1 K=1 fp32 ieee", dict(M=1, N=1, K=1, **_blocks(16, 16, 16, 1)), precision="ieee"),
        Case("M=70 N=29 K=33 fp32 tf32, column-major A, GROUP_M=4",
             dict(M=70, N=29, K=33, a_t=True, **_blocks(16, 16, 32, 4), first=5), precision="tf32"),
        Case("M=48 N=47 K=65 fp32 ieee, column-major A and B, 16x16x32 tiles",
             dict(M=48, N=47, K=65, a_t=True, b_t=True, **_blocks(16, 16, 32, 2), first=4), precision="ieee",
             purpose="passes both A and B as column-major views, a whole number of tile rows"),
        Case("M=17 N=20 K=600 fp16, 16x32x64 tiles, running sums past fp16's range",
             dict(M=17, N=20, K=600, overflow=True, **_blocks(16, 32, 64, 1)), torch.float16,
             purpose="has running sums over K that pass fp16's largest value before they cancel: only an fp32 "
                     "accumulator holds them"),
        Case("M=100 N=17 K=129 fp16, 32x16x32 tiles, GROUP_M=8 (one short group), column-major C",
             dict(M=100, N=17, K=129, c_t=True, **_blocks(32, 16, 32, 8), first=3), torch.float16,
             purpose="writes C as a column-major view (stride_cm is 1, stride_cn is M): store C through stride_cm "
                     "and stride_cn"),
        Case("M=50 N=66 K=48 bf16", dict(M=50, N=66, K=48, **_blocks(16, 32, 16, 2), first=4), torch.bfloat16,
             gpu_only=True),
    ] + pick(cpu=[], gpu=[
        Case("M=2051 N=1029 K=517 bf16, 128x64x64 tiles, GROUP_M=8",
             dict(M=2051, N=1029, K=517, **_blocks(128, 64, 64, 8), first=20), torch.bfloat16),
        Case("M=999 N=1001 K=1003 fp32 ieee, 64x64x32 tiles", dict(M=999, N=1001, K=1003, **_blocks(64, 64, 32, 4)),
             precision="ieee"),
    ]),
    points=(4, 4),
)


# ---- exercise 2: the traffic model ---------------------------------------------------------------------------

def tile_problems(gen: torch.Generator, n: int) -> list[tuple[int, ...]]:
    """``n`` random (M, N, K, block_m, block_n, elem_bytes), sizes often not multiples of the blocks."""
    def draw(lo, hi):
        return int(torch.randint(lo, hi + 1, (1,), generator=gen))

    out = []
    for _ in range(n):
        out.append((draw(1, 5000), draw(1, 5000), draw(1, 5000), 2 ** draw(0, 8), 2 ** draw(0, 8),
                    (1, 2, 4, 8)[draw(0, 3)]))
    return out


def _traffic_inputs(case, gen):
    return {"seed": int(torch.randint(0, 2**31 - 1, (1,), generator=gen)), "n": case["n"]}


def _traffic_run(args, inputs, outputs, case):
    (fn,) = args
    problems = tile_problems(torch.Generator().manual_seed(inputs["seed"]), inputs["n"])
    got = []
    for p in problems:
        v = fn(*p)
        if isinstance(v, bool) or not isinstance(v, int):
            raise CheckFailed(f"tile_traffic{p} returned {v!r}, a {type(v).__name__}; return an int (a whole "
                              "number of bytes: math.ceil and // give ints, / gives a float)")
        got.append(float(v))
    return {"bytes": torch.tensor(got, dtype=torch.float64)}


def _traffic_reference(inputs, case):
    problems = tile_problems(torch.Generator().manual_seed(inputs["seed"]), inputs["n"])
    return {"bytes": torch.tensor([float(traffic(*p)) for p in problems], dtype=torch.float64)}


_TRAFFIC_MISTAKES = (
    (lambda M, N, K, bm, bn, e: e * (math.ceil(N / bn) * M * K + math.ceil(M / bm) * K * N),
     "C is missing: it is written once, M·N·elem_bytes bytes"),
    (lambda M, N, K, bm, bn, e: e * ((N // bn) * M * K + (M // bm) * K * N + M * N),
     "a partial tile is left out (N // block_n rounds down): the last tile row or column still reads its whole "
     "strip, so round up (math.ceil, or (N + block_n - 1) // block_n)"),
    (lambda M, N, K, bm, bn, e: e * (math.ceil(N / bn) * math.ceil(M / bm) * bm * K + math.ceil(M / bm)
                                     * math.ceil(N / bn) * bn * K + M * N),
     "masked lanes are counted: a partial tile moves only the elements inside the matrices, M·K per tile column "
     "for A, not ceil(M / block_m)·block_m·K"),
    (lambda M, N, K, bm, bn, e: e * ((N + bn) // bn * M * K + (M + bm) // bm * K * N + M * N),
     "(N + block_n) // block_n counts one tile too many where N is a multiple of block_n: round up with "
     "(N + block_n - 1) // block_n, or math.ceil"),
    (lambda M, N, K, bm, bn, e: e * (round(N / bn) * M * K + round(M / bm) * K * N + M * N),
     "round() takes a partial tile of less than half a tile down to none, yet it still reads its whole strip: "
     "round up, math.ceil(N / block_n)"),
    (lambda M, N, K, bm, bn, e: math.ceil(N / bn) * M * K + math.ceil(M / bm) * K * N + M * N,
     "that is elements, not bytes: multiply by elem_bytes"),
    (lambda M, N, K, bm, bn, e: e * (math.ceil(M / bm) * M * K + math.ceil(N / bn) * K * N + M * N),
     "A and B are swapped: A (M x K) is read once per tile column, ceil(N / block_n) times; B once per tile row"),
)


def _traffic_diagnose(inputs, got, case, ref):
    """Names the first problem the answer gets wrong, and the mistake its number matches."""
    problems = tile_problems(torch.Generator().manual_seed(inputs["seed"]), inputs["n"])
    return wrong_call("tile_traffic", ("M", "N", "K", "block_m", "block_n", "elem_bytes"), problems,
                      got["bytes"].tolist(), ref["bytes"].tolist(), _TRAFFIC_MISTAKES)


TILE_TRAFFIC = Exercise(
    id="03_tiled_sram.tile_traffic",
    args=("function",),
    signature="tile_traffic(M, N, K, block_m, block_n, elem_bytes) -> int",
    description="HBM bytes of a tiled matmul without caches: A once per tile column, B once per tile row, C once",
    make_inputs=_traffic_inputs,
    run=_traffic_run,
    reference=_traffic_reference,
    diagnose=_traffic_diagnose,
    tolerance=lambda case: 0.0,
    visible=[Case("40 random problems and tile shapes", dict(n=40))],
    points=(2, 0),
)


# ---- exercise 3: the tiles ------------------------------------------------------------------------------------

_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")


def _tiles_rule(values, hidden):
    t = values[0]
    why = settings_problem("TILES", t, _KEYS)
    if why:
        return why
    for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"):
        if t[k] & (t[k] - 1):
            return f"{k}={t[k]} must be a power of two"
    for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        if not 16 <= t[k] <= 256:
            return f"{k}={t[k]} must be between 16 and 256 (tl.dot needs at least 16)"
    if t["num_warps"] > 16:
        return f"num_warps={t['num_warps']} exceeds 16 (1024 threads per block)"
    smem = t["num_stages"] * (t["BLOCK_M"] * t["BLOCK_K"] + t["BLOCK_K"] * t["BLOCK_N"]) * 2
    if smem > SMEM_LIMIT:
        return (f"{t['num_stages']} stages of {t['BLOCK_M']}x{t['BLOCK_K']} + {t['BLOCK_K']}x{t['BLOCK_N']} bf16 "
                f"tiles need {smem} bytes of shared memory; an H200 block has {SMEM_LIMIT}")
    per_thread = t["BLOCK_M"] * t["BLOCK_N"] / (32 * t["num_warps"])
    if per_thread > ACC_PER_THREAD:
        return (f"the {t['BLOCK_M']}x{t['BLOCK_N']} fp32 accumulator over {32 * t['num_warps']} threads is "
                f"{per_thread:g} registers per thread; keep it at most {ACC_PER_THREAD} (more warps, or smaller "
                "tiles)")
    intensity = 2 * 4096**3 / traffic(4096, 4096, 4096, t["BLOCK_M"], t["BLOCK_N"], 2)
    if intensity < MIN_INTENSITY:
        return (f"{t['BLOCK_M']}x{t['BLOCK_N']} tiles reach {intensity:.1f} FLOP/byte without caching at 4096^3 "
                f"bf16; at least {MIN_INTENSITY:g} is required")
    return None


def _choice_inputs(case, gen):
    return _matmul_inputs(case, gen)


def _choice_run(args, inputs, outputs, case):
    tiles, kernel = args
    a, b, c = inputs["a"], inputs["b"], outputs["c"]
    blocks = dict(tiles)
    grid = (triton.cdiv(a.shape[0], blocks["BLOCK_M"]) * triton.cdiv(b.shape[1], blocks["BLOCK_N"]),)
    _launch(kernel, a, b, c, case, grid, blocks)


def _torch_matmul(args, inputs, outputs, case):
    torch.matmul(inputs["a"], inputs["b"], out=outputs["c"])


_TIMED = Case("M=N=K=4096 bf16", dict(M=4096, N=4096, K=4096), torch.bfloat16)

TILE_CHOICE = Exercise(
    id="03_tiled_sram.tile_choice",
    args=("value", "kernel"),
    signature="check('03_tiled_sram.tile_choice', TILES, tiled_matmul_kernel) with TILES = dict(BLOCK_M=, BLOCK_N=, "
              "BLOCK_K=, GROUP_M=, num_warps=, num_stages=)",
    description="tiles inside the H200's shared-memory and register budgets, >= 30 FLOP/byte without caching, and "
                "on a GPU at least 40% of torch.matmul's speed at 4096^3 bf16",
    make_inputs=_choice_inputs,
    outputs=lambda case, inputs: {"c": ((case["M"], case["N"]), case.dtype, (1, 0) if case.get("c_t") else None)},
    run=_choice_run,
    reference=lambda inputs, case: {"c": inputs["a"] @ inputs["b"]},
    rule=_tiles_rule,
    visible=[Case("M=67 N=45 K=80 fp16 with your tiles", dict(M=67, N=45, K=80), torch.float16)]
    + pick(cpu=[], gpu=[Case("M=1000 N=1500 K=777 bf16 with your tiles", dict(M=1000, N=1500, K=777),
                             torch.bfloat16)]),
    performance=Performance(case=_TIMED, baseline=_torch_matmul, min_speedup=0.4, baseline_name="torch.matmul",
                            floor=lambda case: (2 * (case["M"] * case["K"] + case["K"] * case["N"]
                                                     + case["M"] * case["N"]),
                                                2 * case["M"] * case["N"] * case["K"])),
    points=(3, 0),
)

register(TILED_MATMUL, TILE_TRAFFIC, TILE_CHOICE)
