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
# # 02 · Naive HBM-bound loops: linear attention as a recurrence
#
# Lesson 01 measured the memory system. This lesson meets its first real algorithm, causal **linear attention**,
# in its simplest form: a loop over time that updates a small matrix, the *state*, at every step. Written the
# obvious way, the state makes a round trip through memory at every step and the kernel is hundreds of times
# slower than the bytes it truly needs. Written with the state kept on chip, the round trips disappear.
#
# **You will learn**
# - how dropping the softmax turns attention into a recurrence `S_t = S_{t−1} + k_t v_tᵀ`, `o_t = scale · q_tᵀ S_t`;
# - how to write that recurrence as a Triton kernel with one program per (batch, head), and what it costs when
#   the state lives in global memory;
# - how to count a kernel's bytes per memory level and turn them into a time floor;
# - how to keep the state in registers across all steps, and split the work over more programs;
# - how to measure both on your hardware and read the gap to the floor.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import kernels
from kernels.checks import guard_launches

guard_launches()  # in the interpreter, a load or store out of bounds stops with an error that names it
print(kernels.describe())

import torch
import triton
import triton.language as tl

from kernels.bench import copy_bandwidth, time_ms
from kernels.checks import check
from kernels.device import DEVICE, ON_GPU, sizes
from kernels.testing import randn

# %% [markdown] nbgrader={"grade": false, "grade_id": "math_md", "locked": true, "schema_version": 3, "solution": false}
# ## From attention to a recurrence
#
# Causal softmax attention computes, for every position `t`, `o_t = Σ_{s≤t} softmax_s(q_t·k_s) v_s`: every query
# meets every earlier key, so the work grows as `T²`. At T = 65,536 tokens that is 4 billion query–key pairs
# per head. Linear attention drops the softmax (or replaces it by a feature map applied to `q` and `k`
# separately). Then the sum factors:
#
# ```
# o_t = scale · Σ_{s≤t} (q_t · k_s) v_s = scale · q_tᵀ ( Σ_{s≤t} k_s v_sᵀ ) = scale · q_tᵀ S_t
# ```
#
# `S_t` is a `K × V` matrix, the **state**, and it obeys a recurrence:
#
# ```
# S_0 = 0,    S_t = S_{t−1} + k_t v_tᵀ,    o_t = scale · q_tᵀ S_t          (scale = K^−½)
# ```
#
# The work is now `O(T · K · V)`, linear in `T`. Tensors use the layout of the flash-linear-attention library:
# `q, k` are `[B, T, H, K]`, `v` and `o` are `[B, T, H, V]` (batch, time, head, feature), and every (batch,
# head) pair is an independent recurrence.
#
# **What "dropping the softmax" leaves out.** The softmax does two things: it makes every weight positive, and
# it divides by their sum, so `o_t` is a weighted *average* of the values. Linear attention as first proposed
# (Katharopoulos et al., 2020) keeps both, with a feature map `φ` in place of `exp(q·k)`:
#
# ```
# o_t = φ(q_t)ᵀ S_t / (φ(q_t) · z_t),    S_t = S_{t−1} + φ(k_t) v_tᵀ,    z_t = z_{t−1} + φ(k_t)
# ```
#
# The normaliser is a second state, a `K`-vector `z_t`, carried beside `S_t` and updated the same way. It needs
# **positive features** (`φ(x) = elu(x) + 1`, or `exp`): with raw `q` and `k` the similarities have both signs,
# the denominator can pass through zero, and the output blows up. This course writes the unnormalised form, the
# one the kernels' cost is about; the package's `chunk_linear_attn(..., normalize=True)` carries `z` in the same
# loop at the cost of one more `K`-vector. Models that work in practice also **forget**: RetNet multiplies the
# state by a fixed decay `γ < 1` per step, `S_t = γ S_{t−1} + k_t v_tᵀ`; GLA uses a data-dependent gate per key
# feature, `S_t = diag(α_t) S_{t−1} + k_t v_tᵀ`; Mamba-2 a data-dependent scalar per step and head. For the
# kernel that is one multiply of the state per step, and one more input to load (the gates); the state stays the
# same size, so everything this lesson says about where it lives holds unchanged.
#
# ## The bytes it needs, and the bytes a naive loop moves
#
# The inputs and outputs must cross HBM once: `(2K + 2V) · itemsize` bytes per step and head. At the workbook's
# GPU size (B = 4, H = 16, T = 2048, K = V = 64, bf16) that is 64 MiB, which the H200 moves in **16 µs** at its
# measured 4.26 TB/s.
#
# The state is `K · V · 4 = 16 KiB` per head in fp32. A loop that keeps it in global memory reads and writes it
# at every step: 32 KiB per step and head, 4 GiB in all, **sixty-four times** the bytes of the inputs and
# outputs. And each step's load depends on the previous step's store, so the loop also waits for memory
# latency 2048 times in a row. That is the naive kernel, and you will write it first, because it is the shape
# of the algorithm.

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_md", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 1 · The naive kernel: the state through global memory at every step (3 + 2 points)
#
# One program per (batch, head) pair. It owns the whole `K × V` state as one `[BK, BV]` tile (`BK`, `BV` are
# `K`, `V` rounded up to powers of two, so mask the edges) in a global **state buffer** `s_ptr`, a contiguous
# fp32 `[B·H, K, V]` array:
#
# ```
# kernel naive(q, k, v, o, s, scale, T, H, K, V, strides…, BK, BV):
#     bh = program_id(0);  b, h = bh // H, bh % H
#     store zeros to s[bh]                                     # S_0 = 0
#     for t in 0 … T−1:
#         q_t = load q[b, t, h, :] · scale;  k_t = load k[b, t, h, :];  v_t = load v[b, t, h, :]
#         S   = load s[bh] + k_t[:, None] · v_t[None, :]      # [BK, BV]
#         store S to s[bh]                                     # the round trip
#         o[b, t, h, :] = Σ_k q_t[:, None] · S                 # [BV]
# ```
#
# Element `(b, t, h, i)` of `q` and `k` lives at `b·stride_qb + t·stride_qt + h·stride_qh + i`, and of `v` and
# `o` at `b·stride_vb + t·stride_vt + h·stride_vh + i` (`q` and `k` share strides, so do `v` and `o`). Compute
# in fp32 and store `o` in its own dtype. The checker launches
#
# ```python
# naive_kernel[(B * H,)](q, k, v, o, s, scale, T, H, K, V,
#                        q.stride(0), q.stride(1), q.stride(2), v.stride(0), v.stride(1), v.stride(2),
#                        BK=triton.next_power_of_2(K), BV=triton.next_power_of_2(V))
# ```
#
# and compares `o` **and the state buffer** (which must hold `S_T` at the end) with a float64 reference.
# Sizes such as T = 37, K = 24 or V = 48 are not powers of two; q and k may be views into a wider buffer.

