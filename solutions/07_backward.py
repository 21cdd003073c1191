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
# # 07 · The backward pass of chunked linear attention
#
# Lesson 04 computed `o = scale · causal(Q Kᵀ) V` in chunks, with a state `S` carried from chunk to chunk. Models
# are trained, so someone has to compute the gradients too: `dq`, `dk`, `dv` from the output's gradient `do`.
# For softmax attention that is FlashAttention's backward. For *linear* attention it has a neat shape: the
# gradients are the same chunked algorithm again, and one of them runs **backwards in time**, carrying a state
# gradient `dH` from the last chunk to the first.
#
# **You will learn**
# - to derive the gradients of the recurrence and of its chunked form, and to check a derivation numerically
#   against torch's autograd in float64;
# - where the causal mask goes in the backward pass (it is transposed), and why `dH` must be used for a chunk
#   before the chunk's own contribution is added;
# - to write it three ways: a torch chunked backward, a Triton kernel for `dq` walking the chunks forwards, and
#   one for `dk, dv` walking them backwards;
# - to wrap a forward and those kernels into a `torch.autograd.Function` that keeps nothing between forward and
#   backward but its inputs, and to time it on a GPU.

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
from kernels.testing import assert_close, randn, tolerance

ROOT = pathlib.Path(kernels.__file__).resolve().parent.parent

# %% [markdown] nbgrader={"grade": false, "grade_id": "motivation", "locked": true, "schema_version": 3, "solution": false}
# ## The numbers
#
# fla-core 0.6.0's `chunk_linear_attn`, forward and backward, measured on an H200 (B = 4, H = 16, D = 128, bf16,
# unnormalised; median ms):
#
# | T | floor (11 tensor-volumes) | fla forward + backward | × floor |
# | --- | --- | --- | --- |
# | 4,096 | 0.17 | 1.84 | 10.7× |
# | 16,384 | 0.69 | 3.23 | 4.7× |
# | 65,536 | 2.77 | 13.28 | 4.8× |
#
# The floor counts what any training step must move: q, k, v read and o written by the forward; q, k, v and `do`
# read and `dq, dk, dv` written by the backward. Eleven tensors of `B·T·H·D` bf16 elements at 4.26 TB/s. fla's
# backward recomputes the per-chunk states `[B, H, T/C, K, V]` and writes them to HBM, then computes their
# gradients and writes those too, then reads both back: at `C = 64` the states of a head hold `T/64 · 128 · 128 =
# 256·T` elements, two thirds of q, k and v together (`3 · 128 · T`), and their gradients as many again. The
# kernels of this lesson keep every state on-chip, as lesson 04's forward did.

# %% [markdown] nbgrader={"grade": false, "grade_id": "math", "locked": true, "schema_version": 3, "solution": false}
# ## Deriving the gradients
#
# Per head, lesson 02's recurrence is `S_t = S_{t-1} + k_t v_tᵀ` (`S_0 = 0`) and `o_t = scale · S_tᵀ q_t`. Let
# `L` be the loss and `do_t = ∂L/∂o_t`. Follow each input to the outputs it reaches:
#
# - `q_t` reaches only `o_t`: $dq_t = \text{scale}\cdot S_t\, do_t$.
# - `S_t` reaches `o_t` directly and every later output through `S_{t+1}, S_{t+2}, …`. Its total gradient is
#   $$dH_t = \text{scale} \sum_{u \ge t} q_u\, do_u^\top \in \mathbb{R}^{K \times V}$$
#   (add `dS_T`, the final state's gradient, when the final state is used).
# - `k_t` and `v_t` enter only through `S_t = S_{t-1} + k_t v_tᵀ`: $dk_t = dH_t\, v_t$ and $dv_t = dH_t^\top k_t$.
#
# `dq` is a sum over the past, exactly like `o` (with `do` in the role of `q`, `v` in the role of `k`, `k` in the
# role of `v`). `dk` and `dv` are sums over the **future**: `dH` is a state that runs backwards in time.
#
# **In chunks.** With `M` the lower-triangular mask, `S_[c]` the state entering chunk `c` and `dH_[c]` the
# gradient arriving from every chunk *after* `c`:
#
# $$dQ_c = \text{scale}\,\big(dO_c\, S_{[c]}^\top + (dO_c V_c^\top \odot M)\, K_c\big), \qquad
#   S_{[c+1]} = S_{[c]} + K_c^\top V_c,$$
# $$dK_c = V_c\, dH_{[c]}^\top + \text{scale}\,(V_c\, dO_c^\top \odot M^\top)\, Q_c, \qquad
#   dV_c = K_c\, dH_{[c]} + \text{scale}\,(K_c Q_c^\top \odot M^\top)\, dO_c,$$
# $$dH_{[c-1]} = dH_{[c]} + \text{scale}\cdot Q_c^\top dO_c .$$
#
# Three things to notice. The mask is `Mᵀ` in `dK` and `dV`: token `s` of a chunk gets gradient from the tokens
# `u ≥ s` of the same chunk. `dH_[c]` is used for chunk `c` **before** chunk `c`'s own `scale · Q_cᵀ dO_c` is
# added (that part is the masked term; adding it first counts the chunk twice, and without the mask). And
# `scale` multiplies every term once: `dH` already carries it.
#
# ```
# S = 0                                     # dq pass: chunks 0, 1, 2, …
# for c in 0 … n−1:
#     dQ[c] = scale · (dO S ᵀ + (dO Vᵀ ⊙ M) K);   S += Kᵀ V
# dH = 0                                    # dk/dv pass: chunks n−1, …, 1, 0
# for c in n−1 … 0:
#     dK[c] = V dHᵀ + scale · (V dOᵀ ⊙ Mᵀ) Q;   dV[c] = K dH + scale · (K Qᵀ ⊙ Mᵀ) dO
#     dH += scale · Qᵀ dO                   # after use
# ```
#
# Before writing any of it, check the token-level formulas against autograd, in float64:

