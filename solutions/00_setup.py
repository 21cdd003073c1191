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
# # 00 · Setup: what runs where, and your first Triton kernel
#
# Every lesson in this workbook ends with a kernel that you write and that a checker grades. Before the memory
# hierarchy, tiles and linear attention, this lesson makes sure the machinery works on *your* machine and
# teaches the three ideas every later kernel is built from: **programs**, **blocks** and **masks**.
#
# **You will learn**
# - where your kernels run: on an NVIDIA GPU, or in Triton's interpreter on the CPU when there is none, and what
#   that changes;
# - Triton's programming model: a *grid* of programs, `tl.program_id`, blocks of offsets built with `tl.arange`,
#   pointer arithmetic, and masked loads and stores for the ragged tail;
# - how to launch a kernel from a Python wrapper that checks its inputs, allocates the output and picks the grid;
# - a 2-D grid and row strides, the indexing every matrix kernel in this course uses;
# - how the one-line `check(...)` cells grade your kernels, and how to read their messages;
# - how to time a kernel against the memory floor on your own hardware.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import kernels
from kernels.checks import guard_launches

guard_launches()  # in the interpreter, a load or store out of bounds stops with an error that names it
print(kernels.describe())

import torch
import triton
import triton.language as tl

from kernels.checks import check
from kernels.device import DEVICE, ON_GPU, sizes
from kernels.testing import randn

# %% [markdown] nbgrader={"grade": false, "grade_id": "where", "locked": true, "schema_version": 3, "solution": false}
# ## What runs where
#
# The line printed above is the first thing to read in every lesson. `import kernels` looks for CUDA once:
#
# | you have | kernels run | tensors live on | sizes |
# | --- | --- | --- | --- |
# | an NVIDIA GPU (e.g. an H200: 132 SMs, 141 GB of HBM3e, 4.26 TB/s measured copy bandwidth) | compiled to PTX, on the GPU | `cuda` | real: millions of elements |
# | no GPU (a laptop) | in Triton's **interpreter**, in Python, on the CPU (`TRITON_INTERPRET=1`) | `cpu` | small: about a thousand elements |
#
# The interpreter executes the very same `@triton.jit` function, one program after another, with NumPy arrays
# standing in for registers. It is exact enough to develop and grade every exercise in this course, and it lets
# you put `print` inside a kernel. It cannot tell you anything about speed: a GPU runs thousands of threads at
# once, the interpreter runs one program at a time in Python.
#
# `DEVICE` is where every tensor you pass to a kernel must live, and `sizes(topic)` hands out shapes that suit
# the mode: a few thousand elements in the interpreter, hundreds of millions on a GPU.

# %% nbgrader={"grade": false, "grade_id": "where_code", "locked": true, "schema_version": 3, "solution": false}
print("mode:", kernels.MODE, "| tensors on:", DEVICE)
print("vector sizes for this mode:", sizes("vector_add"))

