"""Where 3xTF32's registers go: the fp32 chunk loop compiled for sm_90 with three ways of splitting its products.

A probe of one question (PERF.md, "3xTF32 by hand, offline"): does the spill of the fused kernel's "highest"
launches come from how Triton's ``tf32x3`` splits each product, or from the loop itself? One causal chunk loop
(scores, ``q·S``, ``scores·v``, ``S += kᵀv``, fp32 everywhere, no masks) in three forms, compiled for every tile:
``triton``: every product ``tl.dot(..., input_precision="tf32x3")``; ``hand``: each operand split once into a
TF32-exact high part and the remainder, three TF32 products (``lo·hi + hi·lo + hi·hi``); ``halves``: as ``hand``
with K = 128 walked as two halves of 64, each half's products done before the next half is loaded; and ``tf32``,
one TF32 product each (what "high" runs), for comparison.
``python scripts/sm90_fp32_split.py [--only NAME ...] [--json PATH]``; registers / spill-store bytes / shared KiB
/ HGMMA a row.
"""

from __future__ import annotations

import itertools
import pathlib
import sys
from collections.abc import Iterator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from kernels.compile import enter_compile_mode, specialise  # noqa: E402

enter_compile_mode()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from sm90_linear_attention import _report  # noqa: E402
from sm90_report import main  # noqa: E402


@triton.jit
def _tf32_parts(x):
    """``x`` as ``hi + lo``: ``hi`` keeps TF32's 10-bit mantissa (exact in a TF32 product), ``lo`` the rest."""
    hi = (x.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)
    return hi, x - hi


@triton.jit
def _bf16_parts(x):
    """``x`` as three bf16 parts ``x1 + x2 + x3`` (each the bf16 rounding of what the ones before it left): 24 of
    fp32's significant bits."""
    x1 = x.to(tl.bfloat16)
    r = x - x1.to(tl.float32)
    x2 = r.to(tl.bfloat16)
    x3 = (r - x2.to(tl.float32)).to(tl.bfloat16)
    return x1, x2, x3


@triton.jit
def _dot6(a, b, acc):
    """``acc + a·b`` from bf16 parts: the six products whose parts' orders sum to at most 4, smallest first."""
    a1, a2, a3 = _bf16_parts(a)
    b1, b2, b3 = _bf16_parts(b)
    acc = tl.dot(a1, b3, acc)
    acc = tl.dot(a3, b1, acc)
    acc = tl.dot(a2, b2, acc)
    acc = tl.dot(a1, b2, acc)
    acc = tl.dot(a2, b1, acc)
    return tl.dot(a1, b1, acc)


@triton.jit
def _dot3_parts(ah, al, bh, bl, acc):
    """``acc + a·b`` from parts split before the product (``a = ah + al``, ``b = bh + bl``, each high part
    TF32-exact): three TF32 products, the small ones first."""
    acc = tl.dot(al, bh, acc, input_precision="tf32")
    acc = tl.dot(ah, bl, acc, input_precision="tf32")
    return tl.dot(ah, bh, acc, input_precision="tf32")


@triton.jit
def _dot3(a, b, acc, HAND: tl.constexpr):
    """``acc + a·b`` to about fp32's precision: three TF32 products of split operands (HAND 1: split here, 0: by
    Triton), one TF32 product (HAND 2: the precision "high" asks for, for comparison), or six bf16 products of
    three-part splits (HAND 3)."""
    if HAND == 3:
        acc = _dot6(a, b, acc)
    elif HAND == 2:
        acc = tl.dot(a, b, acc, input_precision="tf32")
    elif HAND:
        ah, al = _tf32_parts(a)
        bh, bl = _tf32_parts(b)
        acc = _dot3_parts(ah, al, bh, bl, acc)
    else:
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
    return acc


@triton.jit
def _loop(q_ptr, k_ptr, v_ptr, o_ptr, T, stride_k, stride_v, K: tl.constexpr, BV: tl.constexpr, BT: tl.constexpr,
          HAND: tl.constexpr):
    offs_t = tl.arange(0, BT)
    offs_k = tl.arange(0, K)
    offs_v = tl.program_id(0) * BV + tl.arange(0, BV)
    state = tl.zeros([K, BV], dtype=tl.float32)
    causal = offs_t[:, None] >= offs_t[None, :]
    for s in range(0, T, BT):
        rows = (s + offs_t).to(tl.int64)
        qq = tl.load(q_ptr + rows[:, None] * stride_k + offs_k[None, :])
        kk = tl.load(k_ptr + rows[:, None] * stride_k + offs_k[None, :])
        vv = tl.load(v_ptr + rows[:, None] * stride_v + offs_v[None, :])
        scores = tl.where(causal, _dot3(qq, tl.trans(kk), tl.zeros([BT, BT], dtype=tl.float32), HAND), 0.0)
        out = _dot3(qq, state, tl.zeros([BT, BV], dtype=tl.float32), HAND)
        out = _dot3(scores, vv, out, HAND)
        tl.store(o_ptr + rows[:, None] * stride_v + offs_v[None, :], out)
        state = _dot3(tl.trans(kk), vv, state, HAND)


