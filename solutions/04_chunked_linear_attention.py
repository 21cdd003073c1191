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
# # 04 · Chunked linear attention in Triton
#
# In lesson 02 you wrote causal linear attention as a recurrence and kept its state on-chip. That kernel moves
# the fewest possible bytes, but it takes `T` small steps one after another, each a rank-one update that the
# tensor cores cannot help with. This lesson reorganises the same arithmetic into **chunks**: inside a chunk the
# work is two small matrix multiplies (lesson 03's tiles, now along the sequence), and between chunks a single
# state matrix carries everything earlier. It is the algorithm behind fla's `chunk_linear_attn` and the package's
# drop-in replacement for it.
#
# **You will learn**
# - the chunked form of causal linear attention, and why it computes exactly what the recurrence computes;
# - how the work splits into an *intra-chunk* part (a causal, masked `Q Kᵀ` times `V`, parallel over chunks)
#   and an *inter-chunk* part (the state `S`, carried from chunk to chunk);
# - to write it three ways: in torch, as a Triton kernel for the intra-chunk part alone, and as one fused Triton
#   kernel that keeps the state in registers for the whole sequence;
# - how your kernel compares with eager torch, `torch.compile`, the naive recurrent kernel, the package's kernel
#   and fla on your own hardware, against the HBM floor.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import kernels
from kernels.checks import guard_launches

guard_launches()  # in the interpreter, a load or store out of bounds stops with an error that names it
print(kernels.describe())

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import pathlib

import torch
import triton
import triton.language as tl

from kernels.checks import check, describe_error
from kernels.device import DEVICE, ON_GPU, pick, sizes
from kernels.linear_attention.reference import recurrent_linear_attention
from kernels.testing import assert_close, poisoned, randn, tolerance

ROOT = pathlib.Path(kernels.__file__).resolve().parent.parent

# %% [markdown] nbgrader={"grade": false, "grade_id": "motivation", "locked": true, "schema_version": 3, "solution": false}
# ## The numbers
#
# Measured on an H200 (B = 4 sequences, H = 16 heads, head size D = 128, bf16, causal, unnormalised; median ms;
# the project's record `results/gpu/linear_attention-gpu.json`, torch 2.11, Triton 3.6):
#
# | T | HBM floor | torch eager (chunked) | torch.compile | fla-core 0.6.0 `chunk` | fla `fused_chunk` |
# | --- | --- | --- | --- | --- | --- |
# | 4,096 | 0.063 | 2.67 | 3.21 | 0.28 | 0.33 |
# | 16,384 | 0.251 | 10.4 | 12.6 | 0.74 | 1.26 |
# | 65,536 | 1.01 | 41.1 | 50.1 | 3.07 | 6.66 |
#
# The floor is four tensors (Q, K, V read, O written) of `B·T·H·D` bf16 elements at the measured 4.26 TB/s:
# 1.07 GB at T = 16k, 0.25 ms. Eager torch, although it uses the same chunked algebra, is 41× above it: every
# step is a separate kernel, and the per-chunk states `[B, H, T/C, K, V]` (here 4 × 16 × 256 × 128 × 128 fp32,
# 1 GiB at T = 16k) go to HBM and back. `torch.compile` does not fuse matmuls with the scan between them, and is
# slower than eager here at every length. fla's kernels are within 3–7× of the floor. At the end of this lesson
# your own fused kernel joins this table.