# %% nbgrader={"grade": false, "grade_id": "derive-check", "locked": true, "schema_version": 3, "solution": false}
q64, k64, v64, do64 = (randn(1, 23, 1, d, dtype=torch.float64, seed=s, scale=0.5) for s, d in ((0, 6), (1, 6),
                                                                                                  (2, 5), (3, 5)))
leaves = [x.clone().requires_grad_() for x in (q64, k64, v64)]
o64, _ = recurrent_linear_attention(*leaves, 0.4, normalize=False)
o64.backward(do64)
q1, k1, v1, do1 = (x[0, :, 0] for x in (q64, k64, v64, do64))  # [T, *]
S = torch.cumsum(k1[:, :, None] * v1[:, None, :], 0)  # S_t, [T, K, V]
dH = 0.4 * torch.cumsum((q1[:, :, None] * do1[:, None, :]).flip(0), 0).flip(0)  # dH_t = scale Σ_{u≥t} q_u do_uᵀ
by_hand = (0.4 * torch.einsum("tkv,tv->tk", S, do1), torch.einsum("tkv,tv->tk", dH, v1),
           torch.einsum("tkv,tk->tv", dH, k1))
for name, mine, auto in zip(("dq", "dk", "dv"), by_hand, (x.grad[0, :, 0] for x in leaves)):
    print(f"{name}: by hand vs autograd, float64:", assert_close(name, auto, mine, 1e-12))

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 1 · the chunked backward in torch (3 + 2 points)
#
# Write `chunked_backward_torch(q, k, v, do, scale, chunk_size=64)` in plain torch, returning `(dq, dk, dv)` for
# causal, unnormalised attention without states. Layout as in lesson 04: `q, k` `[B, T, H, K]`, `v, do`
# `[B, T, H, V]`; return the gradients in `q`'s dtype, computed in the input's dtype. `T` need not be a multiple
# of `chunk_size`.
#
# Two loops over chunks: one forwards for `dq`, one backwards for `dk` and `dv`. The check counts torch operations
# (a loop over tokens fails), fails a `T × T` intermediate (quadratic attention), and refuses autograd
# (`.backward()`, `torch.autograd`): the point is to write the gradients yourself. Hints: `.tril()` is `⊙ M`,
# `.triu()` is `⊙ Mᵀ`; `range(n - 1, -1, -1)` walks backwards.

# %% nbgrader={"grade": false, "grade_id": "ex1-torch", "locked": false, "schema_version": 3, "solution": true}
def chunked_backward_torch(q, k, v, do, scale, chunk_size=64):
    ### BEGIN SOLUTION
    B, T, H, K = q.shape
    V = v.shape[-1]
    q, k, v, do = (x.transpose(1, 2) for x in (q, k, v, do))  # [B, H, T, *]
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    starts = list(range(0, T, chunk_size))
    state = q.new_zeros(B, H, K, V)  # S entering the chunk
    for t0 in starts:
        kc, vc, doc = (x[:, :, t0:t0 + chunk_size] for x in (k, v, do))
        p = (doc @ vc.transpose(-1, -2)).tril()  # [B, H, C, C]
        dq[:, :, t0:t0 + chunk_size] = scale * (doc @ state.transpose(-1, -2) + p @ kc)
        state = state + kc.transpose(-1, -2) @ vc
    dstate = q.new_zeros(B, H, K, V)  # dH from the chunks after this one
    for t0 in reversed(starts):
        qc, kc, vc, doc = (x[:, :, t0:t0 + chunk_size] for x in (q, k, v, do))
        a = (kc @ qc.transpose(-1, -2)).triu()  # [B, H, C, C]: k_s · q_u for u ≥ s
        b = (vc @ doc.transpose(-1, -2)).triu()  # [B, H, C, C]: v_s · do_u for u ≥ s
        dk[:, :, t0:t0 + chunk_size] = vc @ dstate.transpose(-1, -2) + scale * (b @ qc)
        dv[:, :, t0:t0 + chunk_size] = kc @ dstate + scale * (a @ doc)
        dstate = dstate + scale * qc.transpose(-1, -2) @ doc
    return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex1-try", "locked": true, "schema_version": 3, "solution": false}
