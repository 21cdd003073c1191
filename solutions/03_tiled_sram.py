# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "title", "locked": true, "schema_version": 3, "solution": false}
# # 03 · Tiled SRAM kernels: matrix multiply with `tl.dot`
#
# Lesson 02 kept a recurrent state on-chip and watched the bytes drop. This lesson does the same for the most
# important kernel there is, the matrix multiply: instead of streaming every operand from HBM once per output,
# each program stages a *tile* of A and a tile of B in SRAM (shared memory and registers), multiplies them on the
# tensor cores with `tl.dot`, and reuses each loaded element many times.
#
# **You will learn**
# - why a naive matmul is memory-bound although matmul is the most compute-dense operation in deep learning;
# - how a tiled kernel works: a `BLOCK_M × BLOCK_N` output tile per program, a loop over `K` in steps of
#   `BLOCK_K`, an fp32 accumulator, masks for the ragged edges;
# - how to count the reuse a tile buys, and how to choose tile sizes against the SRAM and register budget;
# - grouped program ordering, which turns the L2 cache into a second level of reuse;
# - TF32 versus IEEE fp32 in `tl.dot`, and what the difference costs in accuracy.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import kernels
from kernels.checks import guard_launches

guard_launches()  # in the interpreter, a load or store out of bounds stops with an error that names it
print(kernels.describe())

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import math
import pathlib

import torch
import triton
import triton.language as tl

from kernels.checks import check
from kernels.device import DEVICE, ON_GPU, pick, sizes
from kernels.testing import assert_close, poisoned, randn, tolerance

ROOT = pathlib.Path(kernels.__file__).resolve().parent.parent

# %% [markdown] nbgrader={"grade": false, "grade_id": "motivation", "locked": true, "schema_version": 3, "solution": false}
# ## Why tiles: the numbers
#
# The H200 this workbook was measured on copies **4.26 TB/s** through HBM and multiplies bf16 matrices at about
# **700 TFLOP/s** on its tensor cores. Their ratio, the *ridge point*, is about **165 FLOP per byte**: a kernel
# that does fewer floating-point operations per byte it moves through HBM waits on memory, one that does more
# waits on arithmetic.
#
# Take `C = A · B` with `M = N = K = 4096` in bf16 (2 bytes per element). The work is `2·M·N·K` = 137 GFLOP,
# which the tensor cores finish in **0.2 ms**. The smallest possible traffic is reading A and B and writing C
# once, 100 MB, which takes 0.024 ms. So a good matmul is compute-bound, with room to spare.
#
# A *naive* kernel computes each output from a row of A and a column of B, loaded straight from HBM. Every output
# element reads `2·K` elements for `2·K` FLOP: **0.5 FLOP per byte**, 330× below the ridge point. Without caches
# that is `2·M·N·K·2` bytes = 275 GB, **65 ms** at 4.26 TB/s, three hundred times slower than the tensor cores
# allow. Caches save the naive kernel from the worst of this on a real GPU, but not from being far off the roofline.
#
# Tiling fixes the ratio. A program that owns a `BM × BN` tile of C loads, for each step of `BK` along K, a
# `BM × BK` tile of A and a `BK × BN` tile of B, and does `2·BM·BN·BK` FLOP with them. Each A element it loads is
# used `BN` times and each B element `BM` times. Summed over all programs, A is read `⌈N/BN⌉` times and B
# `⌈M/BM⌉` times:
#
# $$\text{bytes} = e\,\big(\lceil N/B_N\rceil\, M K + \lceil M/B_M\rceil\, K N + M N\big), \qquad
#   \text{intensity} = \frac{2MNK}{\text{bytes}} \approx \frac{2\,B_M B_N}{e\,(B_M + B_N)}$$
#
# where `e` is the element size. For 128 × 128 tiles in bf16 that is 64 FLOP/byte and 2.2 GB, 0.5 ms if nothing
# were cached: 130× less traffic than naive. The rest of the gap to the ridge point is closed by the L2 cache
# (60 MiB on the H200, lesson 01), if programs that share tiles run at the same time: that is what *grouped
# ordering* arranges.
# The naive kernel below is the case `BM = 1`: each program reuses its A element across `BN` columns but never
# shares B with another row, about 1 FLOP/byte. The formula covers both.