# %% nbgrader={"grade": false, "grade_id": "naive_kernel", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def naive_kernel(q_ptr, k_ptr, v_ptr, o_ptr, s_ptr, scale, T, H, K, V,
                 stride_qb, stride_qt, stride_qh, stride_vb, stride_vt, stride_vh,
                 BK: tl.constexpr, BV: tl.constexpr):
    ### BEGIN SOLUTION
    bh = tl.program_id(axis=0)
    b, h = bh // H, bh % H
    offs_k = tl.arange(0, BK)  # [BK]
    offs_v = tl.arange(0, BV)  # [BV]
    mask_k, mask_v = offs_k < K, offs_v < V
    mask_s = mask_k[:, None] & mask_v[None, :]
    s_ptrs = s_ptr + bh.to(tl.int64) * K * V + offs_k[:, None] * V + offs_v[None, :]  # [BK, BV]
    tl.store(s_ptrs, tl.zeros([BK, BV], dtype=tl.float32), mask=mask_s)
    qk_base = b * stride_qb + h * stride_qh
    vo_base = b * stride_vb + h * stride_vh
    for t in range(T):
        q = tl.load(q_ptr + qk_base + t * stride_qt + offs_k, mask=mask_k, other=0.0).to(tl.float32) * scale
        k = tl.load(k_ptr + qk_base + t * stride_qt + offs_k, mask=mask_k, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + vo_base + t * stride_vt + offs_v, mask=mask_v, other=0.0).to(tl.float32)
        s = tl.load(s_ptrs, mask=mask_s, other=0.0) + k[:, None] * v[None, :]  # [BK, BV]
        tl.store(s_ptrs, s, mask=mask_s)
        o = tl.sum(q[:, None] * s, axis=0)  # [BV]
        tl.store(o_ptr + vo_base + t * stride_vt + offs_v, o.to(o_ptr.dtype.element_ty), mask=mask_v)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_naive", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("02_naive_hbm_loops.naive", naive_kernel)

