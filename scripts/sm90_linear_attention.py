"""Compile the fused linear-attention kernel for sm_90 on a machine without a GPU and read what ptxas made of it.

For each launch (dtype, head sizes, tiles, which states and the normaliser), compile the exact specialisation
the wrapper would launch, then report registers, spill bytes, shared memory, ptxas warnings (C7515: wgmma
serialised) and counts from the SASS: HGMMA (and their operand types), HMMA (mma.sync), FFMA, local-memory
loads/stores. ``python scripts/sm90_linear_attention.py [--only NAME ...] [--json PATH]``.
"""

from __future__ import annotations

import dataclasses
import itertools
import pathlib
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from kernels.compile import TRITON_TYPES, compile_for, enter_compile_mode, specialise  # noqa: E402

enter_compile_mode()  # the kernels imported below are compiled-mode functions

import torch  # noqa: E402
import triton  # noqa: E402
from sm90_report import count, main  # noqa: E402

from kernels.linear_attention.dispatch import (  # noqa: E402
    CANDIDATES,
    CHAINED,
    NORM_MMA_FORMS,
    ONE_PASS,
    PACKED_ONE_PASS,
    change_of,
)
from kernels.linear_attention.fused import Launch, _fused_linear_attention_kernel  # noqa: E402
from kernels.linear_attention.states import (  # noqa: E402
    STATE_STAGES,
    STATE_WARPS,
    TILE,
    _states_kernel,
    _states_output_kernel,
    loop_above,
)

_BIN = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def _case(dtype, K, V, launch: Launch, *, normalize=False, h0=False, ht=False, z0=False, den=False, varlen=False,
          tma=False, tile=TILE, state_warps=STATE_WARPS, state_stages=STATE_STAGES):
    return dict(dtype=dtype, K=K, V=V, launch=launch, normalize=normalize, h0=h0, ht=ht, z0=z0, den=den,
                varlen=varlen, tma=tma, tile=tile, state_warps=state_warps, state_stages=state_stages)


def states_cases() -> dict[str, dict]:
    """``states.py``'s two kernels at bf16 K = V = 256 (``Launch.states``): the candidate's launch and the tiles
    around it (a stored state every 64 or 128 tokens, output V blocks of 64 or 128, warps, stages)."""
    out = {}
    bf16 = torch.bfloat16
    for bt, states, bv, warps, stages in ((64, 2, 64, 8, 2), (64, 2, 64, 8, 3), (64, 2, 64, 4, 2),
                                          (64, 2, 128, 8, 2), (64, 1, 64, 4, 3), (64, 1, 128, 8, 2),
                                          (64, 1, 64, 8, 3), (64, 2, 256, 8, 1)):
        lo = Launch(None, bt, bv, warps, stages, precision="tf32", states=states)
        name = f"states bf16 K256 V256 S{bt * states} BV{bv} w{warps} s{stages}"
        out[name] = _case(bf16, 256, 256, lo)
        out[f"{name} norm"] = _case(bf16, 256, 256, lo, normalize=True)
        out[f"{name} norm h0 ht"] = _case(bf16, 256, 256, lo, normalize=True, h0=True, ht=True, z0=True, den=True)
    for warps, stages in ((4, 2), (4, 4), (8, 3)):
        lo = Launch(None, 64, 64, 8, 2, precision="tf32", states=2)
        out[f"states bf16 K256 V256 S128 states-kernel w{warps} s{stages}"] = _case(
            bf16, 256, 256, lo, normalize=True, state_warps=warps, state_stages=stages)
    # the two candidates' normalising forms: q · z as the wide product (d256-states), on the CUDA cores unpipelined;
    # and the wide form at the launches PERF.md names next (a state every 64 tokens, output V blocks of 128)
    for form, states, bv, stages in (("wide", 2, 64, 2), ("", 2, 64, 1), ("wide", 1, 64, 3), ("wide", 2, 128, 2),
                                     ("wide", 1, 128, 2)):
        lo = Launch(None, 64, bv, 8, stages, precision="tf32", states=states, norm_mma=form)
        name = f"states bf16 K256 V256 S{64 * states} BV{bv} w8 s{stages} qz-{form or 'cuda'}"
        out[f"{name} norm"] = _case(bf16, 256, 256, lo, normalize=True)
        out[f"{name} norm h0 ht"] = _case(bf16, 256, 256, lo, normalize=True, h0=True, ht=True, z0=True, den=True)
    lo = Launch(None, 64, 64, 8, 2, precision="tf32", states=2)
    out["states bf16 K256 V256 S128 tile128 norm"] = _case(bf16, 256, 256, lo, normalize=True, tile=128)
    return out