# %% [markdown] nbgrader={"grade": false, "grade_id": "pseudocode", "locked": true, "schema_version": 3, "solution": false}
# ## The tiled algorithm
#
# ```
# for each program (pid_m, pid_n):                 # one BM × BN tile of C, all programs in parallel
#     acc = zeros(BM, BN) in fp32                  # lives in registers for the whole loop
#     for k0 in 0, BK, 2·BK, … < K:
#         a = A[pid_m·BM : +BM, k0 : k0+BK]        # load, masked past M and K, other=0 (else undefined)
#         b = B[k0 : k0+BK, pid_n·BN : +BN]        # load, masked past K and N
#         acc += a @ b                             # tl.dot: tensor cores, fp32 accumulate
#     C[pid_m·BM : +BM, pid_n·BN : +BN] = acc      # cast to C's dtype, masked store
# ```
#
# Three details matter:
#
# - **Masks on K.** When `K` is not a multiple of `BK`, the last step reads past the end of each row of A and each
#   column of B. Loading those lanes as `0` makes them add nothing to the dot product; loading garbage would not.
# - **The accumulator is fp32** even for fp16/bf16 inputs: summing thousands of products in bf16 would lose
#   most of the mantissa. Only the final store casts to C's dtype (`acc.to(c_ptr.dtype.element_ty)`).
# - **Strides, not shapes,** address memory: `A[m, k]` is at `a_ptr + m·stride_am + k·stride_ak`, so the same
#   kernel multiplies transposed or sliced views without a copy.
#
# First, the naive kernel for comparison: one program per row of C and block of `BN` columns, a scalar loop over
# K, no `tl.dot` and no reuse of B between rows.

# %% nbgrader={"grade": false, "grade_id": "naive", "locked": true, "schema_version": 3, "solution": false}
@triton.jit
def naive_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                        BLOCK_N: tl.constexpr):
    m = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k in range(0, K):
        a = tl.load(a_ptr + m * stride_am + k * stride_ak).to(tl.float32)
        b = tl.load(b_ptr + k * stride_bk + offs_n * stride_bn, mask=offs_n < N, other=0.0)
        acc += a * b.to(tl.float32)
    tl.store(c_ptr + m * stride_cm + offs_n * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=offs_n < N)


def naive_matmul(a, b, block_n=64):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    naive_matmul_kernel[(M, triton.cdiv(N, block_n))](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                                                      BLOCK_N=block_n)
    return c


shape = sizes("matmul")
a = randn(shape["M"], shape["K"], dtype=torch.float16, seed=0)
b = randn(shape["K"], shape["N"], dtype=torch.float16, seed=1)
rows = pick(cpu=6, gpu=shape["M"])  # each naive program is a loop over K: slow in the interpreter, so fewer rows
print(f"naive, first {rows} rows of {shape}: relative error",
      assert_close("naive", a[:rows].double() @ b.double(), naive_matmul(a[:rows], b), 5e-3))

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 1 · the tiled kernel (with grouped ordering) (4 + 4 points)
#
# Write `tiled_matmul_kernel`. The grader launches it on a **one-dimensional** grid of
# `⌈M/BLOCK_M⌉ · ⌈N/BLOCK_N⌉` programs, so the kernel first turns its program id into a tile `(pid_m, pid_n)`.
# Use **grouped ordering**: consecutive program ids walk down a group of `GROUP_M` tile rows before moving one tile
# column to the right, then the next group of rows:
#
# ```
# per_group  = GROUP_M · num_pid_n             # programs in one group of tile rows
# first_m    = (pid // per_group) · GROUP_M    # the group's first tile row
# rows       = min(num_pid_m − first_m, GROUP_M)   # the last group may be shorter
# pid_m      = first_m + (pid % per_group) % rows
# pid_n      = (pid % per_group) // rows
# ```
#
# With `GROUP_M = 1` this is plain row-major order. Why it helps is shown in the widget below; the grader checks
# the ordering itself by launching only the first few programs and looking at which tiles of C were written.
#
# Arguments, in this order:
#
# | argument | meaning |
# | --- | --- |
# | `a_ptr, b_ptr, c_ptr` | A `[M, K]`, B `[K, N]`, C `[M, N]` (fp32, fp16 or bf16; C has A's dtype) |
# | `M, N, K` | sizes, any positive integers (not multiples of the blocks) |
# | `stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn` | element strides (any, e.g. a transposed A) |
# | `BLOCK_M, BLOCK_N, BLOCK_K` | `tl.constexpr` tile sizes, powers of two ≥ 16 |
# | `GROUP_M` | `tl.constexpr`, tile rows per group (≥ 1) |
# | `PRECISION` | `tl.constexpr` string for `tl.dot(..., input_precision=PRECISION)`: `"tf32"` or `"ieee"` |
#
# Accumulate in fp32 and store `C` in its own dtype. The checks use fp32 (IEEE and TF32) and fp16 on every
# machine, bf16 on a GPU only (see the box at the end), with odd sizes, transposed inputs and NaN-poisoned outputs.

