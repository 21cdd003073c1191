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
# # 01 · The memory hierarchy: registers, SRAM, L2 and HBM
#
# A modern GPU can do far more arithmetic than its memory can feed. Almost every kernel in this course is
# limited by how many bytes it moves and *where* it moves them from, so before writing fast kernels we measure
# the memory system of the machine in front of you.
#
# **You will learn**
# - the levels of the hierarchy (registers, shared memory/L1, L2, HBM), their sizes and their bandwidths;
# - how to measure copy bandwidth, and how to write a copy kernel whose grid does not grow with the data
#   (a *grid-stride loop*);
# - why the same bytes cost more when they are read far apart: warps, 32-byte sectors and **coalescing**;
# - the **L2 cliff**: what happens to bandwidth when the working set outgrows the L2 cache;
# - **arithmetic intensity** and the **roofline**: when a kernel is bound by memory and when by arithmetic.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import kernels
from kernels.checks import guard_launches

guard_launches()  # in the interpreter, a load or store out of bounds stops with an error that names it
print(kernels.describe())

import matplotlib.pyplot as plt
import torch
import triton
import triton.language as tl

from kernels.bench import copy_bandwidth, matmul_rate, time_ms
from kernels.checks import check, describe_error
from kernels.device import DEVICE, ON_GPU, pick, sizes
from kernels.testing import randn

# %% [markdown] nbgrader={"grade": false, "grade_id": "hierarchy_md", "locked": true, "schema_version": 3, "solution": false}
# ## The hierarchy, in numbers
#
# Each level is smaller, closer to the arithmetic units and faster than the one below it. For the H200 that
# the workbook was measured on (figures marked ≈ are NVIDIA's published or commonly measured values for the
# Hopper generation; the bold ones were measured on the project's machine):
#
# | level | where | capacity on an H200 | bandwidth | latency |
# | --- | --- | --- | --- | --- |
# | registers | in each SM, private to a thread | 256 KB per SM, ≈ 33 MB in all (132 SMs) | feeds the ALUs every cycle | 1 cycle |
# | shared memory / L1 (SRAM) | in each SM, shared by a block of threads | up to 228 KB per SM, ≈ 30 MB in all | ≈ 30 TB/s in all | ≈ 30 cycles |
# | L2 cache | on chip, shared by all SMs | 60 MiB as the driver reports it: two partitions of 30 MiB (below) | **7.7 TB/s measured** for re-reads that fit | ≈ 200–300 cycles |
# | HBM3e | off chip, in the package | 141 GB | 4.8 TB/s peak, **4.26 TB/s measured** for a copy | ≈ 500–800 cycles |
#
# Against that, the H200 multiplies bf16 matrices at **679–790 TFLOP/s (measured)**. Divide the two, at about
# 700 TFLOP/s: to keep the tensor cores busy, a kernel must do about **165 floating-point operations for every
# byte** it reads
# from HBM. Adding two vectors does one operation per 12 bytes. The gap between those two numbers, more than
# three orders of magnitude, is why this course is about moving data, not about arithmetic.
#
# Registers and shared memory are what a Triton program uses for its blocks: a `tl.load` brings a block from
# global memory (HBM, through L2) into registers, and Triton stages tiles through shared memory where a
# computation needs it (lesson 03). The art is to load each byte from HBM as few times as possible and reuse it
# on chip as often as possible.

# %% [markdown] nbgrader={"grade": false, "grade_id": "copy_md", "locked": true, "schema_version": 3, "solution": false}
# ## Measuring copy bandwidth
#
# The simplest memory benchmark is a copy: read `n` elements, write `n` elements, compute nothing. Its speed is
# the ceiling for every kernel that streams data, and the HBM **floor** of any kernel is the bytes it must move
# divided by this bandwidth. `kernels.bench.copy_bandwidth()` times torch's device-to-device copy of a large
# buffer (2 GiB on a GPU, so caches cannot help) and counts bytes read plus bytes written.