@triton.jit
def _loop_halves(q_ptr, k_ptr, v_ptr, o_ptr, T, stride_k, stride_v, K: tl.constexpr, BV: tl.constexpr,
                 BT: tl.constexpr, HAND: tl.constexpr):
    KH: tl.constexpr = K // 2
    offs_t = tl.arange(0, BT)
    offs_k = tl.arange(0, KH)
    offs_v = tl.program_id(0) * BV + tl.arange(0, BV)
    s_a = tl.zeros([KH, BV], dtype=tl.float32)
    s_b = tl.zeros([KH, BV], dtype=tl.float32)
    causal = offs_t[:, None] >= offs_t[None, :]
    for s in range(0, T, BT):
        rows = (s + offs_t).to(tl.int64)
        vv = tl.load(v_ptr + rows[:, None] * stride_v + offs_v[None, :])
        q_a = tl.load(q_ptr + rows[:, None] * stride_k + offs_k[None, :])
        k_a = tl.load(k_ptr + rows[:, None] * stride_k + offs_k[None, :])
        scores = _dot3(q_a, tl.trans(k_a), tl.zeros([BT, BT], dtype=tl.float32), HAND)
        out = _dot3(q_a, s_a, tl.zeros([BT, BV], dtype=tl.float32), HAND)
        s_a = _dot3(tl.trans(k_a), vv, s_a, HAND)
        q_b = tl.load(q_ptr + KH + rows[:, None] * stride_k + offs_k[None, :])
        k_b = tl.load(k_ptr + KH + rows[:, None] * stride_k + offs_k[None, :])
        scores = _dot3(q_b, tl.trans(k_b), scores, HAND)
        out = _dot3(q_b, s_b, out, HAND)
        s_b = _dot3(tl.trans(k_b), vv, s_b, HAND)
        out = _dot3(tl.where(causal, scores, 0.0), vv, out, HAND)
        tl.store(o_ptr + rows[:, None] * stride_v + offs_v[None, :], out)


@triton.jit
def _loop_presplit(q_ptr, k_ptr, v_ptr, o_ptr, T, stride_k, stride_v, K: tl.constexpr, BV: tl.constexpr,
                   BT: tl.constexpr, HAND: tl.constexpr):
    """As ``_loop`` at 3xTF32 with q, k and v split into their parts in memory by a pass before (high parts at
    the pointers, the rest ``T`` rows further on): the products' memory operands arrive split, as a TF32
    product's do, and only the register-held ones (the scores, the state) are split in the loop; HAND 4: k and v
    so, q split in the loop."""
    offs_t = tl.arange(0, BT)
    offs_k = tl.arange(0, K)
    offs_v = tl.program_id(0) * BV + tl.arange(0, BV)
    state = tl.zeros([K, BV], dtype=tl.float32)
    causal = offs_t[:, None] >= offs_t[None, :]
    lo_k = T * stride_k
    lo_v = T * stride_v
    for s in range(0, T, BT):
        rows = (s + offs_t).to(tl.int64)
        qa = q_ptr + rows[:, None] * stride_k + offs_k[None, :]
        ka = k_ptr + rows[:, None] * stride_k + offs_k[None, :]
        va = v_ptr + rows[:, None] * stride_v + offs_v[None, :]
        if HAND == 4:  # q split here: an A operand, which wgmma may read from registers
            qh, ql = _tf32_parts(tl.load(qa))
        else:
            qh, ql = tl.load(qa), tl.load(qa + lo_k)
        kh, kl = tl.load(ka), tl.load(ka + lo_k)
        vh, vl = tl.load(va), tl.load(va + lo_v)
        scores = _dot3_parts(qh, ql, tl.trans(kh), tl.trans(kl), tl.zeros([BT, BT], dtype=tl.float32))
        scores = tl.where(causal, scores, 0.0)
        sh, sl = _tf32_parts(state)
        out = _dot3_parts(qh, ql, sh, sl, tl.zeros([BT, BV], dtype=tl.float32))
        ph, pl = _tf32_parts(scores)
        out = _dot3_parts(ph, pl, vh, vl, out)
        tl.store(o_ptr + rows[:, None] * stride_v + offs_v[None, :], out)
        state = _dot3_parts(tl.trans(kh), tl.trans(kl), vh, vl, state)


FORMS = {"tf32": (_loop, 2), "triton": (_loop, 0), "hand": (_loop, 1), "halves": (_loop_halves, 1),
         "bf16x6": (_loop, 3), "presplit": (_loop_presplit, 1),
         "presplit-kv": (_loop_presplit, 4)}


def table(wanted) -> Iterator[tuple[str, dict, str]]:
    for (form, (kernel, hand)), bv, warps, stages in itertools.product(FORMS.items(), (16, 32, 64), (4, 8), (1, 2)):
        name = f"{form} K128 BT64 BV{bv} w{warps} s{stages}"
        if not wanted(name):
            continue
        values = dict(K=128, BV=bv, BT=64, HAND=hand)
        for p in kernel.params:
            if not p.is_constexpr:
                values[p.name] = ({"ptr": "fp32", "aligned": True} if p.name.endswith("_ptr")
                                  else {"type": "i32", "div16": True})
        r = _report(kernel, *specialise(kernel, values, specialize=True), dict(num_warps=warps, num_stages=stages))
        yield name, r, (f"{name}: {r['registers']} registers / {r['spill_stores']} spill bytes / "
                        f"{r['shared_bytes'] // 1024} KiB / {r['hgmma']} HGMMA")


if __name__ == "__main__":
    main(__doc__, table)
