"""The normaliser's sums as tensor-core products, shared by the fused kernel (``fused.py``) and the states output
kernel (``states.py``): ``Σ k`` as ``kᵀ · e₀``, and ``q · z`` with the fp32 key sum split into two operands of the
inputs' type (``dispatch.NORM_MMA_FORMS`` says which form a launch takes, and which were wrong on a GPU)."""

from __future__ import annotations

import triton
import triton.language as tl

__all__: list[str] = []


@triton.jit
def _key_sum_mma(kk, PRECISION: tl.constexpr):
    """``Σ_t k_t`` [BK] of one chunk ``kk`` [BT, BK] as the product ``kᵀ · e₀`` on the tensor cores: a fresh
    fp32 accumulator every chunk, reduced to a vector at once (exact sums of bf16 and fp16 keys)."""
    ZW: tl.constexpr = 16  # the narrowest operand an MMA takes
    e0 = tl.where(tl.arange(0, ZW) == 0, 1.0, 0.0)
    ones = (tl.zeros([kk.shape[0], ZW], dtype=tl.float32) + e0[None, :]).to(kk.dtype)  # [BT, ZW]
    return tl.sum(tl.dot(tl.trans(kk), ones, input_precision=PRECISION), 1)


@triton.jit
def _split_key_sum(zs, DTYPE: tl.constexpr):
    """The fp32 vector ``z`` as ``hi + lo`` with ``hi`` exact in the operands' type ``DTYPE`` (about twice the
    type's significant bits of z in the pair), and the power of two the pair must be multiplied by afterwards:
    fp16 scales z first, so that a large key sum (past fp16's 65504) stays in range."""
    back = 1.0
    if DTYPE == tl.float32:
        hi = (zs.to(tl.uint32, bitcast=True) & 0xFFFFE000).to(tl.float32, bitcast=True)  # TF32's 10-bit mantissa
    elif DTYPE == tl.float16:
        # 2^(14 - exponent of max |z|): the scaled z lies in (-2^15, 2^15); back is its exact inverse
        top = (tl.max(tl.abs(zs), 0).to(tl.uint32, bitcast=True) >> 23) & 0xFF
        sb = tl.minimum(268 - top, 254)
        zs = zs * (sb << 23).to(tl.float32, bitcast=True)
        back = ((254 - sb) << 23).to(tl.float32, bitcast=True)
        hi = zs.to(tl.float16).to(tl.float32)
    else:
        hi = zs.to(DTYPE).to(tl.float32)
    return hi, zs - hi, back


@triton.jit
def _query_key_sum_mma(qq, zs, PRECISION: tl.constexpr, ZW: tl.constexpr):
    """``q_t · z`` for every row of ``qq`` [BT, BK] as one product ``q · [z_hi | z_lo | 0 ...]`` on the tensor
    cores, the B operand [BK, ZW] written from registers: ZW = 16 (32-byte rows), 32 (64-byte rows) or 64
    (128-byte rows, the shape of the state product ``q · S``)."""
    hi, lo, back = _split_key_sum(zs, qq.dtype)
    col = tl.arange(0, ZW)[None, :]
    zb = tl.where(col == 0, hi[:, None], tl.where(col == 1, lo[:, None], 0.0)).to(qq.dtype)  # [BK, ZW]
    return tl.sum(tl.dot(qq, zb, input_precision=PRECISION), 1) * back  # [BT]


@triton.jit
def _query_key_sum_mma_t(qq, zs, PRECISION: tl.constexpr):
    """``q_t · z`` as the transposed product ``[z_hi; z_lo; 0 ...] · qᵀ`` [64, BT]: z is the register operand
    (A, as the scores are in ``scores · v``) and q the shared-memory one, read as ``kᵀ`` is in ``q · kᵀ``."""
    ZM: tl.constexpr = 64  # one warpgroup's M
    hi, lo, back = _split_key_sum(zs, qq.dtype)
    row = tl.arange(0, ZM)[:, None]
    za = tl.where(row == 0, hi[None, :], tl.where(row == 1, lo[None, :], 0.0)).to(qq.dtype)  # [ZM, BK]
    return tl.sum(tl.dot(za, tl.trans(qq), input_precision=PRECISION), 0) * back  # [BT]