# %% [markdown] nbgrader={"grade": false, "grade_id": "math", "locked": true, "schema_version": 3, "solution": false}
# ## From the recurrence to chunks
#
# Per head, with `q_t, k_t ∈ ℝ^K` and `v_t ∈ ℝ^V`, lesson 02's recurrence is
#
# $$S_t = S_{t-1} + k_t v_t^\top \in \mathbb{R}^{K\times V}, \qquad o_t = \text{scale}\cdot S_t^\top q_t
#   = \text{scale}\sum_{s \le t} (q_t\cdot k_s)\, v_s .$$
#
# Cut the sequence into chunks of `C` tokens; chunk `c` holds tokens `cC … cC + C − 1`, stacked as the rows of
# `Q_c, K_c ∈ ℝ^{C×K}` and `V_c ∈ ℝ^{C×V}`. Split the sum for a token `t` of chunk `c` at the chunk boundary:
#
# $$o_t = \text{scale}\Big(\underbrace{\sum_{s < cC} (q_t\cdot k_s)\, v_s}_{\text{earlier chunks}}
#   + \underbrace{\sum_{cC \le s \le t} (q_t\cdot k_s)\, v_s}_{\text{this chunk, causal}}\Big).$$
#
# The first sum is `q_tᵀ S_{[c]}` with `S_{[c]} = Σ_{s<cC} k_s v_sᵀ`, the state *entering* chunk `c`. The second
# is row `t` of `(Q_c K_cᵀ ⊙ M) V_c`, where `M` is the lower-triangular causal mask (`M_ij = 1` for `j ≤ i`).
# So, for all `C` tokens of the chunk at once:
#
# $$O_c = \text{scale}\,\big(Q_c\, S_{[c]} + (Q_c K_c^\top \odot M)\, V_c\big), \qquad
#   S_{[c+1]} = S_{[c]} + K_c^\top V_c, \qquad S_{[0]} = 0 .$$
#
# Nothing was approximated: only the order of additions changed, so in float64 both forms agree to rounding.
#
# **What it costs.** Per chunk, `Q_c K_cᵀ` is `2C²K` FLOP, the masked product with `V_c` `2C²V`, `Q_c S` and
# `K_cᵀ V_c` `2CKV` each: `2C(K + V) + 4KV` FLOP per token, all of it in matmuls of at least 16 × 16, which is
# what tensor cores need. The recurrence does `4KV` per token as rank-one updates. The chunk size trades the two:
# `C = 64` with `K = V = 128` adds `2C(K+V) = 32K` FLOP per token to the `64K` of the state terms, in exchange for
# `C` times fewer sequential steps. The bytes do not change: Q, K, V are read once, O written once, as long as
# the state `S` (128 × 128 fp32 = 64 KiB per head) never leaves the chip.
#
# ```
# S = 0                                            # [K, V] fp32, on-chip
# for c in 0 … ⌈T/C⌉ − 1:                          # sequential over chunks
#     Q, K, V = rows cC … cC+C−1                   # masked past T (padded rows are 0)
#     A = (Q Kᵀ) ⊙ M                               # [C, C] causal scores
#     O[c] = scale · (Q S + A V)                   # [C, V]
#     S = S + Kᵀ V                                 # carry the state to the next chunk
# ```
#
# Every `O[c]` needs only `S_{[c]}`, and the intra-chunk term `A V` needs nothing from other chunks at all: it
# can run for all chunks in parallel. That split is the shape of the three exercises.
#
# **The normaliser and decay in chunks.** Lesson 02 named what working models add; each changes this kernel in
# one place. The normaliser (positive features, `z_t = Σ_{s≤t} φ(k_s)`) is the same algebra with the values
# replaced by ones: `Q_c z_{[c]} + (Q_c K_cᵀ ⊙ M) 1` per chunk and `z_{[c+1]} = z_{[c]} + K_cᵀ 1`, a `K`-vector
# carried beside `S`, and one division per output row before the store (the package's fused kernel does exactly
# this with `normalize=True`). A decay (RetNet's `γ`, Mamba-2's per-step scalar, GLA's per-feature gate)
# multiplies in the cumulative products of the gates: the causal mask `M` becomes `M_ij = Π_{j<l≤i} α_l`, the
# state's contribution to token `i` is scaled by `Π_{cC≤l≤i} α_l`, and the carried state by the product over the
# whole chunk. With a scalar gate that is a `[C, C]` matrix of ratios computed once per chunk; with GLA's
# per-feature gates the factors go into `Q_c` and `K_c` before the matmuls, and gated kernels keep the cumulative
# gates in log space so that long products neither underflow nor overflow. The bytes grow by the gates alone; the structure of the
# fused kernel you write below does not change.

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 1 · the chunked form in torch (3 + 2 points)
#
# Write `chunked_attention_torch(q, k, v, scale, chunk_size=64)` in plain torch: causal, unnormalised, no initial
# state. Layout as in fla and the package: `q, k` are `[B, T, H, K]`, `v` is `[B, T, H, V]`; return `o`
# `[B, T, H, V]` in `q`'s dtype. `T` need not be a multiple of `chunk_size` (the last chunk is short).
#
# Loop over chunks (a Python loop of `⌈T/C⌉` iterations), not over tokens: the check counts the torch operations
# your function performs and fails a token-by-token loop. It also fails a call into the package's
# linear-attention code or into fla; use torch operations (`@`, `.tril()`, `.transpose`, …) only. Compute in the
# input's dtype (the check uses float64 and float32).

# %% nbgrader={"grade": false, "grade_id": "ex1-torch", "locked": false, "schema_version": 3, "solution": true}
def chunked_attention_torch(q, k, v, scale, chunk_size=64):
    ### BEGIN SOLUTION
    B, T, H, K = q.shape
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))  # [B, H, T, *]
    state = q.new_zeros(B, H, K, v.shape[-1])  # [B, H, K, V]
    o = torch.empty_like(v)
    for t0 in range(0, T, chunk_size):
        qc, kc, vc = (x[:, :, t0:t0 + chunk_size] for x in (q, k, v))  # [B, H, C, *]
        scores = (qc @ kc.transpose(-1, -2)).tril()  # [B, H, C, C]
        o[:, :, t0:t0 + chunk_size] = scale * (qc @ state + scores @ vc)
        state = state + kc.transpose(-1, -2) @ vc
    return o.transpose(1, 2)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex1-try", "locked": true, "schema_version": 3, "solution": false}