# %% nbgrader={"grade": true, "grade_id": "check_naive_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests (fp16 and bf16, odd K and V, strided q and k, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("02_naive_hbm_loops.naive", naive_kernel, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "stepper_md", "locked": true, "schema_version": 3, "solution": false}
# ## Step through the recurrence
#
# The widget replays the recurrence on a small problem, steps `t = 1 … T` from `S_0 = 0`: the row of `k` and `v`
# consumed at step `t`, the state `S_t` they build, and the bytes asked of global memory so far by the two
# strategies, split into the inputs and outputs (which cross HBM) and the state. The stars are the bytes traced
# from **your** naive kernel (program 0), zeroing store included, so you can see that it really does move the state
# every step. Drag `t`: the naive bars grow by a whole state per step, the on-chip bars only by one row of `q`, `k`,
# `v` and `o`. Where does the naive kernel's state traffic go? Its buffer is 16 KiB per head, 1 MiB for the whole
# GPU-sized problem: it stays in L2, and the hatched part of the bars never reaches HBM (the benchmark below shows
# what that costs instead). The caption turns the full GPU-sized problem into bytes, the same total as
# `naive_bytes` in exercise 3, and its HBM part into a time floor at the measured bandwidth.

# %% nbgrader={"grade": false, "grade_id": "stepper", "locked": true, "schema_version": 3, "solution": false} tags=["widget"]
from kernels.viz import recurrence_stepper


def launch_naive(T, K, V):
    q, k = randn(1, T, 1, K, seed=0, device="cpu"), randn(1, T, 1, K, seed=1, device="cpu")
    v = randn(1, T, 1, V, seed=2, device="cpu")
    o, s = torch.empty_like(v), torch.empty(1, K, V)
    naive_kernel[(1,)](q, k, v, o, s, K**-0.5, T, 1, K, V, *q.stride()[:3], *v.stride()[:3],
                       BK=triton.next_power_of_2(K), BV=triton.next_power_of_2(V))
    return o


measured_bw = copy_bandwidth() if ON_GPU else None
try:
    stepper = recurrence_stepper(launch_naive, T=24, K=8, V=8, bandwidth=measured_bw)
except Exception as e:  # naive_kernel not written yet: the model alone, without the traced stars
    print(f"showing the byte model only, not your kernel ({type(e).__name__})")
    stepper = recurrence_stepper(T=24, K=8, V=8, bandwidth=measured_bw)
stepper

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_md", "locked": true, "schema_version": 3, "solution": false}
# ## Keep the state on chip
#
# Nothing forces the state out of the program between steps: it is one `[BK, BV]` tile, and a loop-carried
# variable in a Triton kernel lives in **registers**. Initialise it with `tl.zeros`, update it in the loop,
# and write it to memory once, at the end (the caller may want the final state to continue the sequence later).
# The state traffic drops from `2 · K · V · 4` bytes per step to zero.
#
# A second problem of the naive kernel is parallelism: B·H = 64 programs on a GPU with 132 SMs leaves half the
# machine idle. The columns of the state are independent (column `j` of `S` only ever meets column `j` of `v`),
# so split `V` into blocks of `BV` and give each block its own program. Each program then re-reads `q` and
# `k` (cheap: `K` values per step), and the grid grows to `cdiv(V, BV) · B · H` programs.
#
# ```
# kernel fused(q, k, v, o, s, scale, T, H, K, V, strides…, BK, BV):
#     j = program_id(0);  bh = program_id(1)                 # V block j of head bh
#     S = zeros([BK, BV])                                    # registers
#     for t in 0 … T−1:
#         S += k_t[:, None] · v_t[j·BV : (j+1)·BV][None, :]
#         o[b, t, h, j·BV : (j+1)·BV] = Σ_k q_t[:, None] · S
#     store S to s[bh][:, j·BV : (j+1)·BV]                   # once
# ```
#
# ## Exercise 2 · The fused kernel: the state in registers (3 + 2 points, and 2 for speed on a GPU)
#
# Same arguments as `naive_kernel`; the checker launches
#
# ```python
# fused_kernel[(triton.cdiv(V, BV), B * H)](q, k, v, o, s, scale, T, H, K, V,
#                                          q.stride(0), q.stride(1), q.stride(2), v.stride(0), v.stride(1),
#                                          v.stride(2), BK=triton.next_power_of_2(K), BV=BV)
# ```
#
# with `BV` of 16 or 32, often smaller than `V`, and checks `o` and the final state in `s`. On a GPU the check
# also times it at B = 4, H = 16, T = 2048, K = V = 64 (bf16) and asks for at least 2× the speed of the
# package's naive kernel.