# %% nbgrader={"grade": false, "grade_id": "ex1-tiled", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def tiled_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        GROUP_M: tl.constexpr, PRECISION: tl.constexpr):
    ### BEGIN SOLUTION
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_pid_n
    first_m = (pid // per_group) * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows
    pid_n = (pid % per_group) // rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak  # [BM, BK]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn  # [BK, BN]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k0), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k0) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
    ### END SOLUTION


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1-try-text", "locked": true, "schema_version": 3, "solution": false}
# A wrapper in the house style (check inputs, allocate, launch) lets you try it before the checks do. It is the
# same launch the grader uses.

# %% nbgrader={"grade": false, "grade_id": "ex1-try", "locked": true, "schema_version": 3, "solution": false}
def tiled_matmul(a, b, block_m=32, block_n=32, block_k=32, group_m=4, precision="ieee", num_warps=4,
                 num_stages=3):
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"need A [M, K] and B [K, N], got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise TypeError(f"A and B must share a dtype, got {a.dtype} and {b.dtype}")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    tiled_matmul_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                              BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
                              PRECISION=precision, num_warps=num_warps, num_stages=num_stages)
    return c


try:
    c = tiled_matmul(a, b, block_m=16, block_n=16, block_k=16)
except Exception as e:  # the stub raises until exercise 1 is done; any other error is your kernel's, shown in full
    if "NotImplementedError" not in f"{type(e).__name__}: {e}":
        raise
    print("tiled_matmul_kernel is not written yet: write it in the cell above, then run this cell again")
else:
    print("tiled:", shape, "relative error", assert_close("tiled", a.double() @ b.double(), c, tolerance(a.dtype)))

# %% nbgrader={"grade": true, "grade_id": "ex1-check", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("03_tiled_sram.tiled_matmul", tiled_matmul_kernel)

# %% nbgrader={"grade": true, "grade_id": "ex1-hidden", "locked": true, "points": 4, "schema_version": 3, "solution": false}
# Hidden tests (other shapes and dtypes, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("03_tiled_sram.tiled_matmul", tiled_matmul_kernel, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "widget-text", "locked": true, "schema_version": 3, "solution": false}
# ## Look at it: which tiles each program loads
#
# The explorer below runs **your** kernel (or the package's tiled kernel, until yours passes) under Triton's
# interpreter on a small problem and records every load and store. Pick a program and a k step: the heat-maps show
# which elements of A and B it loaded and which tile of C it wrote, with how often each element was loaded over
# the whole launch. Change `GROUP_M` and watch the set of A and B tiles that the first few programs share: with
# `GROUP_M = 1` the first programs sweep one row of tiles of C and need every column tile of B; with grouping they
# form a square and load fewer distinct tiles, so more of them are still in L2 when the next program needs them.
# On the 128 × 128 C below (8 × 8 tiles of 16), programs 0..7 need 18 KiB of distinct A and B in row-major order
# and 12 KiB with `GROUP_M = 2`; programs 0..15 need 20 KiB row-major and 16 KiB with `GROUP_M = 4`.

# %% nbgrader={"grade": false, "grade_id": "widget", "locked": true, "schema_version": 3, "solution": false} tags=["widget"]
import torch
import triton

from kernels.testing import randn
from kernels.viz import tile_explorer, trace