shape = pick(cpu=sizes("linear_attention"), gpu=dict(B=2, H=4, T=1000, K=128, V=128))  # a quick look
B, H, T, K, V = (shape[n] for n in "BHTKV")
q64, k64, v64 = (randn(B, T, H, d, dtype=torch.float64, seed=s, scale=0.5)
                 for s, d in ((0, K), (1, K), (2, V)))
scale = K ** -0.5
o_recurrent, _ = recurrent_linear_attention(q64, k64, v64, scale, normalize=False)
try:
    o_chunked = chunked_attention_torch(q64, k64, v64, scale, chunk_size=16)
    print("chunked vs recurrent, float64:", assert_close("chunked", o_recurrent, o_chunked, 1e-12))
except NotImplementedError:
    print("write chunked_attention_torch first")
except AssertionError as e:  # it runs, and its output is wrong
    print(f"chunked_attention_torch runs, but is wrong: {e}")

# %% nbgrader={"grade": true, "grade_id": "ex1-check", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("04_chunked_linear_attention.chunked_torch", chunked_attention_torch)

# %% nbgrader={"grade": true, "grade_id": "ex1-hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests (other shapes and dtypes, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("04_chunked_linear_attention.chunked_torch", chunked_attention_torch, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 2 · the intra-chunk kernel (3 + 2 points)
#
# The intra-chunk term `scale · (Q_c K_cᵀ ⊙ M) V_c` needs nothing from other chunks, so each chunk is its own
# program. Write `intra_chunk_kernel`; the grader launches it on the grid
# `(⌈T/BT⌉, B·H, ⌈V/BV⌉)`: program `(c, b·H + h, j)` computes rows `c·BT … c·BT + BT − 1` and columns
# `j·BV … j·BV + BV − 1` of head `h` of sequence `b`, and writes them to `o`.
#
# | argument | meaning |
# | --- | --- |
# | `q_ptr, k_ptr, v_ptr, o_ptr` | `q, k` `[B, T, H, K]`, `v, o` `[B, T, H, V]`, one dtype (fp32, fp16, bf16) |
# | `T, H, K, V` | sizes; `T`, `K`, `V` need not be powers of two |
# | `scale` | fp32 scalar |
# | `stride_qb, stride_qt, stride_qh` (and the same for `k`, `v`, `o`) | element strides of the first three dimensions; the last dimension has unit stride |
# | `BT, BK, BV` | `tl.constexpr` block sizes, powers of two ≥ 16, `BK ≥ K` (the whole key head in one block) |
# | `PRECISION` | `tl.constexpr` for `tl.dot(..., input_precision=PRECISION)` |
#
# Mask rows past `T` and columns past `K` and `V` (load them as 0), build the causal mask from two
# `tl.arange(0, BT)`, and accumulate in fp32. `tl.trans(k)` gives `Kᵀ`; before the second `tl.dot`, cast the
# scores to `v`'s dtype so that both operands match.

# %% nbgrader={"grade": false, "grade_id": "ex2-intra", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def intra_chunk_kernel(q_ptr, k_ptr, v_ptr, o_ptr, T, H, K, V, scale,
                       stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
                       stride_vb, stride_vt, stride_vh, stride_ob, stride_ot, stride_oh,
                       BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, PRECISION: tl.constexpr):
    ### BEGIN SOLUTION
    i_c = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_v = tl.program_id(2)
    i_b = i_bh // H
    i_h = i_bh % H
    offs_c = tl.arange(0, BT)
    offs_t = i_c * BT + offs_c
    offs_k = tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    mask_qk = (offs_t[:, None] < T) & (offs_k[None, :] < K)
    mask_vo = (offs_t[:, None] < T) & (offs_v[None, :] < V)
    q = tl.load(q_ptr + i_b * stride_qb + i_h * stride_qh + offs_t[:, None] * stride_qt + offs_k[None, :],
                mask=mask_qk, other=0.0)  # [BT, BK]
    k = tl.load(k_ptr + i_b * stride_kb + i_h * stride_kh + offs_t[:, None] * stride_kt + offs_k[None, :],
                mask=mask_qk, other=0.0)  # [BT, BK]
    v = tl.load(v_ptr + i_b * stride_vb + i_h * stride_vh + offs_t[:, None] * stride_vt + offs_v[None, :],
                mask=mask_vo, other=0.0)  # [BT, BV]
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION)  # [BT, BT]
    scores = tl.where(offs_c[:, None] >= offs_c[None, :], scores, 0.0)
    o = tl.dot(scores.to(v.dtype), v, input_precision=PRECISION) * scale  # [BT, BV]
    tl.store(o_ptr + i_b * stride_ob + i_h * stride_oh + offs_t[:, None] * stride_ot + offs_v[None, :],
             o.to(o_ptr.dtype.element_ty), mask=mask_vo)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "launch", "locked": true, "schema_version": 3, "solution": false}