# %% nbgrader={"grade": false, "grade_id": "fused_kernel", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def fused_kernel(q_ptr, k_ptr, v_ptr, o_ptr, s_ptr, scale, T, H, K, V,
                 stride_qb, stride_qt, stride_qh, stride_vb, stride_vt, stride_vh,
                 BK: tl.constexpr, BV: tl.constexpr):
    ### BEGIN SOLUTION
    j, bh = tl.program_id(axis=0), tl.program_id(axis=1)
    b, h = bh // H, bh % H
    offs_k = tl.arange(0, BK)  # [BK]
    offs_v = j * BV + tl.arange(0, BV)  # [BV]
    mask_k, mask_v = offs_k < K, offs_v < V
    q_ptrs = q_ptr + b * stride_qb + h * stride_qh + offs_k
    k_ptrs = k_ptr + b * stride_qb + h * stride_qh + offs_k
    v_ptrs = v_ptr + b * stride_vb + h * stride_vh + offs_v
    o_ptrs = o_ptr + b * stride_vb + h * stride_vh + offs_v
    s = tl.zeros([BK, BV], dtype=tl.float32)
    for _ in range(T):
        q = tl.load(q_ptrs, mask=mask_k, other=0.0).to(tl.float32) * scale  # [BK]
        k = tl.load(k_ptrs, mask=mask_k, other=0.0).to(tl.float32)  # [BK]
        v = tl.load(v_ptrs, mask=mask_v, other=0.0).to(tl.float32)  # [BV]
        s += k[:, None] * v[None, :]
        tl.store(o_ptrs, tl.sum(q[:, None] * s, axis=0).to(o_ptr.dtype.element_ty), mask=mask_v)
        q_ptrs += stride_qt
        k_ptrs += stride_qt
        v_ptrs += stride_vt
        o_ptrs += stride_vt
    s_ptrs = s_ptr + bh.to(tl.int64) * K * V + offs_k[:, None] * V + offs_v[None, :]  # [BK, BV]
    tl.store(s_ptrs, s, mask=mask_k[:, None] & mask_v[None, :])
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_fused", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("02_naive_hbm_loops.fused", fused_kernel)

# %% nbgrader={"grade": true, "grade_id": "check_fused_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests (fp16 and bf16, odd K and V, strided q and k, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("02_naive_hbm_loops.fused", fused_kernel, hidden=True)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_fused_speed", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("02_naive_hbm_loops.fused_speed", fused_kernel)

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_md", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 3 · Count the bytes (1 + 1 points)
#
# A time floor is only as good as the byte count behind it. Write two functions that return the bytes **your**
# two kernels ask of global memory, for inputs of `itemsize` bytes per element and an fp32 state:
#
# - `naive_bytes(B, T, H, K, V, itemsize)`: `q`, `k`, `v` read once and `o` written once, the zeroed state
#   written once, then the state read and written at every step;
# - `fused_bytes(B, T, H, K, V, itemsize, BV)`: `q` and `k` read once *per V block* (there are `cdiv(V, BV)`),
#   `v` read and `o` written once, and the final state written once.
#
# Count the `K` and `V` that are asked for (masked-off lanes move nothing). Pure Python, no `kernels` package.
# For the GPU size, `naive_bytes(4, 2048, 16, 64, 64, 2)` is a little over 4.3 GB, about 64 times the 68 MB of
# `fused_bytes(4, 2048, 16, 64, 64, 2, 64)`.