# %% [markdown] nbgrader={"grade": false, "grade_id": "model", "locked": true, "schema_version": 3, "solution": false}
# ## The programming model: programs, blocks, masks
#
# A CUDA kernel is written for one *thread*; a Triton kernel is written for one **program**, which owns a whole
# *block* of data and works on it with vector operations. You launch a **grid** of programs; each asks
# `tl.program_id(axis)` which one it is and derives from that the slice of data it owns.
#
# To add two vectors of `n` elements with blocks of `BLOCK_SIZE`, the grid needs `cdiv(n, BLOCK_SIZE)`
# programs (`cdiv` is division rounded up), and program `pid` owns elements
# `pid·BLOCK_SIZE … pid·BLOCK_SIZE + BLOCK_SIZE − 1`:
#
# ```
# kernel add(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE):     # one program
#     pid  = program_id(0)                              # 0 … cdiv(n, BLOCK_SIZE) − 1
#     offs = pid * BLOCK_SIZE + [0, 1, …, BLOCK_SIZE−1]  # the offsets this program owns
#     mask = offs < n                                   # False past the end of the vectors
#     x = load(x_ptr + offs, where mask)                # masked lanes touch no memory
#     y = load(y_ptr + offs, where mask)
#     store(out_ptr + offs, x + y, where mask)
# ```
#
# Three details matter:
#
# 1. **Pointers.** A tensor argument arrives in the kernel as a pointer to its first element. `x_ptr + offs`
#    is a *block of pointers*, one per lane, and `tl.load` reads all of them at once.
# 2. **`BLOCK_SIZE` is a compile-time constant** (`tl.constexpr`): the kernel is compiled for its value, and a
#    launch with another value compiles another kernel. That is what lets `tl.arange(0, BLOCK_SIZE)` have a shape
#    the compiler knows. Being a **power of two** is a second, separate rule: `tl.arange` (and so every block
#    shape) must have a power-of-two length. A constexpr may be any value (a flag, 48, a dtype); a block size
#    must be both. `n` is an ordinary runtime integer, anything at all.
# 3. **The mask.** `n` is rarely a multiple of `BLOCK_SIZE`, so the last program's block runs past the end. Its
#    lanes with `offs >= n` must neither load nor store: without the mask the kernel reads garbage and, worse,
#    *writes* past the end of `out` into whatever lives there. Every kernel in this course masks its edges.
#    In the interpreter the setup cell's `guard_launches()` catches such an access before it happens: the
#    stray lanes are switched off and the launch stops with an `OutOfBoundsError` naming the tensor and the
#    line. On a GPU nothing stops it: the kernel dies with an illegal address or quietly overwrites other data.
#    A masked-off lane of a load holds no defined value unless the load gives one (`other=0.0`). That is fine
#    while the store uses the same mask, and wrong once such a lane feeds a sum or a dot (lesson 03). The checks
#    read those lanes as NaN, so a kernel that uses them fails with a message naming the load.

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_md", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 1 · Vector add (2 + 2 points)
#
# Write `add_kernel` so that `out[i] = x[i] + y[i]` for every `0 <= i < n_elements`. The signature is fixed,
# because the checker launches your kernel itself:
#
# ```python
# add_kernel[(triton.cdiv(n_elements, BLOCK_SIZE),)](x, y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)
# ```
#
# with contiguous 1-D tensors `x`, `y`, `out` of one dtype (fp32, and in the hidden tests fp16 and bf16), sizes
# that are not multiples of the block, and several block sizes. Add in fp32 (`x.to(tl.float32)`) and store in
# the output's dtype (`out_ptr.dtype.element_ty`). Use `tl.program_id`, `tl.arange`, `tl.load`, `tl.store`, and
# a mask.

# %% nbgrader={"grade": false, "grade_id": "add_kernel", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    ### BEGIN SOLUTION
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)  # [BLOCK_SIZE]
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (x + y).to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


# %% [markdown] nbgrader={"grade": false, "grade_id": "wrapper_md", "locked": true, "schema_version": 3, "solution": false}
# ### The wrapper: check, allocate, launch
#
# A kernel is never called directly by the code that uses it. A small Python **wrapper** does three things, in
# this order: it *checks* its inputs (a kernel given a tensor on the wrong device or of the wrong dtype does not
# raise; it computes garbage or crashes the process), it *allocates* the output, and it *launches* the kernel
# on a grid. The grid may be a function of the kernel's meta-parameters, so the block size is chosen in one
# place. Run the cell to try your kernel.

# %% nbgrader={"grade": false, "grade_id": "wrapper", "locked": true, "schema_version": 3, "solution": false}
def vector_add(x: torch.Tensor, y: torch.Tensor, BLOCK_SIZE: int = 1024) -> torch.Tensor:
    if x.device.type != DEVICE.type or y.device.type != DEVICE.type:
        raise ValueError(f"x and y must be on {DEVICE}; got {x.device} and {y.device}")
    if x.shape != y.shape or x.dtype != y.dtype or not (x.is_contiguous() and y.is_contiguous()):
        raise ValueError("x and y must be contiguous, with one shape and one dtype")
    out = torch.empty_like(x)
    n = x.numel()

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK_SIZE"]),)

    add_kernel[grid](x, y, out, n, BLOCK_SIZE=BLOCK_SIZE)
    return out


x, y = randn(1000, seed=0), randn(1000, seed=1)
try:
    out = vector_add(x, y, BLOCK_SIZE=256)
except Exception as e:  # the stub raises until exercise 1 is done; any other error is your kernel's, shown in full
    if "NotImplementedError" not in f"{type(e).__name__}: {e}":
        raise
    print("add_kernel is not written yet: write it in the cell above, then run this cell again")
else:
    print(f"{triton.cdiv(1000, 256)} programs; largest |difference| from torch: "
          f"{(out - (x + y)).abs().max().item():.2e}")

# %% nbgrader={"grade": true, "grade_id": "check_add", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("00_setup.vector_add", add_kernel)

# %% nbgrader={"grade": true, "grade_id": "check_add_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests (other dtypes, odd sizes, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("00_setup.vector_add", add_kernel, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "grid_md", "locked": true, "schema_version": 3, "solution": false}
# ## See your grid
#
# The explorer below traces a launch of **your** `add_kernel` in the interpreter (or, before you have written
# it, a demo kernel of the same shape) and shows which elements each program stores, which lanes the mask
# switches off, and how many bytes each program moves. Drag `n` to a multiple of `BLOCK` and back: the grey
# masked lanes of the last program come and go, and the number of programs jumps by one exactly when `n`
# crosses a multiple of `BLOCK`.