def strides(x):
    return x.stride(0), x.stride(1), x.stride(2)


def blocks(K, V, chunk, block_v=None):
    bk = max(16, triton.next_power_of_2(K))
    return chunk, bk, block_v or min(max(16, triton.next_power_of_2(V)), 64 if bk <= 128 else 32)


def launch_intra(q, k, v, scale, chunk=16, block_v=None):
    B, T, H, K = q.shape
    V = v.shape[-1]
    o = v.new_empty(v.shape)  # contiguous, whatever the layout of v
    BT, BK, BV = blocks(K, V, chunk, block_v)
    grid = (triton.cdiv(T, BT), B * H, triton.cdiv(V, BV))
    intra_chunk_kernel[grid](q, k, v, o, T, H, K, V, scale, *strides(q), *strides(k), *strides(v), *strides(o),
                             BT=BT, BK=BK, BV=BV, PRECISION="ieee")
    return o


def intra_reference(q, k, v, scale, chunk):
    """Only the causal in-chunk term, chunk by chunk, in float64."""
    o = torch.empty(*v.shape, dtype=torch.float64, device=v.device)
    for t0 in range(0, q.shape[1], chunk):
        qc, kc, vc = (x[:, t0:t0 + chunk].double() for x in (q, k, v))  # [B, C, H, *]
        scores = torch.einsum("bthk,bshk->bhts", qc, kc).tril()  # [B, H, C, C]
        o[:, t0:t0 + chunk] = scale * torch.einsum("bhts,bshv->bthv", scores, vc)
    return o


q, k, v = (x.float() for x in (q64, k64, v64))
# as the checks pass them: k a view of a wider buffer (its own t and h strides), v in [B, H, T, V] storage, and
# V split over two blocks of programs
k_view = torch.cat([k, k[..., :5]], dim=-1)[..., :K]
v_heads = v.transpose(1, 2).contiguous().transpose(1, 2)
half_v = max(16, V // 2)
try:
    print("intra-chunk kernel:", assert_close("intra", intra_reference(q, k_view, v_heads, scale, 16),
                                              launch_intra(q, k_view, v_heads, scale, block_v=half_v),
                                              tolerance(torch.float32)))
except AssertionError as e:  # it runs, and its output is wrong
    print(f"intra_chunk_kernel runs, but is wrong: {e}")
except Exception as e:  # not done yet, or it stopped (an access out of bounds, say)
    print("intra_chunk_kernel does not run yet:", describe_error(e))

# %% nbgrader={"grade": true, "grade_id": "ex2-check", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("04_chunked_linear_attention.intra_chunk", intra_chunk_kernel)

# %% nbgrader={"grade": true, "grade_id": "ex2-hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests (other shapes and dtypes, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("04_chunked_linear_attention.intra_chunk", intra_chunk_kernel, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 3 · the fused chunked forward (4 + 3 points, and 3 for speed on a GPU)
#
# Now the whole thing in one kernel. One program owns one head of one sequence and one block of `BV` value
# columns, and walks its chunks **in order**, carrying the state `S` `[BK, BV]` in fp32 registers from one chunk
# to the next: per chunk, load `Q_c, K_c, V_c`, write `O_c = scale · (Q_c S + (Q_c K_cᵀ ⊙ M) V_c)`, then
# `S += K_cᵀ V_c`. The grid is `(⌈V/BV⌉, B·H)`; program `(j, b·H + h)`. The arguments are exactly those of
# exercise 2, and `BT` is the chunk size.
#
# V is read once and O written once; Q and K are read once per block of V columns (twice for `V = 128`,
# `BV = 64`, and from L2 the second time if the two programs run together): close to the floor's bytes. Hints:
# - every product in the chunk formula is a `tl.dot` of two tiles; `tl.dot(a, b, acc)` adds into an fp32 `acc`,
#   and `tl.trans(x)` transposes a tile. Work out which products there are, their shapes, and which can share
#   an accumulator;
# - the tensor cores take matching input types: a tile you carry in fp32 must be cast to the inputs' dtype
#   before it meets them in a dot, while the fp32 copy is what you carry on;
# - masked rows past `T` load as zeros: what do they add to the state?
#
# Splitting the value head into `BV` blocks gives `⌈V/BV⌉` times more programs, each carrying a `[BK, BV]` slice
# of the state; the key head is not split, because each output needs the whole `q_t · k_s`.

# %% nbgrader={"grade": false, "grade_id": "ex3-fused", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def chunked_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, T, H, K, V, scale,
                             stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
                             stride_vb, stride_vt, stride_vh, stride_ob, stride_ot, stride_oh,
                             BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, PRECISION: tl.constexpr):
    ### BEGIN SOLUTION
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // H
    i_h = i_bh % H
    q_base = q_ptr + i_b * stride_qb + i_h * stride_qh
    k_base = k_ptr + i_b * stride_kb + i_h * stride_kh
    v_base = v_ptr + i_b * stride_vb + i_h * stride_vh
    o_base = o_ptr + i_b * stride_ob + i_h * stride_oh
    offs_c = tl.arange(0, BT)
    offs_k = tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    causal = offs_c[:, None] >= offs_c[None, :]  # [BT, BT]
    state = tl.zeros((BK, BV), dtype=tl.float32)
    for t0 in range(0, T, BT):
        offs_t = t0 + offs_c
        mask_qk = (offs_t[:, None] < T) & (offs_k[None, :] < K)
        mask_vo = (offs_t[:, None] < T) & (offs_v[None, :] < V)
        q = tl.load(q_base + offs_t[:, None] * stride_qt + offs_k[None, :], mask=mask_qk, other=0.0)  # [BT, BK]
        k = tl.load(k_base + offs_t[:, None] * stride_kt + offs_k[None, :], mask=mask_qk, other=0.0)  # [BT, BK]
        v = tl.load(v_base + offs_t[:, None] * stride_vt + offs_v[None, :], mask=mask_vo, other=0.0)  # [BT, BV]
        scores = tl.where(causal, tl.dot(q, tl.trans(k), input_precision=PRECISION), 0.0)  # [BT, BT]
        o = tl.dot(q, state.to(q.dtype), input_precision=PRECISION)  # [BT, BV]
        o = tl.dot(scores.to(v.dtype), v, o, input_precision=PRECISION)
        tl.store(o_base + offs_t[:, None] * stride_ot + offs_v[None, :], (o * scale).to(o_ptr.dtype.element_ty),
                 mask=mask_vo)
        state = tl.dot(tl.trans(k), v, state, input_precision=PRECISION)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex3-try", "locked": true, "schema_version": 3, "solution": false}
