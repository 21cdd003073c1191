"""The fused kernel's launch choices measured side by side, for the rows whose tiles are not measured yet.

For each row: the float64 oracle once, then every launch variant is checked against it (output, final state, key
sum) and timed (median ms, CUDA events), next to the launch the dispatch picks. Writes results/gpu/la-sweep.json
after every row; ``--budget`` seconds bound the run (rows not started are listed). Run on a GPU:
``python3 scripts/gpu_la_sweep.py [--budget 150] [--rows NAME ...]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
import time

import torch
import triton
import triton.testing

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from kernels.device import machine  # noqa: E402
from kernels.linear_attention import dispatch  # noqa: E402
from kernels.linear_attention.bench_general import problem  # noqa: E402
from kernels.linear_attention.fused import Launch, fused_forward  # noqa: E402


def L(L, BT=64, BV=64, w=4, s=2, **kw) -> Launch:
    return Launch(L, BT, BV, w, s, **kw)


# row name -> (problem arguments, {variant name: launch}); "mma": the normaliser's sums on the tensor cores
ROWS = {
    "norm bf16 D128 B4H16 16k": ((True, "bf16", 128, 128, 4, 16, 16384), {
        "one BV64 w4 s2": L(None), "one BV64 w8 s3": L(None, w=8, s=3), "one BV64 w4 s3 tma": L(None, s=3, tma=True),
        "chain L4096": L(4096), "one BV64 w4 s3 mma": L(None, s=3, norm_mma="both"),
        "one BV64 w4 s2 mma": L(None, norm_mma="both"), "one BV64 w8 s3 mma": L(None, w=8, s=3, norm_mma="both"),
        "one BV64 w4 s3 mma-qz": L(None, s=3, norm_mma="qz"),
        "one BV64 w4 s3 mma-ksum": L(None, s=3, norm_mma="ksum")}),
    "raw bf16 K128V64 B4H16 16k": ((False, "bf16", 128, 64, 4, 16, 16384), {
        "one BV64 s3": L(None, s=3), "one BV32 s3": L(None, BV=32, s=3), "chain L1024": L(1024),
        "chain L4096": L(4096)}),
    "raw bf16 K64V128 B4H16 16k": ((False, "bf16", 64, 128, 4, 16, 16384), {
        "one BV128 w4 s3": L(None, BV=128, s=3), "one BV128 w8 s3": L(None, BV=128, w=8, s=3)}),
    "raw bf16 D256 B2H8 16k": ((False, "bf16", 256, 256, 2, 8, 16384), {
        "one BV32 w4 s2": L(None, BV=32), "one BV32 w4 s3": L(None, BV=32, s=3), "one BV64 w8 s2": L(None, w=8),
        "chain L1024 BV64 w8": L(1024, w=8), "chain L2048 BV32 w8": L(2048, BV=32, w=8)}),
    "norm bf16 D256 B2H8 16k": ((True, "bf16", 256, 256, 2, 8, 16384), {
        "one BV32 w4 s2": L(None, BV=32), "chain L1024 BV64 w8": L(1024, w=8),
        "one BV32 w8 s2 mma": L(None, BV=32, w=8, norm_mma="both"),
        "one BV32 w4 s2 mma": L(None, BV=32, norm_mma="both")}),
    "norm bf16 D128 B1H8 256k": ((True, "bf16", 128, 128, 1, 8, 262144), {
        "chain L2048": L(2048), "chain L1024": L(1024), "chain L4096 pf2": L(4096, prefetch=2),
        "chain L2048 tma": L(2048, tma=True), "chain L2048 mma": L(2048, norm_mma="both")}),
    "raw fp32-high D128 B4H16 16k": ((False, "fp32", 128, 128, 4, 16, 16384, "high"), {
        "one w8": L(None, w=8, precision="tf32"), "chain L1024": L(1024, precision="tf32")}),
    "norm fp32-high D128 B4H16 16k": ((True, "fp32", 128, 128, 4, 16, 16384, "high"), {
        "one w8": L(None, w=8, precision="tf32"), "one w4 mma": L(None, precision="tf32", norm_mma="both")}),
    "raw fp32-highest D128 B4H16 16k": ((False, "fp32", 128, 128, 4, 16, 16384, "highest"), {
        "one w4": L(None, precision="tf32x3"), "one BV32 w8": L(None, BV=32, w=8, precision="tf32x3")}),
}
# the normalising rows first: the normaliser's two forms are what the next run decides
ROWS = {**{k: ROWS[k] for k in ("norm bf16 D128 B4H16 16k", "norm bf16 D256 B2H8 16k", "norm bf16 D128 B1H8 256k")},
        **ROWS}


def _args(inputs: dict):
    init = inputs["initial_state"]
    kv, z = init if isinstance(init, tuple) else (init, None)
    return (inputs["q"], inputs["k"], inputs["v"], inputs["scale"], kv, z, inputs["output_final_state"],
            inputs["normalize"], inputs["cu_seqlens"])


def _flat(f) -> torch.Tensor:
    parts = [f.o] + [x for x in (f.final_state, f.z_state) if x is not None]
    return torch.cat([x.flatten().float() for x in parts])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=150.0)
    ap.add_argument("--rows", nargs="*")
    args = ap.parse_args()
    out = pathlib.Path("results/gpu/la-sweep.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {**machine(), "rows": {}, "not_started": []}
    t0 = time.perf_counter()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for name, (spec, variants) in ROWS.items():
        if args.rows and name not in args.rows:
            continue
        if time.perf_counter() - t0 > args.budget:
            result["not_started"].append(name)
            continue
        norm, dt, K, V, B, H, T, *prec = spec
        p = problem(norm, dt, K, V, B, H, T, precision=prec[0] if prec else None)
        inputs = p.make_inputs(0)
        ref = p.reference(**inputs).float()
        call = _args(inputs)
        old = torch.get_float32_matmul_precision()
        if prec:
            torch.set_float32_matmul_precision(prec[0])
        picked = dispatch.plan(K, V, inputs["q"].dtype, B, H, [T], sms)
        row = result["rows"][name] = {"params": p.params, "hbm_floor_ms": p.bytes / 4.26e12 * 1e3,
                                      "picked": dataclasses.asdict(picked), "variants": {}}
        for label, launch in {"dispatch": picked, **variants}.items():
            entry = row["variants"][label] = {"launch": dataclasses.asdict(launch)}
            try:
                f = fused_forward(*call, launch=launch)
                got = _flat(f)
                err = ((got - ref).norm() / ref.norm()).item() if torch.isfinite(got).all() else float("inf")
                entry["rel_error"] = err
                if not err <= p.tol:
                    entry["status"] = "WRONG"
                    continue
                entry["ms"] = triton.testing.do_bench(lambda a=call, lo=launch: fused_forward(*a, launch=lo),
                                                      warmup=25, rep=100, return_mode="median")
                entry["status"] = "ok"
            except Exception as e:  # one failing variant must not cost the rest
                entry.update(status="ERROR", reason=f"{type(e).__name__}: {e}"[:400])
            shown = f"{entry['ms']:.3f} ms" if entry.get("status") == "ok" else entry.get("reason", entry["status"])
            print(f"[{time.perf_counter() - t0:.0f}s] {name} / {label}: {shown} (err {entry.get('rel_error', 0):.1e})",
                  flush=True)
        torch.set_float32_matmul_precision(old)
        del inputs, ref, call
        torch.cuda.empty_cache()
        out.write_text(json.dumps(result, indent=1) + "\n")
    out.write_text(json.dumps(result, indent=1) + "\n")
    for name, row in result["rows"].items():
        cells = ", ".join(f"{k} {v.get('ms', float('nan')):.3f}" for k, v in row["variants"].items())
        print(f"{name} (floor {row['hbm_floor_ms']:.3f}): {cells}")
    if result["not_started"]:
        print("not started (budget):", ", ".join(result["not_started"]))


if __name__ == "__main__":
    main()