# a quick look, in float64, with K ≠ V (a state read without its transpose does not fit)
shape = pick(cpu=dict(sizes("linear_attention"), V=24), gpu=dict(B=2, H=4, T=1000, K=64, V=48))
B, H, T, K, V = (shape[n] for n in "BHTKV")
q64, k64, v64, do64 = (randn(B, T, H, d, dtype=torch.float64, seed=s, scale=0.5)
                       for s, d in ((0, K), (1, K), (2, V), (3, V)))
scale = K ** -0.5
leaves = [x.clone().requires_grad_() for x in (q64, k64, v64)]
recurrent_linear_attention(*leaves, scale, normalize=False)[0].backward(do64)
grads64 = [x.grad for x in leaves]
try:
    mine = chunked_backward_torch(q64, k64, v64, do64, scale, chunk_size=16)
    for name, auto, got in zip(("dq", "dk", "dv"), grads64, mine):
        print(f"{name}, chunked vs autograd of the recurrence, float64:", assert_close(name, auto, got, 1e-12))
except NotImplementedError:
    print("write chunked_backward_torch first")
except AssertionError as e:  # it runs, and a gradient is wrong
    print(f"chunked_backward_torch runs, but is wrong: {e}")

# %% nbgrader={"grade": true, "grade_id": "ex1-check", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("07_backward.backward_torch", chunked_backward_torch)

# %% nbgrader={"grade": true, "grade_id": "ex1-hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests (other shapes and dtypes, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("07_backward.backward_torch", chunked_backward_torch, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 2 · the dq kernel (3 + 2 points)
#
# `dq_t = scale · S_t do_t` is lesson 04's forward with `(q, k, v)` replaced by `(do, v, k)`. One program owns
# one head of one sequence and a block of `BK` columns of `dq`, walks the chunks **in order**, and carries the
# matching block of the state, transposed: `Sᵀ[:, block]` `[BV, BK]` in fp32 (`BV ≥ V`, the whole value head,
# because `dO_c Sᵀ` sums over V). Per chunk: write `dQ_c = scale · (dO_c Sᵀ + (dO_c V_cᵀ ⊙ M) K_c)` for the
# block, then `Sᵀ += V_cᵀ K_c`. The grader launches it on the grid `(⌈K/BK⌉, B·H)`; program `(j, b·H + h)`.
#
# | argument | meaning |
# | --- | --- |
# | `k_ptr, v_ptr, do_ptr, dq_ptr` | `k, dq` `[B, T, H, K]`, `v, do` `[B, T, H, V]`, one dtype (fp32, fp16, bf16) |
# | `T, H, K, V`, `scale` | sizes (`T`, `K`, `V` need not be powers of two) and the fp32 scale |
# | `stride_kb, stride_kt, stride_kh` (`v`; `do` as `stride_o*`; `dq` as `stride_q*`) | element strides of the first three dimensions; the last is unit-stride |
# | `BT, BK, BV` | `tl.constexpr`, powers of two ≥ 16: the chunk, the block of K columns, `BV ≥ V` |
# | `PRECISION` | `tl.constexpr` for `tl.dot(..., input_precision=PRECISION)` |
#
# Mask rows past `T` and columns past `K` and `V` on every load and store: the last chunk is usually short.