def your_matmul(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M=1):
    a, b = randn(M, K, seed=0, device="cpu"), randn(K, N, seed=1, device="cpu")
    c = torch.empty(M, N)
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    tiled_matmul_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BLOCK_M=BLOCK_M,
                              BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, PRECISION="ieee")
    return c


try:
    trace(your_matmul, M=20, N=20, K=20, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2)
    launch = your_matmul
    print("tracing your tiled_matmul_kernel")
except Exception as e:  # not written yet: show the package's demo kernel
    launch = None
    print(f"tracing the package's demo kernel (yours does not run yet: {type(e).__name__})")
tile_explorer(launch, M=128, N=128, K=32, GROUP_M=2)

# %% [markdown] nbgrader={"grade": false, "grade_id": "tf32-text", "locked": true, "schema_version": 3, "solution": false}
# ## TF32 versus IEEE
#
# For fp32 inputs, `tl.dot` on an NVIDIA GPU defaults to **TF32**: the tensor cores round each input to a 10-bit
# mantissa (like fp16's) but keep fp32's 8-bit exponent, and accumulate in fp32. It runs at tensor-core speed and
# its relative error is about `1e-3`, which training tolerates. `input_precision="ieee"` computes true fp32
# products on the ordinary FP32 units: about `1e-6`, and about 7× slower on an H200 (67 TFLOP/s of FP32 on the
# spec sheet, about 51 measured, against about 495 dense TF32 on the tensor cores). The cell below measures
# both errors against a float64 product. (Under the interpreter, numpy computes the dot in fp32 whatever the
# precision, so both rows show the IEEE error: one of the differences listed in the box at the end.)

# %% nbgrader={"grade": false, "grade_id": "tf32", "locked": true, "schema_version": 3, "solution": false}
def precision_errors(kernel_fn):
    x = randn(shape["M"], shape["K"], seed=5)
    y = randn(shape["K"], shape["N"], seed=6)
    ref = x.double() @ y.double()
    for precision in ("tf32", "ieee"):
        err = assert_close(precision, ref, kernel_fn(x, y, precision=precision), tolerance(torch.float32, tf32=True))
        print(f"{precision:>5}: relative error {err:.2e}")


from kernels.checks import describe_error

try:
    precision_errors(tiled_matmul)
except AssertionError as e:  # it runs, and its product is off
    print(f"your tiled_matmul_kernel runs but its product is wrong: {str(e).strip().splitlines()[0][:300]}; "
          "exercise 1's check says what to fix")
