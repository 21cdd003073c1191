"""Compile the backward pass's two kernels for sm_90 without a GPU and read what ptxas made of them.

For each launch (dtype, head size, chunk and block sizes, warps, stages) that ``chunked_bwd.chunked_backward``
would make at B=4 H=16 T=16k (or the one a variant names), report registers, spill bytes, shared memory, how many
programs fit on an SM (by registers and by shared memory, of 65536 registers and 227 KiB), and counts from the
SASS: HGMMA (wgmma), HMMA (mma.sync), global loads and stores and their async copies, local-memory traffic.
``python scripts/sm90_backward.py [--only NAME ...] [--json PATH]``; PERF.md's backward notes quote it.
"""

from __future__ import annotations

import pathlib
import re
import sys
from collections.abc import Iterator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from sm90_report import count, main  # noqa: E402

from kernels.compile import TRITON_TYPES  # noqa: E402
from kernels.linear_attention import chunked_bwd  # noqa: E402
from kernels.profile import compiler  # noqa: E402

_REGS_PER_SM, _SMEM_PER_SM = 65536, 227 * 1024
_WAIT = re.compile(r"ttg\.async_wait .*?\{num = (\d+)")


def _blocks(D: int, dtype: torch.dtype) -> tuple:
    """What ``chunked_backward`` picks on a GPU (its ``_blocks`` answers the interpreter's sizes here)."""
    saved = chunked_bwd.INTERPRET
    chunked_bwd.INTERPRET = False
    try:
        return chunked_bwd._blocks(D, D, dtype)
    finally:
        chunked_bwd.INTERPRET = saved


def _jobs(dtype, D, *, warps=None, stages_dq=None, stages_dkdv=None, BT=None, block=None, B=4, H=16,
          T=16384) -> dict:
    bt, BK, BV, BKA, BVA, w = _blocks(D, dtype)
    if block is not None:  # chunked_backward's ``block``
        BK, BV = min(BKA, block), min(BVA, block)
    BT, warps = BT or bt, warps or w
    stages_dq = stages_dq or (2 if warps == 8 else 3)
    stages_dkdv = stages_dkdv or 2
    t = {"ptr": TRITON_TYPES[dtype], "aligned": True}
    strides = [T * H * D, H * D, D]
    precision = "tf32" if dtype == torch.float32 else None
    upcast = False
    dq = dict(kernel=chunked_bwd._chunked_dq_kernel,
              args=[t, t, t, t, None, None, T, H, D ** -0.5] + strides * 4,
              K=D, V=D, BT=BT, BK=BK, BVA=BVA, USE_H0=False, IS_VARLEN=False, UPCAST=upcast, PRECISION=precision,
              num_warps=warps, num_stages=stages_dq)
    nk = -(-D // BK)
    dkdv = dict(kernel=chunked_bwd._chunked_dkdv_kernel,
                args=[t, t, t, t, t, t, None, None, None, T, H, D ** -0.5] + strides * 6,
                K=D, V=D, BT=BT, BK=BK, BV=BV, BKA=BKA, BVA=BVA, NK=nk, SHARED=BK == BV, USE_DHT=False,
                STORE_DH0=False, IS_VARLEN=False, UPCAST=upcast, PRECISION=precision,
                num_warps=warps, num_stages=stages_dkdv)
    programs = {"dq": nk * B * H, "dkdv": (nk + -(-D // BV)) * B * H}
    return {"dq": dq, "dkdv": dkdv, "programs": programs, "BT": BT, "block": BK}


def cases() -> dict[str, dict]:
    out = {}
    for dtype, D in ((torch.bfloat16, 128), (torch.float16, 128), (torch.float32, 128), (torch.bfloat16, 64),
                     (torch.bfloat16, 256)):
        out[f"{TRITON_TYPES[dtype]} D{D}"] = _jobs(dtype, D)
    out["bf16 D128 w8"] = _jobs(torch.bfloat16, 128, warps=8, stages_dq=2, stages_dkdv=2)
    out["bf16 D128 dq s2"] = _jobs(torch.bfloat16, 128, stages_dq=2)
    out["bf16 D128 dkdv s3"] = _jobs(torch.bfloat16, 128, stages_dkdv=3)
    out["bf16 D128 BT128 s1"] = _jobs(torch.bfloat16, 128, BT=128, stages_dq=1, stages_dkdv=1, warps=8)
    out["bf16 D128 block128 w8 s3"] = _jobs(torch.bfloat16, 128, block=128, warps=8, stages_dq=3, stages_dkdv=3)
    return out


def report(c: compiler.Compiled, programs: int) -> dict:
    sass = c.stages.get("sass", "")
    by_regs = _REGS_PER_SM // max(1, (c.registers or 255) * c.threads)
    by_smem = _SMEM_PER_SM // max(1, c.shared)
    return {
        "registers": c.registers, "spills": c.spills, "shared_bytes": c.shared, "warps": c.num_warps,
        "stages": c.num_stages, "programs": programs, "per_sm": min(by_regs, by_smem),
        "per_sm_by": {"registers": by_regs, "shared": by_smem},
        "hgmma": count(r"\bHGMMA\.", sass), "hmma": count(r"\bHMMA\.", sass),
        "global_loads": count(r"\bLDG\.", sass), "async_copies": count(r"\bLDGSTS\.", sass),
        "tma": count(r"\bUTMALDG\b", sass), "global_stores": count(r"\bSTG\.", sass),
        "local_ld_st": count(r"\b(LDL|STL)\b", sass),
        # copy groups left in flight where each step waits for its tiles (0: none, the loads do not overlap)
        "wait_in_flight": [int(n) for n in _WAIT.findall(c.stages.get("ttgir", ""))][:1],
    }


def table(wanted) -> Iterator[tuple[str, dict, str]]:
    """Both kernels of every wanted case, compiled together; a row and a printed line each."""
    chosen = {n: c for n, c in cases().items() if wanted(n)}
    jobs = [c[p] for c in chosen.values() for p in ("dq", "dkdv")]
    compiled = iter(compiler.compile_many(jobs))
    for name, c in chosen.items():
        for p in ("dq", "dkdv"):
            r = report(next(compiled), c["programs"][p])
            fit = r["per_sm"]
            waves = -(-r["programs"] // (132 * max(fit, 1)))
            yield f"{name} {p}", r, (
                f"{name + ' ' + p:26s} BT{c['BT']} block{c['block']} w{r['warps']} s{r['stages']}: "
                f"{r['registers']} regs, spill {r['spills']} B, smem {r['shared_bytes'] // 1024} KiB, "
                f"{fit}/SM ({r['programs']} programs, {waves} wave{'s' if waves > 1 else ''}), "
                f"HGMMA {r['hgmma']}, HMMA {r['hmma']}, LDG {r['global_loads']}, LDGSTS {r['async_copies']}, "
                f"STG {r['global_stores']}, LDL/STL {r['local_ld_st']}, copies in flight at the wait "
                f"{r['wait_in_flight']}")


if __name__ == "__main__":
    main(__doc__, table)