# %% nbgrader={"grade": false, "grade_id": "ex2-dq", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def dq_kernel(k_ptr, v_ptr, do_ptr, dq_ptr, T, H, K, V, scale,
              stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
              stride_ob, stride_ot, stride_oh, stride_qb, stride_qt, stride_qh,
              BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, PRECISION: tl.constexpr):
    ### BEGIN SOLUTION
    i_k = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // H
    i_h = i_bh % H
    k_base = k_ptr + i_b * stride_kb + i_h * stride_kh
    v_base = v_ptr + i_b * stride_vb + i_h * stride_vh
    do_base = do_ptr + i_b * stride_ob + i_h * stride_oh
    dq_base = dq_ptr + i_b * stride_qb + i_h * stride_qh
    offs_c = tl.arange(0, BT)
    offs_k = i_k * BK + tl.arange(0, BK)
    offs_v = tl.arange(0, BV)
    causal = offs_c[:, None] >= offs_c[None, :]  # [BT, BT]
    state = tl.zeros((BV, BK), dtype=tl.float32)  # S[:, block]ᵀ
    for t0 in range(0, T, BT):
        offs_t = t0 + offs_c
        mask_k = (offs_t[:, None] < T) & (offs_k[None, :] < K)
        mask_v = (offs_t[:, None] < T) & (offs_v[None, :] < V)
        k = tl.load(k_base + offs_t[:, None] * stride_kt + offs_k[None, :], mask=mask_k, other=0.0)  # [BT, BK]
        v = tl.load(v_base + offs_t[:, None] * stride_vt + offs_v[None, :], mask=mask_v, other=0.0)  # [BT, BV]
        do = tl.load(do_base + offs_t[:, None] * stride_ot + offs_v[None, :], mask=mask_v, other=0.0)  # [BT, BV]
        p = tl.where(causal, tl.dot(do, tl.trans(v), input_precision=PRECISION), 0.0)  # [BT, BT]
        dq = tl.dot(do, state.to(do.dtype), input_precision=PRECISION)  # [BT, BK]
        dq = tl.dot(p.to(k.dtype), k, dq, input_precision=PRECISION)
        tl.store(dq_base + offs_t[:, None] * stride_qt + offs_k[None, :], (dq * scale).to(dq_ptr.dtype.element_ty),
                 mask=mask_k)
        state = tl.dot(tl.trans(v), k, state, input_precision=PRECISION)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "launch-dq", "locked": true, "schema_version": 3, "solution": false}
def strides(x):
    return x.stride(0), x.stride(1), x.stride(2)


def pow2(n):
    return max(16, triton.next_power_of_2(n))


def launch_dq(k, v, do, scale, chunk=16, block_k=None, precision="ieee", num_warps=4):
    B, T, H, K = k.shape
    V = v.shape[-1]
    dq = torch.empty(B, T, H, K, dtype=k.dtype, device=k.device)
    BK = block_k or pow2(K)
    dq_kernel[(triton.cdiv(K, BK), B * H)](k, v, do, dq, T, H, K, V, scale, *strides(k), *strides(v), *strides(do),
                                           *strides(dq), BT=chunk, BK=BK, BV=pow2(V), PRECISION=precision,
                                           num_warps=num_warps)
    return dq


q32, k32, v32, do32 = (x.float() for x in (q64, k64, v64, do64))
try:
    print("dq kernel vs autograd:", assert_close("dq", grads64[0], launch_dq(k32, v32, do32, scale, block_k=16),
                                                 tolerance(torch.float32)))
except AssertionError as e:  # it runs, and a gradient is wrong
    print(f"dq_kernel runs, but is wrong: {e}")
except Exception as e:  # not done yet, or it stopped (an access out of bounds, say)
    print("dq_kernel does not run yet:", describe_error(e))

# %% nbgrader={"grade": true, "grade_id": "ex2-check", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("07_backward.dq", dq_kernel)

# %% nbgrader={"grade": true, "grade_id": "ex2-hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests (other shapes and dtypes, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("07_backward.dq", dq_kernel, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 3 · the dk/dv kernel, walking chunks backwards (4 + 3 points)
#
# One program owns one head of one sequence and carries the whole state gradient `dH` `[BK, BV]` in fp32
# (`BK ≥ K`, `BV ≥ V`), starting at zero after the last chunk. It visits the chunks **from the last to the
# first**; per chunk `c`, with `dH` holding the gradient from the chunks after `c`:
#
# - `dK_c = V_c dHᵀ + scale · (V_c dO_cᵀ ⊙ Mᵀ) Q_c` and `dV_c = K_c dH + scale · (K_c Q_cᵀ ⊙ Mᵀ) dO_c`, stored;
# - then, and only then, `dH += scale · Q_cᵀ dO_c`.
#
# The grid is `(B·H,)`. Arguments: `q_ptr, k_ptr, v_ptr, do_ptr, dk_ptr, dv_ptr`, then `T, H, K, V, scale`, then
# three strides (batch, token, head) for each of `q, k, v, do, dk, dv` in that order (`stride_qb … stride_dvh`),
# then `BT, BK, BV, PRECISION`. The chunks start at `0, BT, 2·BT, …` as in the forward: walk them as
# `t0 = (n − 1 − i) · BT` for `i = 0 … n − 1`, `n = ⌈T/BT⌉`. The first chunk you visit is the short one: mask it.
#
# The package's version (`kernels/linear_attention/chunked_bwd.py`) splits `dH` over programs (two K blocks for
# `dk`, two V blocks for `dv` at `D = 128`), so that the GPU has more programs than heads and each holds a
# `[128, 64]` block in registers; they read the same chunks at the same time, from L2.
#
# The launcher below (given) pipelines two stages, `num_stages=2`, and the check's GPU cases at `K = V = 128` launch
# your kernel the same way: with Triton's default of three, chunks of 64 at `K = V = 128` in bf16 ask for 233,472
# bytes of shared memory, 1 KiB more than the 232,448 a block may have on an H100 or H200, and the launch fails with
# `OutOfResources` (the interpreter has no such limit; lesson 06 shows how to read the figure from the compiler).