# %% nbgrader={"grade": false, "grade_id": "grid_widget", "locked": true, "schema_version": 3, "solution": false} tags=["widget"]
from kernels.viz import grid_explorer


def launch_mine(n, BLOCK):
    x, y = randn(n, seed=0, device="cpu"), randn(n, seed=1, device="cpu")
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK_SIZE=BLOCK)
    return out


try:
    view = grid_explorer(launch_mine)
except Exception as e:  # add_kernel not written yet (NameError) or still the stub (NotImplementedError)
    print(f"showing the demo kernel, not yours ({type(e).__name__})")
    view = grid_explorer()
view

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_md", "locked": true, "schema_version": 3, "solution": false}
# ## A 2-D grid and row strides
#
# A grid can have up to three axes. Matrix kernels use two: `tl.program_id(0)` picks a row (or a block of rows)
# and `tl.program_id(1)` a block of columns. The element `(m, n)` of a row-major matrix lives at
# `base + m·stride_m + n·stride_n`; for a contiguous `[M, N]` matrix `stride_m = N` and `stride_n = 1`, but a
# slice such as `big[:, :N]` of a wider matrix keeps the wide row stride, so a kernel must take the stride as an
# argument instead of assuming `N`. Getting this wrong is the most common bug in matrix kernels, and the checks
# of every later lesson pass such views.
#
# ## Exercise 2 · Add a bias to every row (2 + 2 points)
#
# Write `add_bias_kernel` so that `out[m, n] = x[m, n] + bias[n]`. The checker launches it on a 2-D grid with
# one program per (row, block of columns):
#
# ```python
# add_bias_kernel[(M, triton.cdiv(N, BLOCK_N))](x, bias, out, M, N, x.stride(0), out.stride(0), BLOCK_N=BLOCK_N)
# ```
#
# `x` and `out` are `[M, N]` with unit column stride but row strides that may be larger than `N`; `bias` is a
# contiguous `[N]`. Sizes are not multiples of the block; dtypes as in exercise 1 (add in fp32).