def chunked_attention(q, k, v, scale, chunk=16, precision=None, num_warps=4, num_stages=2, block_v=None):
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 4 or x.stride(-1) != 1:
            raise ValueError(f"{name} must be [B, T, H, D] with a unit-stride last dimension, got {tuple(x.shape)}")
    B, T, H, K = q.shape
    V = v.shape[-1]
    o = v.new_empty(v.shape)  # contiguous, whatever the layout of v
    BT, BK, BV = blocks(K, V, chunk, block_v)
    precision = precision or ("ieee" if q.dtype == torch.float32 else "tf32")
    grid = (triton.cdiv(V, BV), B * H)
    chunked_attention_kernel[grid](q, k, v, o, T, H, K, V, scale, *strides(q), *strides(k), *strides(v),
                                   *strides(o), BT=BT, BK=BK, BV=BV, PRECISION=precision, num_warps=num_warps,
                                   num_stages=num_stages)
    return o


try:
    print("fused kernel vs recurrence:", assert_close(
        "fused", o_recurrent, chunked_attention(q, k_view, v_heads, scale, block_v=half_v), tolerance(torch.float32)))
except AssertionError as e:  # it runs, and its output is wrong
    print(f"chunked_attention_kernel runs, but is wrong: {e}")
except Exception as e:  # not done yet, or it stopped (an access out of bounds, say)
    print("chunked_attention_kernel does not run yet:", describe_error(e))

# %% nbgrader={"grade": true, "grade_id": "ex3-check", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("04_chunked_linear_attention.chunked_fwd", chunked_attention_kernel)