# %% nbgrader={"grade": false, "grade_id": "ex3-dkdv", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, dk_ptr, dv_ptr, T, H, K, V, scale,
                stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
                stride_vb, stride_vt, stride_vh, stride_ob, stride_ot, stride_oh,
                stride_dkb, stride_dkt, stride_dkh, stride_dvb, stride_dvt, stride_dvh,
                BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, PRECISION: tl.constexpr):
    ### BEGIN SOLUTION
    i_bh = tl.program_id(0)
    i_b = i_bh // H
    i_h = i_bh % H
    q_base = q_ptr + i_b * stride_qb + i_h * stride_qh
    k_base = k_ptr + i_b * stride_kb + i_h * stride_kh
    v_base = v_ptr + i_b * stride_vb + i_h * stride_vh
    do_base = do_ptr + i_b * stride_ob + i_h * stride_oh
    dk_base = dk_ptr + i_b * stride_dkb + i_h * stride_dkh
    dv_base = dv_ptr + i_b * stride_dvb + i_h * stride_dvh
    offs_c = tl.arange(0, BT)
    offs_k = tl.arange(0, BK)
    offs_v = tl.arange(0, BV)
    later = offs_c[:, None] <= offs_c[None, :]  # [BT, BT]: token s gets gradient from u ≥ s
    dstate = tl.zeros((BK, BV), dtype=tl.float32)  # dH: [K, V]
    n = tl.cdiv(T, BT)
    for i in range(0, n):
        offs_t = (n - 1 - i) * BT + offs_c
        mask_k = (offs_t[:, None] < T) & (offs_k[None, :] < K)
        mask_v = (offs_t[:, None] < T) & (offs_v[None, :] < V)
        q = tl.load(q_base + offs_t[:, None] * stride_qt + offs_k[None, :], mask=mask_k, other=0.0)  # [BT, BK]
        k = tl.load(k_base + offs_t[:, None] * stride_kt + offs_k[None, :], mask=mask_k, other=0.0)  # [BT, BK]
        v = tl.load(v_base + offs_t[:, None] * stride_vt + offs_v[None, :], mask=mask_v, other=0.0)  # [BT, BV]
        do = tl.load(do_base + offs_t[:, None] * stride_ot + offs_v[None, :], mask=mask_v, other=0.0)  # [BT, BV]
        a = tl.where(later, tl.dot(k, tl.trans(q), input_precision=PRECISION), 0.0)  # [BT, BT]
        b = tl.where(later, tl.dot(v, tl.trans(do), input_precision=PRECISION), 0.0)  # [BT, BT]
        dk = tl.dot(b.to(q.dtype), q, input_precision=PRECISION) * scale  # [BT, BK]
        dk = tl.dot(v, tl.trans(dstate).to(v.dtype), dk, input_precision=PRECISION)
        dv = tl.dot(a.to(do.dtype), do, input_precision=PRECISION) * scale  # [BT, BV]
        dv = tl.dot(k, dstate.to(k.dtype), dv, input_precision=PRECISION)
        tl.store(dk_base + offs_t[:, None] * stride_dkt + offs_k[None, :], dk.to(dk_ptr.dtype.element_ty),
                 mask=mask_k)
        tl.store(dv_base + offs_t[:, None] * stride_dvt + offs_v[None, :], dv.to(dv_ptr.dtype.element_ty),
                 mask=mask_v)
        dstate += tl.dot(tl.trans(q), do, input_precision=PRECISION) * scale
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "launch-dkdv", "locked": true, "schema_version": 3, "solution": false}
def launch_dkdv(q, k, v, do, scale, chunk=16, precision="ieee", num_warps=4):
    B, T, H, K = q.shape
    V = v.shape[-1]
    dk = torch.empty(B, T, H, K, dtype=q.dtype, device=q.device)
    dv = torch.empty(B, T, H, V, dtype=q.dtype, device=q.device)
    dkdv_kernel[(B * H,)](q, k, v, do, dk, dv, T, H, K, V, scale, *strides(q), *strides(k), *strides(v),
                          *strides(do), *strides(dk), *strides(dv), BT=chunk, BK=pow2(K), BV=pow2(V),
                          PRECISION=precision, num_warps=num_warps, num_stages=2)
    return dk, dv


try:
    dk32, dv32 = launch_dkdv(q32, k32, v32, do32, scale)
    print("dk kernel vs autograd:", assert_close("dk", grads64[1], dk32, tolerance(torch.float32)))
    print("dv kernel vs autograd:", assert_close("dv", grads64[2], dv32, tolerance(torch.float32)))