# %% nbgrader={"grade": false, "grade_id": "add_bias_kernel", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def add_bias_kernel(x_ptr, bias_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_N: tl.constexpr):
    ### BEGIN SOLUTION
    row = tl.program_id(axis=0)
    offs_n = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N]
    mask = offs_n < N
    x = tl.load(x_ptr + row * stride_xm + offs_n, mask=mask)
    b = tl.load(bias_ptr + offs_n, mask=mask)
    out = x.to(tl.float32) + b.to(tl.float32)
    tl.store(out_ptr + row * stride_om + offs_n, out.to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_add_bias", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("00_setup.add_bias", add_bias_kernel)

# %% nbgrader={"grade": true, "grade_id": "check_add_bias_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests (other dtypes, odd sizes, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("00_setup.add_bias", add_bias_kernel, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "checks_md", "locked": true, "schema_version": 3, "solution": false}
# ## How checks and grading work
#
# A check cell is one line: `check("<lesson>.<exercise>", your_kernel)`. It grades the **kernel**, not the
# notebook, and it owns everything around it:
#
# - **Inputs**: fresh random tensors on every run, several seeds, and sizes chosen so the tail mask matters
#   (e.g. 1000 elements with blocks of 128); matrices are passed as strided views.
# - **Outputs**: allocated full of NaN inside larger NaN "guard bands". An element your kernel never writes is
#   still NaN afterwards ("output not written"); a store past the end lands in a guard band ("wrote out of
#   bounds").
# - **Reference and tolerance**: the result is compared with a float64 reference by relative error
#   `‖out − ref‖ / ‖ref‖`, against a tolerance set by the dtype (1e-5 for fp32, 5e-3 for fp16, 3e-2 for bf16).
# - **Your own work**: the result must come from your `@triton.jit` kernel. Calling a torch operation, or one of
#   the `kernels` package's kernels, does not pass.
# - **Visible and hidden tests**: the visible check runs here and now. The cell after it holds only a comment in
#   your copy; when your notebook is graded, the hidden checks are put back into it and run other dtypes, odd
#   shapes and fresh seeds. The exercise heading shows both cells' points: "2 + 2" is two for the visible
#   check and two for the hidden one. Locked cells (checks, setup, widgets) are restored before grading, so
#   editing them changes nothing.
#
# On failure a check raises an error naming the case (shape, dtype, block size) and what went wrong (elements
# never written, out-of-bounds writes, the largest error and where). The cell below feeds the checker a kernel
# with a classic bug, forgetting `program_id`, so that every program writes the first block. Read the message.

# %% nbgrader={"grade": false, "grade_id": "broken_demo", "locked": true, "schema_version": 3, "solution": false}
@triton.jit
def forgot_pid_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


try:
    check("00_setup.vector_add", forgot_pid_kernel)
except AssertionError as e:
    print("the check failed, as it should:\n", e)

# %% [markdown] nbgrader={"grade": false, "grade_id": "bench_md", "locked": true, "schema_version": 3, "solution": false}
# ## Benchmark on your hardware
#
# Vector add does one addition per 12 bytes moved (two fp32 reads and one fp32 write), so its speed is set by
# memory, not arithmetic. Its **HBM floor** is the bytes it must move divided by the bandwidth this machine
# actually reaches on a plain copy. On an H200, adding two vectors of 2^26 fp32 elements moves 805 MB, and at
# 4.26 TB/s that takes 0.19 ms; the additions alone would take microseconds. The cell measures the copy
# bandwidth here, then times your kernel, torch's `x + y` and the package's kernel, and reports each as a
# fraction of the floor (1.0 is as fast as memory allows).

# %% nbgrader={"grade": false, "grade_id": "bench", "locked": true, "schema_version": 3, "solution": false}
from kernels.bench import copy_bandwidth, time_ms
from kernels.vector_add import naive_vector_add

n = sizes("vector_add")["n"]
x, y = randn(n, seed=0), randn(n, seed=1)
bandwidth = copy_bandwidth()
floor_ms = 3 * n * x.element_size() / bandwidth * 1e3
print(f"n = {n:,} fp32 elements; copy bandwidth here {bandwidth / 1e9:,.1f} GB/s; HBM floor {floor_ms:.4f} ms")
print(f"{'version':>12} {'ms':>10} {'GB/s':>9} {'floor / time':>13}")
for name, fn in [("yours", lambda: vector_add(x, y)), ("torch x + y", lambda: x + y),
                 ("package", lambda: naive_vector_add(x, y))]:
    try:
        ms = time_ms(fn)
    except Exception as e:  # your kernel is still the stub
        print(f"{name:>12}  not run ({type(e).__name__})")
        continue
    fraction = f"{floor_ms / ms:13.2f}" if ON_GPU else f"{'(GPU only)':>13}"
    print(f"{name:>12} {ms:10.4f} {3 * n * x.element_size() / ms / 1e6:9.1f} {fraction}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "nogpu", "locked": true, "schema_version": 3, "solution": false}
# > **Without a GPU.** Everything above ran in Triton's interpreter on small sizes, and every check grades your
# > kernel exactly as it would on a GPU: the same inputs, masks and tolerances. Two things differ. The timings
# > measure Python executing one program after another, so your kernel is thousands of times slower than
# > torch's `x + y` here, and a fraction of the floor would mean nothing, so the table leaves it out; on a GPU
# > your kernel and torch's land within a few percent of each other, near the floor. And the interpreter is forgiving where hardware is not:
# > an unmasked out-of-bounds access may go unnoticed in NumPy memory, which is why the checks poison and guard
# > every output rather than trusting the absence of a crash.
#
# ## Recap
#
# - `import kernels` decides once: GPU if CUDA is present, otherwise the interpreter on CPU tensors and small
#   sizes. The first line of every lesson tells you which.
# - A Triton kernel is written for one **program**; the **grid** says how many run; `tl.program_id` says which
#   one you are; `tl.arange` builds the block of offsets it owns.
# - **Masks** guard every load and store at the edges; `BLOCK_SIZE` is a power-of-two `tl.constexpr`, sizes are
#   runtime values.
# - Matrices are addressed through **strides**, never through assumed widths.
# - A wrapper checks, allocates and launches; a check grades the kernel on fresh, poisoned, odd-sized cases.
# - Vector add is bound by memory: its floor is bytes moved divided by the copy bandwidth.
#
# Next, lesson 01 measures that bandwidth properly, at every level of the memory hierarchy.

# %% [markdown] nbgrader={"grade": false, "grade_id": "score_md", "locked": true, "schema_version": 3, "solution": false}
# ## Your score
#
# The cell below runs every check of this lesson on your notebook as it stands, the hidden ones included (it
# reuses the outcome of each check you already ran on the same kernel), and prints your points per exercise and
# in total. Points for speed are graded on a GPU only; without one they are listed as needing a GPU. From a
# shell, `make score L=00` does the same for your saved notebook in `my-work/`.

# %% nbgrader={"grade": false, "grade_id": "score", "locked": true, "schema_version": 3, "solution": false}
from grader.score import score_here

your_score = score_here("00_setup", globals())