# %% nbgrader={"grade": false, "grade_id": "copy_measure", "locked": true, "schema_version": 3, "solution": false}
bandwidth = copy_bandwidth()
print(f"copy bandwidth on this machine: {bandwidth / 1e9:,.1f} GB/s (read + write)")
if ON_GPU:
    print(f"that is {bandwidth / 4.26e12:.0%} of the H200's measured 4.26 TB/s")

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_md", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 1 · A copy kernel with a grid-stride loop (2 + 2 points, and 2 for speed on a GPU)
#
# In lesson 00 the grid grew with the data: one program per block. That is simple, and on a GPU it is cheap: the
# hardware hands the next program to an SM as soon as one finishes, so a million programs cost little more than
# the work they do. What one program per block does cost is the set-up each program repeats (address arithmetic,
# constants, an accumulator to initialise) and a grid that is tied to the problem size. The alternative is a
# **grid-stride loop**: launch a fixed number of programs, a few per SM, and let each one walk through the data in
# steps of the whole grid's width; the same shape carries over to *persistent* kernels that keep state across
# blocks:
#
# ```
# kernel copy(x_ptr, out_ptr, n, BLOCK_SIZE):
#     P = num_programs(0)
#     for start in pid·BLOCK_SIZE, pid·BLOCK_SIZE + P·BLOCK_SIZE, … while start < n:
#         offs = start + [0 … BLOCK_SIZE−1]
#         store(out_ptr + offs, load(x_ptr + offs, where offs < n), where offs < n)
# ```
#
# At every step the `P` programs together cover one contiguous stretch of `P·BLOCK_SIZE` elements, so the
# accesses stay contiguous while each program does many blocks.
#
# One detail decides the speed. Triton turns a contiguous load into 16-byte vector instructions (`ld.global.v4`
# for fp32: four elements per instruction) only when it can prove that four neighbouring elements share one
# mask value. `offs < n` with an `n` that is not a multiple of 16 (2^27 + 17, say) proves nothing, so a load
# masked on every step becomes one 4-byte instruction per element: four times the instructions, about 0.73 of
# torch's copy speed on an H200. Every block but the last is full, though: test `start + BLOCK_SIZE <= n` and
# load and store those blocks without a mask, keeping the mask for the one block that runs past the end. (Compile
# both versions and count `ld.global.v4` in the PTX: lesson 05 shows how.)
#
# Write `copy_kernel` so that `out[i] = x[i]` for all `i < n_elements`. The checker launches it as
#
# ```python
# copy_kernel[(P,)](x, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)
# ```
#
# with `P ≤ cdiv(n_elements, BLOCK_SIZE)`, often far fewer programs than blocks; `tl.num_programs(0)` gives
# `P` inside the kernel. `range(start, stop, step)` with runtime bounds works inside a Triton kernel. On a GPU
# the check also times your kernel on 2^27 fp32 elements (1 GiB moved) and asks for at least 75% of the speed
# of torch's own copy; under the interpreter that part is reported as not graded.

# %% nbgrader={"grade": false, "grade_id": "copy_kernel", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def copy_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    ### BEGIN SOLUTION
    pid = tl.program_id(axis=0)
    step = tl.num_programs(axis=0) * BLOCK_SIZE
    lanes = tl.arange(0, BLOCK_SIZE)  # [BLOCK_SIZE]
    for start in range(pid * BLOCK_SIZE, n_elements, step):
        offs = start + lanes
        if start + BLOCK_SIZE <= n_elements:  # a full block: no mask, so 16-byte vector loads and stores
            tl.store(out_ptr + offs, tl.load(x_ptr + offs))
        else:  # the one block that runs past the end
            mask = offs < n_elements
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_copy", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("01_memory_hierarchy.copy", copy_kernel)

# %% nbgrader={"grade": true, "grade_id": "check_copy_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests (other dtypes, odd sizes, grids, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("01_memory_hierarchy.copy", copy_kernel, hidden=True)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_copy_speed", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("01_memory_hierarchy.copy_speed", copy_kernel)

# %% nbgrader={"grade": false, "grade_id": "bench_copy", "locked": true, "schema_version": 3, "solution": false}
n = sizes("memory")["n"]
x = randn(n, seed=0)
out = torch.empty_like(x)
programs = 8 * torch.cuda.get_device_properties(0).multi_processor_count if ON_GPU else 4
moved = 2 * n * x.element_size()
print(f"copy of {n:,} fp32 elements ({moved / 2**20:,.1f} MiB moved), HBM floor {moved / bandwidth * 1e3:.4f} ms")
if not ON_GPU:
    print("(in the interpreter your kernel's time is Python's, lane by lane, and torch's is this CPU's memcpy: "
          "neither rate says anything about a GPU)")