except AssertionError as e:  # it runs, and a gradient is wrong
    print(f"dkdv_kernel runs, but is wrong: {e}")
except Exception as e:  # not done yet, or it stopped (an access out of bounds, say)
    print("dkdv_kernel does not run yet:", describe_error(e))

# %% nbgrader={"grade": true, "grade_id": "ex3-check", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("07_backward.dkdv", dkdv_kernel)

# %% nbgrader={"grade": true, "grade_id": "ex3-hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Hidden tests (other shapes and dtypes, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("07_backward.dkdv", dkdv_kernel, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 4 · the autograd.Function (3 + 2 points, and 2 for speed on a GPU)
#
# `torch.autograd.Function` is how a hand-written backward joins autograd: `forward(ctx, …)` computes the output
# and stores on `ctx` what the backward will need; `backward(ctx, do)` returns one gradient per input of
# `forward` (`None` for inputs that take none, such as `scale`). Below is lesson 04's chunked forward
# (`chunked_forward(q, k, v, scale)`). Write `ChunkedLinearAttention`:
#
# - `forward(ctx, q, k, v, scale)`: run `chunked_forward`, save **only** `q, k, v` (`ctx.save_for_backward`) and
#   `scale` (`ctx.scale = scale`), return `o`. The per-chunk states are not saved: the backward rebuilds them
#   on-chip, which costs one more read of k and v and saves `T/C · K · V` fp32 numbers per head;
# - `backward(ctx, do)`: make `do` contiguous (autograd hands it down as it comes: the backward of `o.sum(-1)`
#   gives one value per row, expanded with stride 0 along V, and the kernels assume a unit last stride), call
#   `launch_dq` and `launch_dkdv`, return `dq, dk, dv, None`. Launch them as the forward is launched: its chunk
#   (`pick(cpu=16, gpu=64)`), `precision_for(q)`, a K block of at most 64 for `launch_dq`, and 8 warps on a GPU
#   (`pick(cpu=4, gpu=8)`). The launchers' defaults (chunk 16, 4 warps) suit the interpreter; on a GPU their small
#   tiles run at less than half the speed (lesson 04's forward on an H200: 1.29 ms at chunk 16, 0.55 ms at 64).
#
# `linear_attention(q, k, v, scale)` (given) is what the check calls. It checks the output and the gradients
# against float64 autograd of the recurrence (at a scale of 0.3, and with the `do` of `o.sum(-1)`), that the
# gradient comes from your Function, that the Function saved nothing but the inputs (on `ctx` by any name), and
# that its backward launched your two kernels (exercise 1's torch backward
# gives the same gradients, but it is not what this exercise builds). On a GPU, the last check times your two
# kernels at the table's size (B = 4, H = 16, T = 4096, D = 128, bf16) against the package's two passes, which
# split `dH` over several programs per head: yours must reach 0.3x their speed. The benchmark below puts both
# beside fla's forward + backward.

# %% nbgrader={"grade": false, "grade_id": "forward", "locked": true, "schema_version": 3, "solution": false}
@triton.jit
def forward_kernel(q_ptr, k_ptr, v_ptr, o_ptr, T, H, K, V, scale,
                   stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
                   stride_vb, stride_vt, stride_vh, stride_ob, stride_ot, stride_oh,
                   BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, PRECISION: tl.constexpr):
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // H
    i_h = i_bh % H
    offs_c = tl.arange(0, BT)
    offs_k = tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    causal = offs_c[:, None] >= offs_c[None, :]
    state = tl.zeros((BK, BV), dtype=tl.float32)
    for t0 in range(0, T, BT):
        offs_t = t0 + offs_c
        mask_k = (offs_t[:, None] < T) & (offs_k[None, :] < K)
        mask_v = (offs_t[:, None] < T) & (offs_v[None, :] < V)
        q = tl.load(q_ptr + i_b * stride_qb + i_h * stride_qh + offs_t[:, None] * stride_qt + offs_k[None, :],
                    mask=mask_k, other=0.0)
        k = tl.load(k_ptr + i_b * stride_kb + i_h * stride_kh + offs_t[:, None] * stride_kt + offs_k[None, :],
                    mask=mask_k, other=0.0)
        v = tl.load(v_ptr + i_b * stride_vb + i_h * stride_vh + offs_t[:, None] * stride_vt + offs_v[None, :],
                    mask=mask_v, other=0.0)
        scores = tl.where(causal, tl.dot(q, tl.trans(k), input_precision=PRECISION), 0.0)
        o = tl.dot(q, state.to(q.dtype), input_precision=PRECISION)
        o = tl.dot(scores.to(v.dtype), v, o, input_precision=PRECISION)
        tl.store(o_ptr + i_b * stride_ob + i_h * stride_oh + offs_t[:, None] * stride_ot + offs_v[None, :],
                 (o * scale).to(o_ptr.dtype.element_ty), mask=mask_v)
        state = tl.dot(tl.trans(k), v, state, input_precision=PRECISION)