# %% nbgrader={"grade": false, "grade_id": "byte_counts", "locked": false, "schema_version": 3, "solution": true}
def naive_bytes(B: int, T: int, H: int, K: int, V: int, itemsize: int) -> int:
    ### BEGIN SOLUTION
    io = B * T * H * (2 * K + 2 * V) * itemsize
    state = B * H * K * V * 4
    return io + state + T * 2 * state
    ### END SOLUTION


def fused_bytes(B: int, T: int, H: int, K: int, V: int, itemsize: int, BV: int) -> int:
    ### BEGIN SOLUTION
    blocks = -(-V // BV)
    return B * T * H * (2 * K * blocks + 2 * V) * itemsize + B * H * K * V * 4
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "check_bytes", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("02_naive_hbm_loops.bytes", naive_bytes, fused_bytes)

# %% nbgrader={"grade": true, "grade_id": "check_bytes_hidden", "locked": true, "points": 1, "schema_version": 3, "solution": false}
# Hidden tests (more shapes and block sizes) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("02_naive_hbm_loops.bytes", naive_bytes, fused_bytes, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "bench_md", "locked": true, "schema_version": 3, "solution": false}
# ## Benchmark on your hardware
#
# The cell times your two kernels (and, on a GPU, the package's two) on the lesson's size (`sizes("recurrent")`:
# the GPU size above on a GPU, a tiny one in the interpreter), and prints each beside the **HBM floor**: the bytes the
# algorithm needs (inputs and outputs once, the fused count with one V block) divided by the copy bandwidth
# measured here.
#
# On the project's H200 (its copy measured 4.28 TB/s in that run, 4.26 in most) the floor of this problem is 0.016 ms.
# The package's naive kernel took 3.59 ms, 225× the floor; its fused kernel (`BV = 32`) 1.44 ms, 2.5× faster and still
# 91× the floor. At K = V = 128 the gap widens (10.7 ms against 2.7 ms: 3.9×), because the state round trip grows as
# K·V. Two lessons hide in those numbers. First, the naive kernel's 4 GiB of state traffic never reaches HBM: the
# state buffer is 1 MiB and lives in L2, so what the naive kernel pays is the *latency* of 2048 dependent L2 round
# trips, not bandwidth. Second, the fused kernel is far from the floor too: each program still walks its 2048 steps
# one after another, and one step's 8 thousand FLOPs per program cannot hide the latency of the next step's loads. A
# smarter loop can hide part of it: the loads of `q`, `k`, `v` for step `t + 1` do not depend on the state, so they
# can be issued *before* step `t`'s arithmetic, and their latency overlaps it. The package's `prefetch_recurrent`
# (`kernels/recurrent/prefetch.py`) is the fused kernel pipelined that way by hand; on a GPU the ladder below times it
# beside the others, and the project's H200 measurement is in `results/gpu/learner.json`. What no loop can remove is
# the chain itself: each step's state depends on the last, so the kernel still takes 2048 dependent steps. Processing
# whole chunks of time at once with matrix multiplies, so that the sequential chain is T / 64 steps long instead of T,
# is the chunked algorithm of lesson 04.

# %% nbgrader={"grade": false, "grade_id": "bench", "locked": true, "schema_version": 3, "solution": false}
from kernels.recurrent import fused_recurrent, naive_recurrent, prefetch_recurrent, reference_recurrent
from kernels.testing import rel_error

shape = sizes("recurrent")
B, H, T, K, V = (shape[d] for d in "BHTKV")
dtype = torch.bfloat16 if ON_GPU else torch.float32
q, k, v = (randn(B, T, H, d, dtype=dtype, seed=i) for i, d in enumerate((K, K, V)))
o, s = torch.empty_like(v), torch.empty(B * H, K, V, device=DEVICE)
BK, BV = triton.next_power_of_2(K), 32
strides = (q.stride(0), q.stride(1), q.stride(2), v.stride(0), v.stride(1), v.stride(2))


def yours_naive():
    naive_kernel[(B * H,)](q, k, v, o, s, K**-0.5, T, H, K, V, *strides, BK=BK, BV=triton.next_power_of_2(V))
    return o


def yours_fused():
    fused_kernel[(triton.cdiv(V, BV), B * H)](q, k, v, o, s, K**-0.5, T, H, K, V, *strides, BK=BK, BV=BV)
    return o


ref = reference_recurrent(q, k, v)[0]
bandwidth = copy_bandwidth()
floor_ms = (B * T * H * (2 * K + 2 * V) * dtype.itemsize + B * H * K * V * 4) / bandwidth * 1e3
print(f"B={B} H={H} T={T} K={K} V={V} {dtype}; HBM floor {floor_ms:.4f} ms at {bandwidth / 1e9:,.0f} GB/s")
print(f"{'version':>14} {'ms':>10} {'x floor':>10} {'rel. error':>11}")
versions = [("your naive", yours_naive), ("your fused", yours_fused)]
if ON_GPU:  # in the interpreter each run takes seconds: time the package's kernels on a GPU only
    versions += [("package naive", lambda: naive_recurrent(q, k, v)[0]),
                 ("package fused", lambda: fused_recurrent(q, k, v)[0]),
                 ("pkg prefetch", lambda: prefetch_recurrent(q, k, v)[0])]
for name, fn in versions:
    try:
        err = rel_error(fn(), ref)
        ms = time_ms(fn)
    except Exception as e:  # a stub raises until its exercise is done
        print(f"{name:>14}  not run ({type(e).__name__})")
        continue
    times_floor = f"{ms / floor_ms:10.1f}" if ON_GPU else f"{'(GPU only)':>10}"
    print(f"{name:>14} {ms:10.4f} {times_floor} {err:11.2e}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "ladder_md", "locked": true, "schema_version": 3, "solution": false}
# The package's own ladder benchmark validates every version against the float64 oracle before timing it, over
# several shapes (`python -m kernels.bench recurrent`). On a GPU its quick version runs here; in the interpreter
# it would take minutes and say nothing about speed, so the cell only says how to run it.

# %% nbgrader={"grade": false, "grade_id": "ladder", "locked": true, "schema_version": 3, "solution": false}
import pathlib
import tempfile

from kernels.bench import run as run_bench

if ON_GPU:
    with tempfile.TemporaryDirectory() as tmp:
        result = run_bench("recurrent", quick=True, out=pathlib.Path(tmp))
else:
    print("on a GPU: python -m kernels.bench recurrent   (validates, then times every version beside the floor)")

# %% [markdown] nbgrader={"grade": false, "grade_id": "nogpu", "locked": true, "schema_version": 3, "solution": false}
# > **Without a GPU.** Both kernels run in the interpreter on a tiny problem (T = 37, K = V = 16) and are graded
# > in full for correctness; the speed part of exercise 2 is reported as not graded. The interpreter executes
# > each program's loop in Python, so here the naive kernel is only modestly slower than the fused one: its
# > extra cost is NumPy copying a small state, not HBM latency. The widget's byte counts and the floor in its
# > caption do not depend on the machine; its bandwidth is the H200 reference, labelled as such.
#
# ## Recap
#
# - Without the softmax, causal attention is a recurrence on a `K × V` state: linear in `T` instead of
#   quadratic.
# - A loop that keeps that state in global memory moves `2 · K · V · 4` bytes per step and head, about 64× the
#   bytes of the inputs and outputs at K = V = 64, and waits on a dependent memory round trip at every step.
# - Counting bytes per level gives the floor: the inputs and outputs once, at the measured copy bandwidth.
# - A loop-carried tile lives in registers: keeping the state there removes the state traffic, and splitting
#   `V` over programs fills the GPU.
# - What remains is the sequential chain of `T` steps. Lesson 03 builds the tools to break it (tiles and
#   `tl.dot`); lesson 04 uses them to process whole chunks of time at once.

# %% [markdown] nbgrader={"grade": false, "grade_id": "score_md", "locked": true, "schema_version": 3, "solution": false}
# ## Your score
#
# The cell below runs every check of this lesson on your notebook as it stands, the hidden ones included (it
# reuses the outcome of each check you already ran on the same kernel), and prints your points per exercise and
# in total. Points for speed are graded on a GPU only; without one they are listed as needing a GPU. From a
# shell, `make score L=02` does the same for your saved notebook in `my-work/`.

# %% nbgrader={"grade": false, "grade_id": "score", "locked": true, "schema_version": 3, "solution": false}
from grader.score import score_here

your_score = score_here("02_naive_hbm_loops", globals())