# %% nbgrader={"grade": true, "grade_id": "ex3-hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Hidden tests (other shapes and dtypes, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("04_chunked_linear_attention.chunked_fwd", chunked_attention_kernel, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3-speed-text", "locked": true, "schema_version": 3, "solution": false}
# ### The capstone: choose the chunk size, and be fast
#
# On a GPU your kernel is timed at the table's size, B = 4, T = 16,384, H = 16, D = 128 in bf16, on fresh
# NaN-filled outputs at every launch, with the block sizes and launch options **you** choose in `CHUNK`. It must
# beat fla-core's `chunk_linear_attn` (0.72-0.77 ms on the project's H200, run to run) where fla is installed, and otherwise run
# within 2.5× of the HBM floor measured on the machine (0.25 ms there: 0.63 ms). The `chunk=16` that the cell
# above tried is a correct choice and a slow one: **1.29 ms** on the H200. What changes with the chunk size `C`:
#
# - **the sequential chain**: a program walks `T / C` chunks one after another, each waiting on the state of the
#   last; 1024 steps at `C = 16`, 256 at 64;
# - **the arithmetic**: `2C(K + V) + 4KV` FLOP per token (the `C`-dependent part is the intra-chunk square);
#   at K = V = 128 that is 73 KFLOP at `C = 16`, 98 at 64, 131 at 128, all of it on the tensor cores (about
#   165 FLOP per byte before they are the limit);
# - **the tiles in flight**: per program, `Q_c` and `K_c` (`C × BK`) and `V_c` (`C × BV`) in shared memory, once
#   per pipeline stage (`num_stages`), and the fp32 state (`BK × BV`) plus the `C × C` scores in registers,
#   spread over `32 · num_warps` threads: an H200 block has 227 KiB of shared memory, a thread at most 255
#   registers. These are estimates: the compiler may stage more (an operand converted for `tl.dot` goes through
#   shared memory too) or pipeline less, and needs registers for addresses and masks as well. The budget cell
#   below also compiles your kernel for sm_90, no GPU needed, and prints what the compiler actually allocated;
#   a block over 227 KiB fails to launch on a GPU (the check refuses such a `CHUNK` on any machine), and spills
#   (registers sent to local memory) are slow;
# - **the programs**: `⌈V/BV⌉ · B · H` of them (128 at `BV = 64`) on 132 SMs.
#
# Set `CHUNK = dict(BT=…, BV=…, num_warps=…, num_stages=…)` (`BT`, `BV` of 16, 32, 64 or 128) and justify it in
# a comment above it, with the numbers: the chain, the FLOPs, the shared memory and registers per program. The
# cell after it prints them for your choice. Without a GPU the check runs your kernel with your `CHUNK` on a
# small case and reports the speed as not graded.

# %% nbgrader={"grade": false, "grade_id": "ex3-chunk", "locked": false, "schema_version": 3, "solution": true}
CHUNK = None  # until your answer below sets it (the check then says it is missing)
### BEGIN SOLUTION
# C = 64: a chain of 256 chunks instead of 1024 at C = 16, for 98 KFLOP per token instead of 73 (the tensor cores
# still wait on memory). Two stages of 64 x 128 Q and K tiles and a 64 x 64 V tile are 80 KiB of shared memory
# by the estimate, 96 KiB as compiled (the state's bf16 copy for the dot is staged there too); the 128 x 64 fp32
# state and the 64 x 64 scores are 96 registers per thread with 4 warps, 206 in all as compiled, no spills.
# BV = 64 keeps 128 programs, about one per SM. BT = BV = 128 with three stages would need 320 KiB and spill.
CHUNK = dict(BT=64, BV=64, num_warps=4, num_stages=2)
### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex3-chunk-budget", "locked": true, "schema_version": 3, "solution": false}
def chunk_budget(c, T=16384, B=4, H=16, K=128, V=128, e=2):
    BK = max(16, triton.next_power_of_2(K))
    smem = c["num_stages"] * (2 * c["BT"] * BK + c["BT"] * c["BV"]) * e
    regs = (BK * c["BV"] + c["BT"] * c["BT"]) / (32 * c["num_warps"])
    print(f"BT={c['BT']}: a chain of {-(-T // c['BT'])} chunks; {2 * c['BT'] * (K + V) + 4 * K * V:,} FLOP per "
          f"token; estimated: {smem / 1024:.0f} KiB of shared memory of 227, state and scores {regs:.0f} fp32 "
          f"registers per thread of 255; {-(-V // c['BV']) * B * H} programs on 132 SMs")


def compiled_budget(c, T=16384, B=4, H=16, K=128, V=128):
    """What the compiler for sm_90 (H100/H200) allocates for your kernel at the capstone's size with ``c``."""
    from kernels.profile.compiler import compile_kernel  # lesson 06 shows more of what it reports

    q = torch.empty(B, T, H, K, dtype=torch.bfloat16, device="meta")  # shapes and strides only, no memory
    o = torch.empty(B, T, H, V, dtype=torch.bfloat16, device="meta")
    strides = [*q.stride()[:3], *q.stride()[:3], *o.stride()[:3], *o.stride()[:3]]
    got = compile_kernel(chunked_attention_kernel, (q, q, o, o, T, H, K, V, K ** -0.5, *strides),
                         num_warps=c["num_warps"], num_stages=c["num_stages"], BT=c["BT"],
                         BK=max(16, triton.next_power_of_2(K)), BV=c["BV"], PRECISION="ieee")
    print(f"compiled for sm_90: {got.shared / 1024:.0f} KiB of shared memory, {got.registers} registers per "
          f"thread, {got.spills} bytes of spills")
    if got.shared > 227 * 1024:
        print("  more shared memory than a block may have (227 KiB): this launch fails on a GPU")
    if got.spills:
        print("  it spills: registers go to local memory and back, which is slow")


from kernels.checks import value_problem

try:
    refused = CHUNK is not None and value_problem("04_chunked_linear_attention.chunked_speed", CHUNK)
    if CHUNK is None:
        print("set CHUNK in the cell above first")
    elif refused:  # the speed check's own rule: a CHUNK it refuses is named as it names it, not compiled
        print(refused)
    else:
        chunk_budget(CHUNK)
        compiled_budget(CHUNK)