for name, fn in [("yours", lambda: copy_kernel[(programs,)](x, out, n, BLOCK_SIZE=4096, num_warps=8)),
                 ("torch", lambda: out.copy_(x))]:
    try:
        ms = time_ms(fn)
    except Exception as e:  # the stub raises NotImplementedError (compiled: an error naming that line)
        why = describe_error(e)
        print(f"{name:>6}: not run ({'finish exercise 1 first' if 'NotImplementedError' in why else why})")
        continue
    floor = f"  {moved / bandwidth * 1e3 / ms:5.2f} of the floor" if ON_GPU else ""
    print(f"{name:>6}: {ms:9.4f} ms  {moved / ms / 1e6:9.1f} GB/s{floor}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "l2_md", "locked": true, "schema_version": 3, "solution": false}
# ## The L2 cliff
#
# A copy of 2 GiB streams through HBM. A kernel that reads the *same* buffer again and again behaves differently:
# as long as the buffer fits in L2, only the first pass comes from HBM and the rest are served on chip. Plot the
# bandwidth of repeated re-reads against the buffer size and you see a plateau above the HBM line, then a cliff
# at the L2 size, where every pass has to go back to HBM.
#
# **How big is the H200's L2?** The driver reports 60 MiB (`torch.cuda.get_device_properties(0).L2_cache_size`;
# NVIDIA's H100 has 50 MiB). That is two partitions of 30 MiB, each wired to half the SMs. A line read by SMs on
# both sides can be held in both partitions at once, so data that every SM reads, as in this re-read, can take up
# to twice its size in L2: somewhere between 30 and 60 MiB of *unique* data stays resident, and only a
# measurement says where. On the project's H200 re-reads ran at L2 speed (7.6 TB/s) with 32 MiB and at HBM speed
# (3.6 TB/s) with 64 MiB. On a GPU the cell below measures the curve on yours, every 8 MiB between 16 and
# 128 MiB, to show where in between the cliff falls; without one it shows the H200's reference curve. Plan on
# about 30 MiB of shared data, not 60.
#
# This is the single most useful fact for kernel design after the bandwidth itself: data that several programs
# need should be reused *while it is still in L2* (grouped program order, lesson 03) or, better, while it is in
# registers and shared memory (lessons 02 and 04).
#
# On a GPU the next cell measures the curve on your machine (about ten seconds); without one the widget shows
# the reference curve measured on the project's H200, labelled as such. Drag the slider across the L2 size.

# %% nbgrader={"grade": false, "grade_id": "l2_widget", "locked": true, "schema_version": 3, "solution": false} tags=["widget"]
from kernels.viz import working_set_view
from kernels.viz.measure import working_set

l2_curve = working_set() if ON_GPU else None
working_set_view(l2_curve, copy_bandwidth=copy_bandwidth() if ON_GPU else None)

# %% [markdown] nbgrader={"grade": false, "grade_id": "coalesce_md", "locked": true, "schema_version": 3, "solution": false}
# ## Coalescing: why the same bytes cost more when they are far apart
#
# A GPU does not fetch single bytes. The 32 threads of a **warp** issue their loads together, and the memory
# system answers in **32-byte sectors** (four to a 128-byte cache line). When the 32 threads read 32 neighbouring
# fp32 values, they need 128 contiguous bytes: four sectors, every byte used. The access is **coalesced**.
#
# Now let each thread read an element `stride` elements after its neighbour's. With stride 2 the warp spans 256
# bytes and uses half of them; with stride 8 or more (8 × 4 B = 32 B) every thread lands in its own sector, and
# the memory system moves 32 bytes to deliver 4. The bandwidth you *use* falls by that factor even though the
# DRAM works just as hard. (That is the sector count, the cost seen from L2; a read that misses L2 fetches 64
# bytes from HBM, so past stride 16 the measured cost grows to about twice the sector count: see below.)
#
# The classic way to meet this by accident is to read a **column** of a row-major matrix: the elements of a
# column are a whole row apart.
#
# ## Exercise 2 · Read one column of a matrix (2 + 1 points)
#
# Write `column_kernel` so that `out[m] = x[m, col]` for `m < M`, where `x` is a row-major matrix with row
# stride `stride_m` (in elements) and unit column stride. The checker launches it as
#
# ```python
# column_kernel[(triton.cdiv(M, BLOCK_M),)](x, out, M, x.stride(0), col, BLOCK_M=BLOCK_M)
# ```

# %% nbgrader={"grade": false, "grade_id": "column_kernel", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def column_kernel(x_ptr, out_ptr, M, stride_m, col, BLOCK_M: tl.constexpr):
    ### BEGIN SOLUTION
    offs_m = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    mask = offs_m < M
    vals = tl.load(x_ptr + offs_m * stride_m + col, mask=mask)
    tl.store(out_ptr + offs_m, vals, mask=mask)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_column", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("01_memory_hierarchy.column", column_kernel)

# %% nbgrader={"grade": true, "grade_id": "check_column_hidden", "locked": true, "points": 1, "schema_version": 3, "solution": false}
# Hidden tests (other dtypes, shapes and columns, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("01_memory_hierarchy.column", column_kernel, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_md", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 3 · Predict the slowdown: count the sectors (1 + 1 points)
#
# Before measuring, predict. Write `sector_bytes(n, stride, itemsize)`: the number of bytes the memory system
# must deliver to read `n` elements of `itemsize` bytes (1, 2, 4 or 8) that lie `stride` elements apart, the
# first at the start of a 32-byte sector. Count every sector that holds at least one of the elements, 32 bytes
# each, and return an `int` (a whole number of bytes: `//` and `math.ceil` give ints, `/` gives a float). (Pure
# Python: no kernel, no `kernels` package.)
#
# Two sanity checks: `sector_bytes(32, 1, 4) == 128` (one coalesced warp), and `sector_bytes(32, 8, 4) == 1024`
# (every element in its own sector). The ratio `sector_bytes(n, s, 4) / (4·n)` is the factor by which a stride
# `s` read of fp32 data is slower than a contiguous one, when both are limited by memory.

# %% nbgrader={"grade": false, "grade_id": "sector_bytes", "locked": false, "schema_version": 3, "solution": true}
def sector_bytes(n: int, stride: int, itemsize: int) -> int:
    ### BEGIN SOLUTION
    if n <= 0:
        return 0
    step = stride * itemsize
    if step >= 32:
        return 32 * n
    return 32 * ((n - 1) * step // 32 + 1)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_sectors", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("01_memory_hierarchy.sector_bytes", sector_bytes)

# %% nbgrader={"grade": true, "grade_id": "check_sectors_hidden", "locked": true, "points": 1, "schema_version": 3, "solution": false}
# Hidden tests (more sizes, strides and element sizes) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("01_memory_hierarchy.sector_bytes", sector_bytes, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "coalesce_measure_md", "locked": true, "schema_version": 3, "solution": false}
# ### Prediction against measurement
#
# The next cell times **your** `column_kernel` reading a column of fp32 matrices whose rows are 1, 2, 4, …, 32
# elements wide, reports the useful bandwidth (bytes of the column read plus bytes written, per second), and
# sets the slowdown beside the sector count's prediction, `(sector_bytes(n, s, 4) / (4n) + 1) / 2` (reads cost
# their sectors, writes stay coalesced). Stride 1 is a plain copy; the widget then shows what one warp fetches
# at each stride beside your numbers.
#
# On the project's H200 the useful bandwidth was 3.64, 2.53, 1.58, 0.75, 0.38 and 0.35 TB/s for strides 1, 2,
# 4, 8, 16 and 32: slowdowns of 1.4, 2.3, 4.8, 9.7 and 10.5 against predictions of 1.5, 2.5, 4.5, 4.5, 4.5.
# The sector count is right up to stride 8 and then too kind: when a read misses in L2, the request to HBM is
# made in 64-byte pieces (two sectors), so once elements are 64 bytes apart each costs 64 bytes, not 32;
# `(16 + 1) / 2 = 8.5` is close to what was measured. Models are for checking against measurements, not for
# replacing them.

# %% nbgrader={"grade": false, "grade_id": "coalesce_widget", "locked": true, "schema_version": 3, "solution": false} tags=["widget"]
from kernels.memory import strided_memory
from kernels.memory.strided import bytes_moved as gather_bytes_moved
from kernels.viz import coalescing_view

m_out = pick(cpu=2_000, gpu=2**24)
strides = [1, 2, 4, 8, 16, 32]
buffer = randn(m_out * strides[-1], seed=1)
col_out = torch.empty(m_out, device=DEVICE)


def column_read(s):
    column_kernel[(triton.cdiv(m_out, 1024),)](buffer, col_out, m_out, s, 0, BLOCK_M=1024)


try:
    column_read(1)
    read, who = column_read, "your column_kernel"
except Exception as e:  # the stub raises until exercise 2 is done: time the package's strided gather instead
    why = describe_error(e)
    print("timing the package's strided gather, not yours: " + (
        "column_kernel is still the stub" if "NotImplementedError" in why
        else f"your column_kernel stopped ({why}); fix it and run this cell again"))

    def read(s):
        strided_memory(buffer[: m_out * s], stride=s)

    who = "the package's strided gather"
useful = []
print(f"{who}, {m_out:,} fp32 elements per column")
if not ON_GPU:
    print("(in the interpreter these times are Python's, not the memory system's: the slowdowns mean nothing here, "
          "and the widget below shows the H200's measured curve)")
print(f"{'stride':>6} {'useful GB/s':>12} {'slowdown':>9} {'predicted':>10}")
for s in strides:
    ms = time_ms(lambda s=s: read(s))
    useful.append(2 * m_out * 4 / (ms * 1e-3))
    predicted = gather_bytes_moved(m_out * s, s, 4) / (2 * m_out * 4)
    print(f"{s:6d} {useful[-1] / 1e9:12.1f} {useful[0] / useful[-1]:9.2f} {predicted:10.2f}")
measured = {"stride": strides, "bandwidth": useful, "label": f"{who}, measured here"} if ON_GPU else None
coalescing_view(measured)

# %% [markdown] nbgrader={"grade": false, "grade_id": "roofline_md", "locked": true, "schema_version": 3, "solution": false}
# ## Arithmetic intensity and the roofline
#
# The **arithmetic intensity** of a kernel is the work it does per byte it moves, in FLOP/byte. With `β` the
# memory bandwidth and `π` the arithmetic rate, a kernel of intensity `I` can run at most at
#
# ```
# attainable FLOP/s = min(π, I · β)
# ```
#
# Plotted on log–log axes this is the **roofline**: a slope where memory limits (`I · β`), a flat roof where
# arithmetic does, and a *ridge point* at `I = π / β` between them.
# Memory-bound kernels get faster only by moving fewer bytes; compute-bound ones only by doing less or better
# arithmetic.
#
# A GPU has more than one roof. The **tensor cores** multiply bf16 matrices (the H200: about 700 TFLOP/s,
# ridge about 165 FLOP/byte); the ordinary **CUDA cores** do FP32 arithmetic element by element, at about
# 51 TFLOP/s measured (67 on the spec sheet), so their ridge is about 12 FLOP/byte. A kernel's roof is the unit its arithmetic runs on: a
# `tl.dot` on bf16 tiles meets the high one, a loop of `a·y + x` in fp32 the low one. The cell measures both
# (torch's bf16 matmul, and its fp32 matmul, which uses the CUDA cores because torch leaves TF32 off) and the
# copy bandwidth, and draws the two roofs over one memory slope.
#
# To walk along them we use the package's on-chip reuse kernel, which loads each element once and then applies
# `y ← a·y + x` to it `reuse` times in registers: intensity `2·reuse / 8` FLOP/byte for fp32 (two FLOPs per
# round, four bytes in and four out), FP32 arithmetic on the CUDA cores. Your own kernels so far do no arithmetic
# at all: your copy kernel's measure is the memory slope itself (its fraction of the floor above). Lesson 03
# puts your tiled matmul on these same two roofs, where it belongs under the tensor cores' one.

# %% nbgrader={"grade": false, "grade_id": "roofline", "locked": true, "schema_version": 3, "solution": false}
from kernels.memory import sram_reuse_memory
from kernels.memory.sram_reuse import bytes_moved as reuse_bytes, flops as reuse_flops
from kernels.viz.roofline import draw_roofline

rates = {"bf16 tensor cores": matmul_rate(torch.bfloat16), "FP32 CUDA cores": matmul_rate(torch.float32)}
n_roof = pick(cpu=4_096, gpu=2**26)
x_roof = randn(n_roof, seed=2)
points = []
for reuse in pick(cpu=[1, 8, 64], gpu=[1, 4, 16, 64, 256, 1024]):
    ms = time_ms(lambda r=reuse: sram_reuse_memory(x_roof, reuse=r))
    intensity = reuse_flops(n_roof, reuse) / reuse_bytes(n_roof, 4)
    points.append((intensity, reuse_flops(n_roof, reuse) / (ms * 1e-3)))
vec_ms = time_ms(lambda: x_roof + x_roof)
points_add = (1 / 12, n_roof / (vec_ms * 1e-3))

fig, ax = plt.subplots(figsize=(6.5, 4))
ridges = draw_roofline(ax, bandwidth, rates, {"on-chip reuse kernel (FP32), reuse 1…": points,
                                              "vector add (torch)": [points_add]},
                       title=kernels.describe().split(" | ")[0])
plt.show()
for name, ridge in ridges.items():
    print(f"{name}: {rates[name] / 1e9:,.0f} GFLOP/s, ridge point {ridge:.1f} FLOP/byte at copy "
          f"{bandwidth / 1e9:,.1f} GB/s")
if not ON_GPU:
    print("(on the CPU both roofs are torch's matmuls on this CPU, timed once: they say nothing about a GPU)")

# %% [markdown] nbgrader={"grade": false, "grade_id": "bench_md", "locked": true, "schema_version": 3, "solution": false}
# ## The package's memory benchmark
#
# `python -m kernels.bench memory` validates each of the package's memory kernels against its float64 oracle and
# then times it: the copy, the strided gather, the L2 re-read and the on-chip reuse, each beside its HBM floor
# (bytes moved / measured copy bandwidth) and FLOP floor. The quick version runs here.

# %% nbgrader={"grade": false, "grade_id": "bench", "locked": true, "schema_version": 3, "solution": false}
import pathlib
import tempfile

from kernels.bench import run as run_bench

with tempfile.TemporaryDirectory() as tmp:
    result = run_bench("memory", quick=True, out=pathlib.Path(tmp))

# %% [markdown] nbgrader={"grade": false, "grade_id": "nogpu", "locked": true, "schema_version": 3, "solution": false}
# > **Without a GPU.** The kernels and checks behave exactly as on a GPU, so exercises 1–3 are graded in full,
# > except the speed part of exercise 1, which is reported as not graded. The *measurements* are another matter:
# > the "bandwidth" printed here is your CPU's memory copy, the kernels run in Python one program at a time, and
# > there is no warp, no sector and no L2 cliff to see. The widgets therefore show the reference curves measured
# > on the project's H200, labelled as such; run the notebook on a GPU to see your own.
#
# ## Recap
#
# - Registers and shared memory are tiny and fast, L2 is tens of MB, HBM is large and comparatively slow: an
#   H200 copies 4.26 TB/s but multiplies at ~700 TFLOP/s, so a kernel needs ~165 FLOP per HBM byte to be
#   compute-bound.
# - The HBM floor of a kernel is its bytes divided by the measured copy bandwidth; a good memory-bound kernel
#   gets within 10–20% of it.
# - A grid-stride loop decouples the number of programs from the size of the data.
# - Memory moves in 32-byte sectors per warp: neighbouring threads should read neighbouring addresses. Reading
#   with stride `s` moves `min(s, 32 / itemsize)` times the useful bytes through L2, and up to twice that from
#   HBM, which is read in 64-byte pieces (a stride-32 fp32 column read and written measured 10.5× slower than a
#   copy on the H200: 32-byte sectors predict 4.5×, 64-byte pieces 8.5×).
# - Data reused while it fits in L2 is cheap; past the L2 size every re-read pays HBM again.
# - The roofline `min(π, I·β)` says which resource bounds a kernel and how far it is from its limit.
#
# Next, lesson 02 applies all this to a real algorithm: linear attention written as a recurrence, first
# moving its state through HBM at every step, then keeping it on chip.

# %% [markdown] nbgrader={"grade": false, "grade_id": "score_md", "locked": true, "schema_version": 3, "solution": false}
# ## Your score
#
# The cell below runs every check of this lesson on your notebook as it stands, the hidden ones included (it
# reuses the outcome of each check you already ran on the same kernel), and prints your points per exercise and
# in total. Points for speed are graded on a GPU only; without one they are listed as needing a GPU. From a
# shell, `make score L=01` does the same for your saved notebook in `my-work/`.

# %% nbgrader={"grade": false, "grade_id": "score", "locked": true, "schema_version": 3, "solution": false}
from grader.score import score_here

your_score = score_here("01_memory_hierarchy", globals())