def chunked_forward(q, k, v, scale):
    B, T, H, K = q.shape
    V = v.shape[-1]
    o = torch.empty(B, T, H, V, dtype=q.dtype, device=q.device)
    BV = min(pow2(V), 64)
    forward_kernel[(triton.cdiv(V, BV), B * H)](q, k, v, o, T, H, K, V, scale, *strides(q), *strides(k),
                                                *strides(v), *strides(o), BT=pick(cpu=16, gpu=64), BK=pow2(K),
                                                BV=BV, PRECISION=precision_for(q))
    return o


def precision_for(x):
    return "ieee" if x.dtype == torch.float32 or not ON_GPU else "tf32"


# %% nbgrader={"grade": false, "grade_id": "ex4-function", "locked": false, "schema_version": 3, "solution": true}
class ChunkedLinearAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale):
        ### BEGIN SOLUTION
        o = chunked_forward(q, k, v, scale)
        ctx.save_for_backward(q, k, v)
        ctx.scale = scale
        return o
        ### END SOLUTION

    @staticmethod
    def backward(ctx, do):
        ### BEGIN SOLUTION
        q, k, v = ctx.saved_tensors
        do = do.contiguous()
        chunk, warps = pick(cpu=16, gpu=64), pick(cpu=4, gpu=8)
        dq = launch_dq(k, v, do, ctx.scale, chunk=chunk, block_k=min(pow2(q.shape[-1]), 64),
                       precision=precision_for(q), num_warps=warps)
        dk, dv = launch_dkdv(q, k, v, do, ctx.scale, chunk=chunk, precision=precision_for(q), num_warps=warps)
        return dq, dk, dv, None
        ### END SOLUTION


def linear_attention(q, k, v, scale):
    return ChunkedLinearAttention.apply(q, k, v, scale)


# %% nbgrader={"grade": false, "grade_id": "ex4-try", "locked": true, "schema_version": 3, "solution": false}
try:
    leaves = [x.float().clone().requires_grad_() for x in (q64, k64, v64)]
    o32 = linear_attention(*leaves, scale)
    o32.backward(do32)
    for name, auto, x in zip(("dq", "dk", "dv"), grads64, leaves):
        print(f"{name} through your Function:", assert_close(name, auto, x.grad, tolerance(torch.float32)))
except AssertionError as e:  # it runs, and a gradient is wrong
    print(f"your Function runs, but is wrong: {e}")
except Exception as e:  # not done yet, or autograd refuses it (a gradient too few, say)
    print("the Function does not run yet:", describe_error(e))

# %% nbgrader={"grade": true, "grade_id": "ex4-check", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("07_backward.autograd", linear_attention)

# %% nbgrader={"grade": true, "grade_id": "ex4-hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests (other shapes and dtypes, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("07_backward.autograd", linear_attention, hidden=True)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex4-speed", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("07_backward.backward_speed", dq_kernel, dkdv_kernel)

# %% [markdown] nbgrader={"grade": false, "grade_id": "widget-text", "locked": true, "schema_version": 3, "solution": false}
# ## Look at it: the two sweeps
#
# The top row is the dq pass: the state `S` flows left to right, the program holds one chunk at each step. The
# bottom row is the dk/dv pass at the same step: `dH` flows right to left, starting after the last (short) chunk.
# The bars are the norms of the state each program carries into its chunk; the right panel shows, for the chunk
# held, which (output, input) pairs of the causal matrix reach it through the carried state and which through
# the masked intra-chunk product. The caption checks the chunked gradients against autograd.

# %% nbgrader={"grade": false, "grade_id": "widget", "locked": true, "schema_version": 3, "solution": false} tags=["widget"]
from kernels.viz import backward_sweeps

backward_sweeps(T=100, K=8, V=8, chunk=16)

# %% [markdown] nbgrader={"grade": false, "grade_id": "bench-text", "locked": true, "schema_version": 3, "solution": false}
# ## Benchmark: forward + backward
#
# `python -m kernels.bench linear_attention --set backward` times a training step's attention, forward and
# backward, for the package's differentiable `chunk_linear_attn`, fla's when it is installed, eager torch (its
# autograd keeps every chunk state), and **yours** (`linear_attention` above), each checked against float64
# autograd first. Its second table reports the memory autograd saves for the backward beyond the step's inputs
# and outputs ("saved", on any device) and, on a GPU, what stays allocated between forward and backward ("held")
# and the backward's peak, as fractions of q, k, v: nothing saved or held for the package's, nor for yours if your
# Function saves only its inputs (in the interpreter, the fp32 copies of bf16 inputs made below count as saved).
# On a GPU this cell runs T = 4k and 16k; in the interpreter one small row, whose times measure the interpreter.