except Exception as e:  # noqa: BLE001 (the kernel does not compile yet: its check says why)
    print(f"your kernel does not compile for sm_90 yet: {str(e).strip().splitlines()[-1][:300]}")

# %% nbgrader={"grade": true, "grade_id": "ex3-speed", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("04_chunked_linear_attention.chunked_speed", CHUNK, chunked_attention_kernel)

# %% [markdown] nbgrader={"grade": false, "grade_id": "widget-text", "locked": true, "schema_version": 3, "solution": false}
# ## Look at it: chunks and the state flowing between them
#
# The first view shows the algebra on a short sequence: pick a chunk size and a chunk, and see which part of the
# causal `T × T` score matrix the intra-chunk term covers (the triangle on the diagonal), which part arrives through
# the state (everything left of it), and the state entering the chunk. It checks the chunked output against the
# token-by-token recurrence on the same inputs.

# %% nbgrader={"grade": false, "grade_id": "widget", "locked": true, "schema_version": 3, "solution": false} tags=["widget"]
from kernels.viz import chunk_flow

chunk_flow(T=100, K=8, V=8, chunk=16)

# %% [markdown] nbgrader={"grade": false, "grade_id": "widget-trace-text", "locked": true, "schema_version": 3, "solution": false}
# The second view traces **your** fused kernel (or the package's chunked kernel, until yours runs) under the
# interpreter and shows, per program and loop step, which rows of Q, K, V it loaded and which rows of O it stored.
# Every row is loaded once per program and stored once; the state never appears among the loads and stores,
# because it lives in registers for the whole sequence.

# %% nbgrader={"grade": false, "grade_id": "widget-trace", "locked": true, "schema_version": 3, "solution": false} tags=["widget"]
import torch
import triton

from kernels.linear_attention.chunked import _chunked_linear_attention_kernel
from kernels.testing import randn
from kernels.viz import access_explorer, trace


def traced_chunked(yours=True, T=50, H=2, K=16, V=32, BT=16, BV=16):
    q, k = (randn(1, T, H, K, seed=s, device="cpu") for s in (0, 1))
    v = randn(1, T, H, V, seed=2, device="cpu")
    o = torch.empty_like(v)
    st = [x.stride(i) for x in (q, k, v, o) for i in range(3)]
    grid = (triton.cdiv(V, BV), H)
    if yours:
        chunked_attention_kernel[grid](q, k, v, o, T, H, K, V, K ** -0.5, *st, BT=BT, BK=16, BV=BV, PRECISION="ieee")
    else:
        _chunked_linear_attention_kernel[grid](q, k, v, o, None, None, None, T, H, K, V, K ** -0.5, *st, BT=BT,
                                               BK=16, BV=BV, USE_H0=False, STORE_HT=False, IS_VARLEN=False,
                                               UPCAST=False, PRECISION="ieee")
    return o


try:
    traced = trace(traced_chunked)
    print("tracing your chunked_attention_kernel")
except Exception as e:  # not written yet: trace the package's kernel
    traced = trace(traced_chunked, yours=False)
    print(f"tracing the package's chunked kernel (yours does not run yet: {type(e).__name__})")
access_explorer(traced, "o_ptr")

# %% [markdown] nbgrader={"grade": false, "grade_id": "bench-text", "locked": true, "schema_version": 3, "solution": false}
# ## Benchmark: the table again, on your hardware
#
# The package's benchmark validates every version against the float64 oracle before timing it, then prints the
# table and writes it as JSON and a plot: torch eager (the chunked form), `torch.compile` of it, lesson 02's
# naive and fused recurrent kernels, **your** fused kernel (`yours`), the package's versions (`chunked`;
# `lookback`, which splits sequences when their chains are too few to fill the GPU: one sequence, few heads; and
# `fused`, which `chunk_linear_attn` runs: both launches in one kernel, with fla's normaliser inside), fla's
# `chunk_linear_attn` and `fused_chunk_linear_attn`
# when fla is installed (`pip install fla-core`), and the HBM floor. On a GPU it runs the H200 table's shape
# (B = 4, H = 16, D = 128, bf16) at T = 4k and 16k, without `torch.compile` (whose compile alone takes tens of
# seconds); set `FULL_TABLE = True` for every version at T = 4k, 16k, 64k and 256k, then fp16, H = 32 with D = 64,
# packed sequences and an initial state (a few minutes). In the interpreter it runs quick, small sizes, whose
# times measure the interpreter and not a GPU. The plot below the tables is the same
# data: median time per version against the floor.

# %% nbgrader={"grade": false, "grade_id": "bench", "locked": true, "schema_version": 3, "solution": false}
from kernels.bench import Version, run
from kernels.device import MODE