def cases() -> dict[str, dict]:
    """Every launch in the dispatch tables, plain, normalising, and normalising with every state in and out; the
    normalising ones also with the normaliser's sums on the tensor cores (``mma``)."""
    out = {}
    for table, tag in ((ONE_PASS, "one"), (CHAINED, "chain")):
        for (bk, kind), lo in table.items():
            dtype = torch.bfloat16 if kind == "16" else torch.float32
            lo = Launch(**{**lo.__dict__, "precision": "tf32" if kind == "16" else kind})
            name = f"{tag} {'bf16' if kind == '16' else 'fp32-' + kind} K{bk} V{bk}"
            if tag == "one":
                out[name] = _case(dtype, bk, bk, lo)
            mma = Launch(**{**lo.__dict__, "norm_mma": "both"})
            out[f"{name} norm"] = _case(dtype, bk, bk, lo, normalize=True)
            out[f"{name} norm mma"] = _case(dtype, bk, bk, mma, normalize=True)
            if tag == "one":
                out[f"{name} norm h0 ht"] = _case(dtype, bk, bk, lo, normalize=True, h0=True, ht=True, z0=True)
                out[f"{name} norm mma h0 ht"] = _case(dtype, bk, bk, mma, normalize=True, h0=True, ht=True, z0=True)
            for cand, changes in CANDIDATES.items():  # the launch changes not yet the default
                if (bk, kind) in changes and "states" not in changes[(bk, kind)]:  # those: states_cases()
                    tried = Launch(**{**lo.__dict__, **change_of(cand, (bk, kind))})
                    v = min(bk, changes[(bk, kind)].get("max_V", bk))  # a change for narrower V: at its widest
                    label = f"{name[:name.rindex(' V')]} V{v}"
                    if tag == "one":
                        out[f"{label} try-{cand}"] = _case(dtype, bk, v, tried)
                    out[f"{label} norm try-{cand}"] = _case(dtype, bk, v, tried, normalize=True)
                    out[f"{label} norm h0 ht try-{cand}"] = _case(dtype, bk, v, tried, normalize=True, h0=True,
                                                                  ht=True, z0=True)
    # packed sequences' own launches where they differ (the keys whose default runs the states kernels)
    for (bk, kind), lo in PACKED_ONE_PASS.items():
        if lo == ONE_PASS[(bk, kind)]:
            continue
        dtype = torch.bfloat16 if kind == "16" else torch.float32
        lo = Launch(**{**lo.__dict__, "precision": "tf32" if kind == "16" else kind})
        name = f"packed {'bf16' if kind == '16' else 'fp32-' + kind} K{bk} V{bk}"
        out[name] = _case(dtype, bk, bk, lo, varlen=True)
        out[f"{name} norm h0 ht"] = _case(dtype, bk, bk, lo, normalize=True, h0=True, ht=True, z0=True, varlen=True)
    return {**out, **states_cases(), **grid_cases()}


#: The generality benchmark's shapes the grid cases are planned for (``bench_general.SHAPES``): many chains
#: (one pass) and one long sequence (chained), on an H100's or H200's 132 SMs.
GRID_SHAPES = {"B4H16 T16k": (4, 16, 16384), "B1H8 T256k": (1, 8, 262144)}


def grid_cases() -> dict[str, dict]:
    """The launch ``chunk_linear_attn`` plans (``dispatch.plan``) for every (K, V) in {64, 128, 256}², bf16 and
    fp32 in both precisions, raw and normalising, at the ``GRID_SHAPES``: what the generality grid's rows run.
    Named ``grid <dtype> K<K> V<V> <shape>[ norm]``."""
    from kernels.linear_attention.dispatch import plan

    out = {}
    for (label, (B, H, T)), dt, K, V in itertools.product(GRID_SHAPES.items(), ("bf16", "tf32", "tf32x3"),
                                                           (64, 128, 256), (64, 128, 256)):
        dtype = torch.bfloat16 if dt == "bf16" else torch.float32
        lo = plan(K, V, dtype, B, H, [T], 132, None if dt == "bf16" else dt)
        lo = dataclasses.replace(lo, precision="tf32" if dt == "bf16" else lo.precision)
        name = f"grid {'bf16' if dt == 'bf16' else 'fp32-' + dt} K{K} V{V} {label}"
        out[name] = _case(dtype, K, V, lo)
        out[f"{name} norm"] = _case(dtype, K, V, lo, normalize=True)
    return out