# %% nbgrader={"grade": false, "grade_id": "bench", "locked": true, "schema_version": 3, "solution": false}
from kernels.bench import Version, run
from kernels.linear_attention.bench_backward import fwd_bwd


def yours(q, k, v, scale, initial_state=None, output_final_state=False, cu_seqlens=None):
    dtype = q.dtype
    if not ON_GPU and dtype == torch.bfloat16:  # the interpreter's bf16 tl.dot is wrong: compute in fp32
        q, k, v = q.float(), k.float(), v.float()
    return linear_attention(q, k, v, scale).to(dtype), None


run_yours, held_yours = fwd_bwd(yours)
extra = []
try:
    run_yours(q32, k32, v32, do32, scale)
    extra.append(Version("yours", run_yours, output=lambda g: torch.cat([x.flatten().float() for x in g]),
                         skip=lambda p: "yours: no states, no packing" if p.params["varlen"] or p.params["state"]
                         else None, extras=held_yours))
except Exception as e:
    print(f"your Function is left out of the benchmark ({type(e).__name__}: finish exercise 4)")
labels = pick(cpu=["T50"], gpu=["T4k", "T16k"])
only = pick(cpu=["chunk_linear_attn fwd+bwd", "yours"], gpu=None)
results = run("linear_attention", problem_set="backward", quick=True, extra=extra, labels=labels, only=only,
              out=ROOT / "artifacts" / "07_backward")

# %% [markdown] nbgrader={"grade": false, "grade_id": "no-gpu", "locked": true, "schema_version": 3, "solution": false}
# > **Without a GPU.** The kernels ran in Triton's interpreter. The checks are the same as on a GPU (odd `T`,
# > `K`, `V`, strided views, NaN-poisoned outputs, float64 references), except that bf16 cases run on a GPU only
# > and the speed check reads *not graded*; the benchmark's times measure the interpreter.

# %% [markdown] nbgrader={"grade": false, "grade_id": "recap", "locked": true, "schema_version": 3, "solution": false}
# ## Recap
#
# - The gradients of linear attention are linear attention again: `dq` is the forward with `(do, v, k)`; `dk` and
#   `dv` are the forward run backwards in time with a state gradient `dH = scale · Σ_{u≥t} q_u do_uᵀ`.
# - In chunks: the intra-chunk mask is transposed (`Mᵀ`), `dH` is used for a chunk before the chunk is added to
#   it, and `scale` enters once.
# - Two passes that keep their state on-chip read q, k, v, do and write dq, dk, dv with nothing in between; a
#   `torch.autograd.Function` saving only its inputs holds no extra memory from forward to backward.
# - The package's `chunk_linear_attn` does the same (`kernels/linear_attention/chunked_bwd.py`, `autograd.py`),
#   with the dk/dv state split over several programs per head so that the GPU has enough of them.

# %% [markdown] nbgrader={"grade": false, "grade_id": "what_next", "locked": true, "schema_version": 3, "solution": false}
# ## What next
#
# This is the workbook's last lesson: from counting bytes through the memory hierarchy, to tiles in SRAM, to a
# fused chunked kernel near the HBM floor, exported and launched without Python, profiled, and differentiated.
#
# - **Check your score** (below, or `make score` for every lesson) and go back to any exercise short of its
#   points; on a GPU, the speed points are graded too.
# - **Add what working models add.** Lessons 02 and 04 named the normaliser and the decays and gates of RetNet,
#   GLA and Mamba-2: add a per-step scalar decay `γ` to your forward and backward kernels (the masks and the state
#   carries change, the bytes do not) and test both against float64 autograd of a recurrence, as every kernel here
#   is tested.
# - **Profile your backward** with lesson 06's tools: how close do your two passes come to the floor of reading
#   q, k, v, do and writing dq, dk, dv, and what does `ncu` say holds them back?
# - **Read a production kernel.** `flash-linear-attention` (`fla/ops/`) has one folder per operator with a naive
#   oracle, a chunked and a fused-recurrent kernel, forward and backward: you now know what each of them is doing
#   and why.

# %% [markdown] nbgrader={"grade": false, "grade_id": "score_md", "locked": true, "schema_version": 3, "solution": false}
# ## Your score
#
# The cell below runs every check of this lesson on your notebook as it stands, the hidden ones included (it
# reuses the outcome of each check you already ran on the same objects), and prints your points per exercise and
# in total. The speed check is graded on a GPU only; without one its points are listed as needing a
# GPU. From a shell, `make score L=07` does the same for your saved notebook in `my-work/`.

# %% nbgrader={"grade": false, "grade_id": "score", "locked": true, "schema_version": 3, "solution": false}
from grader.score import score_here

your_score = score_here("07_backward", globals())