def yours(q, k, v, scale, initial_state=None, output_final_state=False, cu_seqlens=None):
    dtype = q.dtype
    if not ON_GPU and dtype == torch.bfloat16:  # the interpreter's bf16 tl.dot is wrong: compute in fp32
        q, k, v = q.float(), k.float(), v.float()
    c = globals().get("CHUNK") or dict(BT=64, BV=64, num_warps=4, num_stages=2)
    o = chunked_attention(q, k, v, scale, chunk=pick(cpu=16, gpu=c["BT"]), num_warps=pick(cpu=4, gpu=c["num_warps"]),
                          num_stages=pick(cpu=2, gpu=c["num_stages"]))
    return o.to(dtype), None


def naive(q, k, v, scale, initial_state=None, output_final_state=False, cu_seqlens=None):
    from kernels.recurrent.naive import naive_recurrent

    return naive_recurrent(q, k, v, scale=scale, initial_state=initial_state, output_final_state=output_final_state)


def fixed_length_only(problem):
    p = problem.params
    return "yours: fixed-length sequences, no initial state" if p["varlen"] or p["state"] else None


def flat(result):
    o, state = result
    return o if state is None else torch.cat([o.flatten().float(), state.flatten()])


extra = [Version("naive recurrent (lesson 02)", naive, skip=lambda p: "varlen" if p.params["varlen"] else None,
                 output=flat)]
try:
    yours(q, k, v, scale)
    extra.append(Version("yours", yours, skip=fixed_length_only, output=lambda r: r[0]))
except Exception as e:
    print(f"your kernel is left out of the benchmark ({type(e).__name__}: finish exercise 3)")
FULL_TABLE = False  # True on a GPU: every version (torch.compile too) at T = 4k to 256k, and the extra rows
bench_dir = ROOT / "artifacts" / "04_chunked_linear_attention"
if FULL_TABLE:
    only, labels = None, None
elif ON_GPU:
    only = ["torch eager (chunked)", "recurrent (fused)", "naive recurrent (lesson 02)", "fla chunk", "chunked",
            "lookback", "yours"]
    labels = ["T4k", "T16k"]
else:
    only, labels = ["torch eager (chunked)", "chunked", "yours"], None
results = run("linear_attention", quick=not FULL_TABLE, extra=extra, only=only, labels=labels, out=bench_dir)
try:
    from IPython.display import Image, display

    display(Image(filename=str(bench_dir / f"linear_attention-{MODE}.png")))
except ImportError:
    pass

# %% [markdown] nbgrader={"grade": false, "grade_id": "no-gpu", "locked": true, "schema_version": 3, "solution": false}
# > **Without a GPU.** The kernels ran in Triton's interpreter: every program one after another, in numpy.
# > The checks are the same as on a GPU (odd `T`, `K`, `V`, strided views, NaN-poisoned outputs, float64
# > references), except that:
# > - bf16 cases run on a GPU only: the interpreter computes bf16 `tl.dot` wrongly (a Triton bug);
# > - `"tf32"` behaves like `"ieee"` (numpy computes the dots in fp32);
# > - the benchmark's times measure the interpreter; the ratios between versions say nothing about a GPU, and the
# >   table above is the one to compare with;
# > - fla is not installed in the interpreter environment, so the table here leaves it out: compare with the
# >   table above.

# %% [markdown] nbgrader={"grade": false, "grade_id": "recap", "locked": true, "schema_version": 3, "solution": false}
# ## Recap
#
# - Causal linear attention in chunks: `O_c = scale · (Q_c S_[c] + (Q_c K_cᵀ ⊙ M) V_c)`, `S_[c+1] = S_[c] + K_cᵀ V_c`;
#   exactly the recurrence, added up in a different order.
# - The intra-chunk term is independent per chunk (parallel); the state term is a scan over chunks (sequential).
# - A fused kernel keeps `S` in registers across the whole sequence and moves only Q, K, V and O: the HBM floor's
#   bytes. Eager torch moves every per-chunk state through HBM and is an order of magnitude slower.
# - The chunk size trades extra intra-chunk FLOP (`2C(K+V)` per token) for fewer sequential steps and
#   tensor-core-sized matmuls.
#
# Lesson 05 takes your fused kernel out of Python: compiled ahead of time to PTX, read, and launched from Rust.

# %% [markdown] nbgrader={"grade": false, "grade_id": "score_md", "locked": true, "schema_version": 3, "solution": false}
# ## Your score
#
# The cell below runs every check of this lesson on your notebook as it stands, the hidden ones included (it
# reuses the outcome of each check you already ran on the same kernel), and prints your points per exercise and
# in total. Points for speed are graded on a GPU only; without one they are listed as needing a GPU. From a
# shell, `make score L=04` does the same for your saved notebook in `my-work/`.

# %% nbgrader={"grade": false, "grade_id": "score", "locked": true, "schema_version": 3, "solution": false}
from grader.score import score_here

your_score = score_here("04_chunked_linear_attention", globals())