def _states_signatures(c: dict) -> dict[str, tuple]:
    """``states.py``'s two kernels as ``states_pass`` launches them: name -> (kernel, signature, constexprs,
    attrs, options)."""
    dt = TRITON_TYPES[c["dtype"]]
    lo: Launch = c["launch"]
    K, V, tile = c["K"], c["V"], c["tile"]
    p = {"ptr": dt, "aligned": True}
    f32 = {"ptr": "fp32", "aligned": True}
    i32 = {"type": "i32", "div16": False}
    norm = c["normalize"]
    flags = dict(K=K, V=V, NORMALIZE=norm, UPCAST=False, PRECISION=lo.precision)
    states = dict(k_ptr=p, v_ptr=p, h_ptr=p, z_ptr=f32 if norm else None, h0_ptr=f32 if c["h0"] else None,
                  ht_ptr=f32 if c["ht"] else None, z0_ptr=f32 if c["z0"] else None,
                  zt_ptr=({"ptr": "fp32" if c["z0"] else dt, "aligned": True}) if norm else None,
                  BK=tile, BV=tile, BT=lo.BT, S=lo.states * lo.BT, HAS_H0=c["h0"], STORE_HT=c["ht"],
                  HAS_Z0=c["z0"], LOOP_ABOVE=loop_above(lo.states_loop), KV_T=lo.kv_t, **flags)
    output = dict(q_ptr=p, k_ptr=p, v_ptr=p, o_ptr=f32 if norm and c["z0"] else p, h_ptr=p,
                  z_ptr=f32 if norm else None, den_ptr=f32 if c["den"] else None, scale={"type": "fp32"},
                  BK=tile, BV=lo.BV, S=lo.states * lo.BT, STORE_DEN=c["den"],
                  QZ_MMA=norm and bool(NORM_MMA_FORMS[lo.norm_mma][0]), KV_T=lo.kv_t, vt_ptr=p, **flags)
    out = {}
    for name, kernel, values, options in (
            ("states", _states_kernel, states, dict(num_warps=c["state_warps"], num_stages=c["state_stages"])),
            ("output", _states_output_kernel, output, dict(num_warps=lo.num_warps, num_stages=lo.num_stages))):
        for q in kernel.params:
            if not q.is_constexpr and q.name not in values:
                values[q.name] = {"type": "i32", "div16": q.name.startswith("stride")} if q.name.startswith(
                    "stride") else i32
        out[name] = (kernel, *specialise(kernel, values, specialize=True), options)
    return out


def _signature(c: dict) -> tuple[dict, dict, dict]:
    dt = TRITON_TYPES[c["dtype"]]
    lo: Launch = c["launch"]
    K, V = c["K"], c["V"]
    BK = max(16, triton.next_power_of_2(K))
    BV = max(16, min(lo.BV, triton.next_power_of_2(V)))
    chained = lo.L is not None
    stored = chained and lo.prefix == 3  # the states kernel takes the states in and out
    ptrs = {"q_ptr": "*" + dt, "k_ptr": "*" + dt, "v_ptr": "*" + dt,
            "o_ptr": "*" + ("fp32" if c["normalize"] and c["z0"] else dt),
            "h0_ptr": "*fp32" if (c["h0"] or (c["ht"] and not chained)) and not stored else None,
            "ht_ptr": "*fp32" if c["ht"] and not stored else None,
            "z0_ptr": "*fp32" if c["z0"] and not stored else None,
            "zt_ptr": ("*fp32" if c["z0"] else "*" + dt) if c["normalize"] else None,
            "den_ptr": "*fp32" if c["den"] else None,
            "ring_ptr": "*fp32" if chained else None, "flag_ptr": "*i32" if chained else None,
            "ticket_ptr": "*i32" if chained else None,
            "cu_ptr": "*i32" if c["varlen"] else None, "seg_ptr": "*i32" if c["varlen"] else None,
            "hs_ptr": "*" + dt if stored else None, "zs_ptr": "*fp32" if stored and c["normalize"] else None}
    constexprs = dict(K=K, V=V, BK=BK, BV=BV, BT=lo.BT, L=lo.L or 0, CHAINED=chained,
                      SLOT=BK * BV + (BK if c["normalize"] else 0), HAS_H0=ptrs["h0_ptr"] is not None,
                      STORE_HT=ptrs["ht_ptr"] is not None, NORMALIZE=c["normalize"],
                      HAS_Z0=ptrs["z0_ptr"] is not None, STORE_DEN=c["den"],
                      IS_VARLEN=c["varlen"], UPCAST=False, PRECISION=lo.precision, PREFETCH=lo.prefetch,
                      LINE=128 // c["dtype"].itemsize, TMA=c["tma"],
                      QZ_MMA=NORM_MMA_FORMS[lo.norm_mma][0] if c["normalize"] else 0,
                      KSUM_MMA=c["normalize"] and NORM_MMA_FORMS[lo.norm_mma][1], KT_LOAD=lo.kt,
                      PREFIX=lo.prefix if chained else 0)
    values = dict(constexprs)
    for p in _fused_linear_attention_kernel.params:
        if p.is_constexpr:
            continue
        if p.name in ptrs:
            values[p.name] = ptrs[p.name] and {"ptr": ptrs[p.name][1:], "aligned": True}
        elif p.name == "scale":
            values[p.name] = {"type": "fp32"}
        else:
            values[p.name] = {"type": "i32", "div16": p.name.startswith("stride")}
    return specialise(_fused_linear_attention_kernel, values, specialize=True)