except Exception as e:  # noqa: BLE001 (an error of the learner's kernel is named, not raised from this cell)
    if "NotImplementedError" in f"{type(e).__name__}: {e}":  # the exercise is not done yet
        print("tiled_matmul_kernel is not written yet: finish exercise 1 first")
    else:
        print(f"your tiled_matmul_kernel does not run yet: {describe_error(e)}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 2 · count the reuse (2 points)
#
# Write `tile_traffic(M, N, K, block_m, block_n, elem_bytes)`: the bytes a tiled matmul moves through HBM if
# **nothing is cached**, counting only elements inside the matrices (masked lanes move nothing). Each program loads
# its row-strip of A and column-strip of B once per k step, so over the launch A is read once per tile column and
# B once per tile row; C is written once. Return an `int`. `BLOCK_K` does not appear: why not? (Nothing is graded
# on it; the recap answers it.)
#
# The naive kernel above is `tile_traffic(M, N, K, 1, BLOCK_N, e)`. The cell after yours uses your function to
# print the no-cache traffic and intensity of a 4096³ bf16 product for a few tile shapes.

# %% nbgrader={"grade": false, "grade_id": "ex2-traffic", "locked": false, "schema_version": 3, "solution": true}
def tile_traffic(M, N, K, block_m, block_n, elem_bytes):
    ### BEGIN SOLUTION
    reads_a = math.ceil(N / block_n) * M * K
    reads_b = math.ceil(M / block_m) * K * N
    return int(elem_bytes * (reads_a + reads_b + M * N))
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex2-table", "locked": true, "schema_version": 3, "solution": false}
def traffic_table(traffic=tile_traffic, n=4096, e=2, bandwidth=4.26e12):
    print(f"{'tile':>10} {'GB moved':>9} {'FLOP/byte':>10} {'ms at 4.26 TB/s':>16}")
    for bm, bn in [(1, 64), (16, 16), (32, 32), (64, 64), (128, 64), (128, 128), (256, 128)]:
        moved = traffic(n, n, n, bm, bn, e)
        print(f"{bm:>4} x {bn:<4} {moved / 1e9:9.2f} {2 * n**3 / moved:10.1f} {moved / bandwidth * 1e3:16.2f}")


try:
    traffic_table()
except NotImplementedError:
    print("write tile_traffic first")

# %% nbgrader={"grade": true, "grade_id": "ex2-check", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("03_tiled_sram.tile_traffic", tile_traffic)

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 3 · choose the tiles (3 points, given on a GPU: the check times your tiles)
#
# Bigger tiles mean more reuse, but a tile has to fit on the chip:
#
# - **Shared memory.** Triton software-pipelines the k loop: while the tensor cores work on step `i`, the loads of
#   the next `num_stages − 1` steps are in flight, each staged in shared memory. That needs
#   `num_stages · (BM·BK + BK·BN) · e` bytes, and an H200 block may use at most **227 KiB** (232,448 bytes).
# - **Registers.** The fp32 accumulator is `BM·BN` floats spread over `32·num_warps` threads, and a thread has
#   at most 255 registers, some of which the loads and addresses need: keep it at or below 128 floats per thread.
# - **Enough programs.** An H200 has 132 SMs, and each SM runs as many programs *at once* as its shared memory and
#   registers allow: two with 128 × 128 tiles, `BLOCK_K = 64` and three stages (96 KiB each: an SM has 228 KiB),
#   one with 256 × 256 tiles. Programs
#   beyond that wait and start as others finish, in **waves**. 256 × 256 tiles of a 4096² output make only 256
#   programs in all: two waves (132 programs, then 124), and one resident program per SM
#   leaves nothing to switch to while it waits for memory. 128 × 128 tiles make 1024 programs: 264 resident at
#   a time (two per SM), about four waves, the last one nearly full.
#
# Set `TILES = dict(BLOCK_M=…, BLOCK_N=…, BLOCK_K=…, GROUP_M=…, num_warps=…, num_stages=…)` for a **4096³ bf16**
# product on the H200: powers of two, `BLOCK_*` from 16 (`tl.dot`'s smallest tile) to 256 (a larger tile fits
# neither budget), a no-cache intensity of
# at least 30 FLOP/byte (from your `tile_traffic`; 64 × 64 tiles reach 31.8), inside both budgets. On a GPU the
# check also times your kernel with these tiles and expects at least 40% of `torch.matmul`'s rate. On the CPU the
# check still holds your tiles to everything above and names what is off, but the exercise's points need that
# timing: your score lists it as needing a GPU.
# Justify the choice in a comment above `TILES`, with numbers (the cell after it prints the budgets).

# %% nbgrader={"grade": false, "grade_id": "ex3-tiles", "locked": false, "schema_version": 3, "solution": true}
TILES = None  # until your answer below sets it (the check then says it is missing)
### BEGIN SOLUTION
# 128 x 128 tiles: 64 FLOP/byte before any caching, 2.2 GB (0.5 ms at 4.26 TB/s); GROUP_M = 8 makes most
# repeated loads hit L2. Three stages of 128 x 64 + 64 x 128 bf16 tiles are 96 KiB of shared memory (of 227);
# the accumulator is 64 fp32 per thread with 8 warps; 1024 programs, two resident per SM, are about 4 waves.
TILES = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)
### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex3-budget", "locked": true, "schema_version": 3, "solution": false}
def budget(t, e=2):
    smem = t["num_stages"] * (t["BLOCK_M"] * t["BLOCK_K"] + t["BLOCK_K"] * t["BLOCK_N"]) * e
    per_thread = t["BLOCK_M"] * t["BLOCK_N"] / (32 * t["num_warps"])
    programs = math.ceil(4096 / t["BLOCK_M"]) * math.ceil(4096 / t["BLOCK_N"])
    # programs an SM runs at once, as its 228 KiB of shared memory and 2048 threads allow (registers may allow fewer)
    resident = max(1, min(228 * 1024 // max(1, smem), 2048 // (32 * t["num_warps"])))
    print(f"shared memory {smem / 1024:.0f} KiB of 227; accumulator {per_thread:.0f} fp32 per thread of 128; "
          f"{programs} programs, {resident} resident per SM: {programs / (132 * resident):.1f} waves on 132 SMs")


from kernels.checks import value_problem

refused = TILES is not None and value_problem("03_tiled_sram.tile_choice", TILES)
if TILES is None:
    print("set TILES in the cell above first")
elif refused:  # the check's own rule: TILES it refuses is named as the check names it
    print(refused)
else:
    budget(TILES)

# %% nbgrader={"grade": true, "grade_id": "ex3-check", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("03_tiled_sram.tile_choice", TILES, tiled_matmul_kernel)

# %% [markdown] nbgrader={"grade": false, "grade_id": "bench-text", "locked": true, "schema_version": 3, "solution": false}
# ## Benchmark on your hardware
#
# The package's ladder benchmark validates every version against a float64 product before timing it, and prints
# the two floors: bytes over the measured copy bandwidth, FLOP over the measured matmul rate. Your kernel joins
# the ladder as `yours`: with your `TILES` on a GPU, with 32 × 32 × 32 tiles in the interpreter (which runs a
# program at a time, so larger tiles only make it slower). On a GPU it times one fp16 product of about 4096³ (set
# `FULL_LADDER = True` for bf16, fp32 with TF32 and IEEE dots, and a 1024³ product); under the interpreter it runs
# quick, small sizes, whose times say how slow the interpreter is and nothing about a GPU.

# %% nbgrader={"grade": false, "grade_id": "bench", "locked": true, "schema_version": 3, "solution": false}
from kernels.bench import Version, run


def yours(a, b, **_):
    t = dict(TILES) if ON_GPU else dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4, num_warps=4, num_stages=1)
    return tiled_matmul(a, b, block_m=t["BLOCK_M"], block_n=t["BLOCK_N"], block_k=t["BLOCK_K"],
                        group_m=t["GROUP_M"], precision="tf32", num_warps=t["num_warps"], num_stages=t["num_stages"])


try:
    yours(a, b)
    extra = [Version("yours", yours)]
except Exception as e:
    print(f"your kernel is left out of the benchmark ({type(e).__name__}: finish exercises 1 and 3)")
    extra = []
FULL_LADDER = False  # True on a GPU: bf16, fp16 and fp32 (TF32 and IEEE) at 4096^3, and a 1024^3 product
if FULL_LADDER:
    only = None
else:  # one fp16 product; in the interpreter without the naive kernel, which takes seconds there
    only = ["torch", "naive", "tiled", "yours"] if ON_GPU else ["torch", "tiled", "yours"]
results = run("matmul", quick=not FULL_LADDER, extra=extra, only=only, out=ROOT / "artifacts" / "03_tiled_sram")

# %% [markdown] nbgrader={"grade": false, "grade_id": "roofline-text", "locked": true, "schema_version": 3, "solution": false}
# ## Your matmul on the roofline
#
# Lesson 01 drew two roofs over one memory slope: the tensor cores' (fp16 and bf16 `tl.dot`, ridge about
# 165 FLOP/byte on an H200) and the FP32 CUDA cores' (ridge about 12, from the 51 TFLOP/s measured there). The
# cell puts each version of the benchmark above on them. Your kernel sits at the intensity your own `tile_traffic` gives for your `TILES`,
# `2MNK / tile_traffic(M, N, K, BM, BN, e)`, the bytes it asks for with no help from L2; the others sit at the
# fewest bytes any matmul must move. A point left of the ridge and on the slope is memory-bound; one right of it
# and below the roof is losing time somewhere else (too few programs, pipeline stalls, register spills). On the
# CPU the two roofs are torch's fp16 and fp32 matmul rates on this CPU, and the points are interpreter rates, far
# below both.

# %% nbgrader={"grade": false, "grade_id": "roofline", "locked": true, "schema_version": 3, "solution": false}
import matplotlib.pyplot as plt

from kernels.bench import matmul_rate
from kernels.viz.roofline import draw_roofline

rates = ({"fp16/bf16 tensor cores": matmul_rate(torch.float16), "FP32 CUDA cores": matmul_rate(torch.float32)}
         if ON_GPU else {"torch fp16 matmul (CPU)": matmul_rate(torch.float16),
                         "torch fp32 matmul (CPU)": matmul_rate(torch.float32)})
series = {}
for row in results["rows"]:
    M, N, K, e = row["M"], row["N"], row["K"], 4 if row["dtype"] == "torch.float32" else 2
    for name, entry in row["versions"].items():
        if entry.get("status") != "ok":
            continue
        traffic = row["bytes"]
        if name == "yours":
            t = globals().get("TILES") if ON_GPU else dict(BLOCK_M=32, BLOCK_N=32)
            try:
                traffic = tile_traffic(M, N, K, t["BLOCK_M"], t["BLOCK_N"], e)
            except Exception:  # exercise 2 not done: the fewest bytes instead
                pass
        series.setdefault(f"{name}, {row['problem']}", []).append((row["flops"] / traffic,
                                                                   row["flops"] / (entry["ms"] * 1e-3)))
fig, ax = plt.subplots(figsize=(6.5, 4))
draw_roofline(ax, results["copy_bandwidth_Bps"], rates, dict(list(series.items())[:5]),
              title=kernels.describe().split(" | ")[0])
plt.show()

# %% [markdown] nbgrader={"grade": false, "grade_id": "no-gpu", "locked": true, "schema_version": 3, "solution": false}
# > **Without a GPU.** Everything above ran in Triton's interpreter, which executes each program one after another
# > in numpy on the CPU. Your kernel is checked exactly as on a GPU (same launch, odd sizes, poisoned outputs),
# > with these differences:
# > - `tl.dot` is a numpy matmul: TF32 rounding does not happen, so `"tf32"` and `"ieee"` give the same result
# >   (which is why the check asks that every `tl.dot` passes `input_precision=PRECISION`: without it, a GPU
# >   computes fp32 dots in TF32 and the `"ieee"` cases fail there);
# > - bf16 `tl.dot` is computed wrongly by the interpreter (relative error around 1e9, a Triton bug), so bf16 cases
# >   are checked on a GPU only; fp16 and fp32 are checked everywhere;
# > - `num_warps` and `num_stages` mean nothing, there is no shared memory or L2, and times are interpreter times:
# >   the performance part of exercise 3 is reported as *not graded*, never failed.

# %% [markdown] nbgrader={"grade": false, "grade_id": "recap", "locked": true, "schema_version": 3, "solution": false}
# ## Recap
#
# - A matmul is compute-bound only if each loaded element is reused: one output per program is 0.5 FLOP/byte; a
#   `BM × BN` tile reuses A `BN` times and B `BM` times, `2·BM·BN / (e·(BM+BN))` FLOP/byte.
# - `BLOCK_K` changes how a strip of A or B is cut into k steps, not how much of it a program loads: the steps
#   of one strip add up to the whole strip whatever their width, so the no-cache traffic does not depend on it.
# - The tiled kernel: map the program id to a tile, loop over K with masked loads (`other=0`), `tl.dot` into an
#   fp32 accumulator, cast once at the store.
# - Tile sizes trade reuse against shared memory (`num_stages` copies of the A and B tiles), registers (the
#   accumulator) and load balance (enough programs for all SMs).
# - Grouped ordering makes programs that run together share A and B tiles, so L2 supplies the repeated loads.
# - TF32 is the GPU's default for fp32 `tl.dot`: ~1e-3 relative error at tensor-core speed; `"ieee"` for ~1e-6.
#
# Next, lesson 04 applies the same idea to linear attention: chunks of the sequence become tiles, and the
# recurrent state of lesson 02 is carried between them on-chip.

# %% [markdown] nbgrader={"grade": false, "grade_id": "score_md", "locked": true, "schema_version": 3, "solution": false}
# ## Your score
#
# The cell below runs every check of this lesson on your notebook as it stands, the hidden ones included (it
# reuses the outcome of each check you already ran on the same kernel), and prints your points per exercise and
# in total. Points for speed are graded on a GPU only; without one they are listed as needing a GPU. From a
# shell, `make score L=03` does the same for your saved notebook in `my-work/`.

# %% nbgrader={"grade": false, "grade_id": "score", "locked": true, "schema_version": 3, "solution": false}
from grader.score import score_here

your_score = score_here("03_tiled_sram", globals())