def report(c: dict) -> dict:
    lo: Launch = c["launch"]
    if lo.states:
        return {name: _report(*job) for name, job in _states_signatures(c).items()}
    sig, constexprs, attrs = _signature(c)
    return _report(_fused_linear_attention_kernel, sig, constexprs, attrs,
                   dict(num_warps=lo.num_warps, num_stages=lo.num_stages))


def _report(kernel, sig, constexprs, attrs, options) -> dict:
    t0 = time.perf_counter()
    k = compile_for(kernel, sig, constexprs, attrs, options)
    seconds = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        ptx = pathlib.Path(d, "k.ptx")
        ptx.write_text(k.asm["ptx"])
        log = subprocess.run([str(_BIN / "ptxas"), "-v", "--gpu-name=sm_90a", str(ptx), "-o", str(ptx) + ".o"],
                             capture_output=True, text=True).stderr
        cubin = pathlib.Path(d, "k.cubin")
        cubin.write_bytes(k.asm["cubin"])
        sass = subprocess.run([str(_BIN / "cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True).stdout
    regs = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    warnings = sorted(set(re.findall(r"warning\s*:?\s*\(?(C\d+)", log)) | set(re.findall(r"(C7\d\d\d)", log)))
    return {
        "registers": int(regs.group(1)) if regs else None,
        "spill_stores": int(spills.group(1)) if spills else None,
        "spill_loads": int(spills.group(2)) if spills else None,
        "shared_bytes": k.metadata.shared,
        "warnings": warnings,
        "hgmma": count(r"\bHGMMA\.", sass),
        "hgmma_types": sorted(set(re.findall(r"HGMMA\.\w+\.(\w+\.\w+)", sass))),
        "hmma": count(r"\bHMMA\.", sass),
        "ffma": count(r"\bFFMA\b", sass),
        "local_ld_st": count(r"\b(LDL|STL)\b", sass),
        "compile_s": round(seconds, 1),
    }


def table(wanted) -> Iterator[tuple[str, dict, str]]:
    """Every wanted case, compiled one after another; a row and a printed line each."""
    for name, c in cases().items():
        if not wanted(name):
            continue
        r = report(c)
        lo = c["launch"]
        if lo.states:
            yield name, r, f"{name:34s}: " + "; ".join(
                f"{part} {x['registers']} regs, spill {x['spill_stores']}/{x['spill_loads']} B, smem "
                f"{x['shared_bytes'] // 1024} KiB, HGMMA {x['hgmma']}, HMMA {x['hmma']}, LDL/STL {x['local_ld_st']} "
                f"{' '.join(x['warnings'])}" for part, x in r.items())
            continue
        yield name, r, (
            f"{name:34s} L={lo.L} BT{lo.BT} BV{lo.BV} w{lo.num_warps} s{lo.num_stages}: {r['registers']} regs, "
            f"spill {r['spill_stores']}/{r['spill_loads']} B, smem {r['shared_bytes'] // 1024} KiB, "
            f"HGMMA {r['hgmma']} {r['hgmma_types']}, HMMA {r['hmma']}, FFMA {r['ffma']}, LDL/STL "
            f"{r['local_ld_st']} {' '.join(r['warnings'])} ({r['compile_s']} s)")


if __name__ == "__main__":
    main(__doc__, table)
