"""Check and time every lookback linear-attention configuration on a GPU, in one run of a few minutes.

For each configuration in SWEEP: compile, check against the float64 chunked oracle on fresh random inputs
(varlen with initial and final state, lengths off every block size, outputs NaN-poisoned), then at each benchmark
size check again and time (``triton.testing.do_bench`` median after warm-up). fla-core's ``chunk_linear_attn``
(normalize=False) is checked and timed in the same run after a warm call. Extras time the tuned table's choice
for fp16, H=32 D=64, varlen and initial/final state. Prints a table last; writes JSON to
``$OUT/tune_linear_attention.json`` and ``results/gpu/`` (``bench-results/`` when run without a GPU).
Usage: python3 scripts/tune_linear_attention.py [--budget SECONDS] [--quick] [--sweep-only] [--smoke]
(``--smoke``: tiny sizes and three configurations, e.g. under the CPU interpreter, to check the script itself.)
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import math
import os
import pathlib
import sys
import time
import traceback

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.bench import copy_bandwidth, time_ms  # noqa: E402
from kernels.device import DEVICE, ON_GPU, machine, sync  # noqa: E402
from kernels.linear_attention.lookback import Config, config_for, lookback_linear_attention  # noqa: E402
from kernels.linear_attention.reference import reference_linear_attention  # noqa: E402
from kernels.testing import tolerance  # noqa: E402

SIZES = [4096, 16384, 65536, 262144]
B, H, D = 4, 16, 128
HBM_BPS = 4.26e12
# Ordered by expected value, so a run cut short by the budget has measured the likeliest winners.
# Runs 1-2: BT64 BV64 w4 s2 best at D=128, longer L better; prefetch 2 helps a single-segment chain (T <= L);
# L2 hints and the stash lost (PERF.md). Run 4 weighs TMA tiles (tensor descriptors) against run 2's best.
SWEEP = [
    Config(2048, 64, 64, 4, 2, tma=True), Config(4096, 64, 64, 4, 2, tma=True), Config(2048, 64, 64, 4, 2),
    Config(4096, 64, 64, 4, 2, prefetch=2), Config(1024, 64, 64, 4, 2, tma=True), Config(512, 64, 64, 4, 2, tma=True),
    Config(2048, 64, 32, 4, 2, tma=True), Config(2048, 64, 64, 4, 3, tma=True), Config(2048, 64, 128, 8, 2, tma=True),
    Config(4096, 64, 64, 4, 2, prefetch=2, tma=True), Config(8192, 64, 64, 4, 2, tma=True),
    Config(2048, 64, 64, 4, 2, prefetch=1), Config(8192, 64, 64, 4, 2), Config(2048, 64, 64, 4, 3),
]
SWEEP_D64 = [Config(2048, 64, 64, 4, 3), Config(2048, 64, 64, 4, 3, tma=True), Config(2048, 64, 64, 4, 2, tma=True),
             Config(4096, 64, 64, 4, 3, tma=True), Config(4096, 64, 64, 4, 3), Config(2048, 64, 64, 4, 4, tma=True)]
SWEEP_VARLEN = [Config(1024, 64, 64, 4, 2), Config(1024, 64, 64, 4, 2, tma=True), Config(2048, 64, 64, 4, 2, tma=True),
                Config(512, 64, 64, 4, 2, tma=True), Config(512, 64, 64, 4, 2)]
VARLEN_LENS = [37, 0, 1500, 1, 2 * 1024 + 77, 700, 3001]
EXTRAS = {
    "fp16 D128 T16k": (B, 16384, H, 128, torch.float16, {}),
    "fp16 D128 T64k": (B, 65536, H, 128, torch.float16, {}),
    "bf16 H32 D64 T16k": (B, 16384, 32, 64, torch.bfloat16, {}),
    "bf16 H32 D64 T64k": (B, 65536, 32, 64, torch.bfloat16, {}),
    "bf16 D128 T16k h0+ht": (B, 16384, H, 128, torch.bfloat16, {"h0": True}),
    "bf16 D128 varlen 64k/16": (1, 65536, H, 128, torch.bfloat16, {"varlen": 16}),
}


def cfg_name(c: Config | None) -> str:
    if c is None:
        return "table"
    extra = (f"-pf{c.prefetch}" if c.prefetch else "") + ("-tma" if c.tma else "")
    return f"L{c.L}-BT{c.BT}-BV{c.BV}-w{c.num_warps}-s{c.num_stages}{extra}"


def make(Bn, T, Hn, K, V, dtype, seed):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    q, k = (torch.randn(Bn, T, Hn, K, device=DEVICE, generator=g).to(dtype) for _ in range(2))
    v = torch.randn(Bn, T, Hn, V, device=DEVICE, generator=g).to(dtype)
    return q, k, v


def oracle(q, k, v, scale, h0=None, cu=None):
    o, ht = reference_linear_attention(q.double(), k.double(), v.double(), scale, None if h0 is None else h0.double(),
                                       True, False, cu, chunk_size=256)
    return o, ht


def rel(out, ref) -> float:
    """Relative RMS error; ``ref`` is the float64 oracle's result (kept in fp32 to halve its memory)."""
    if not torch.isfinite(out).all():
        return math.inf
    return ((out.float() - ref.float()).norm().double() / ref.float().norm().double()).item()


def poison(nbytes: int) -> None:
    """Leave NaN in the caching allocator's free blocks of this size, so an unwritten output reads NaN."""
    x = torch.full((nbytes // 2 + 64,), float("nan"), dtype=torch.float16, device=DEVICE)
    del x


def floor_ms(T, Hn=None, K=None, V=None, Bn=None, elsize=2, bps=HBM_BPS) -> float:
    """Q, K, V read once and O written once at ``bps``."""
    Hn, K, V, Bn = Hn or H, K or D, V or D, Bn or B
    return Bn * T * Hn * (2 * K + 2 * V) * elsize / bps * 1e3


def bench(fn) -> float:
    """Median milliseconds after a first (compiling) call."""
    fn()
    sync()
    return time_ms(fn, warmup=20, rep=80)


def varlen_check(cfg, dtype=torch.bfloat16):
    """Varlen with an empty sequence, lengths off every block size, initial state and final state."""
    lens, K, V, Hn = VARLEN_LENS, D, D, H
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=DEVICE)
    T = int(cu[-1])
    q, k, v = make(1, T, Hn, K, V, dtype, seed=int(time.time()) % 10_000)
    h0 = torch.randn(len(lens), Hn, K, V, device=DEVICE)
    scale = K**-0.5
    ro, rh = oracle(q, k, v, scale, h0, cu)
    poison(q.numel() * 2)
    o, ht = lookback_linear_attention(q, k, v, scale, h0, True, cu, config=cfg)
    sync()
    return rel(o, ro), rel(ht, rh)


def time_kernel(q, k, v, scale, ref, tol, cfg, **kw):
    poison(q.numel() * 2)
    o, _ = lookback_linear_attention(q, k, v, scale, config=cfg, **kw)
    err = rel(o, ref)
    del o
    if not err <= tol:
        return {"status": "WRONG", "rel_error": err}
    extra = None
    if ON_GPU:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        lookback_linear_attention(q, k, v, scale, config=cfg, **kw)
        torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - base - q.numel() * q.element_size() * v.shape[-1] // q.shape[-1]
    ms = bench(lambda: lookback_linear_attention(q, k, v, scale, config=cfg, **kw))
    return {"status": "ok", "rel_error": err, "ms": ms, "extra_bytes": extra}


def time_fla(fla, q, k, v, scale, ref, **kw):
    if fla is None:
        return {"status": "absent"}
    try:
        o, _ = fla(q, k, v, scale=scale, normalize=False, **kw)
        err = rel(o, ref)
        del o
        ms = bench(lambda: fla(q, k, v, scale=scale, normalize=False, **kw))
        return {"status": "ok", "rel_error": err, "ms": ms}
    except Exception as e:  # noqa: BLE001 - fla's failure is a result to record, not a reason to stop
        return {"status": "failed", "error": repr(e)[:300]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=200.0,
                    help="seconds for the whole run (sweep stops 110 s short)")
    ap.add_argument("--quick", action="store_true", help="first four configurations only")
    ap.add_argument("--sweep-only", action="store_true",
                    help="the main sweep (and fla on the main sizes if time is left); no other shapes")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, three configurations (checks the script)")
    args = ap.parse_args()
    global SIZES, B, H, D, SWEEP, SWEEP_D64, SWEEP_VARLEN, EXTRAS, VARLEN_LENS
    if args.smoke:
        SIZES, B, H, D, VARLEN_LENS = [200, 301], 1, 2, 32, [37, 0, 150, 1, 77]
        SWEEP = [Config(64, 32, 32, 4, 1), Config(128, 64, 16, 4, 1, tma=True)]
        SWEEP_D64, SWEEP_VARLEN = [Config(64, 16, 16, 4, 1)], [Config(64, 16, 16, 4, 1, tma=True)]
        EXTRAS = {k: (1, t // 1024, 2, d // 4, dt, kw) for k, (b, t, h, d, dt, kw) in EXTRAS.items()}
    t_start = time.perf_counter()
    outs = [ROOT / ("results/gpu" if ON_GPU else "bench-results")]
    outs += [pathlib.Path(os.environ["OUT"])] if os.environ.get("OUT") else []
    try:
        from fla.ops.linear_attn import chunk_linear_attn as fla
    except Exception:  # noqa: BLE001
        fla = None
    result = {"gpu": "none (interpreter)", **machine(),
              "fla": None if fla is None else __import__("fla").__version__, "sizes": SIZES,
              "shape": dict(B=B, H=H, D=D, dtype="bf16"), "configs": {}, "fla_main": {}, "extras": {}}

    def save():
        result["elapsed_s"] = round(time.perf_counter() - t_start, 1)
        for d in outs:
            d.mkdir(parents=True, exist_ok=True)
            (d / "tune_linear_attention.json").write_text(json.dumps(result, indent=1) + "\n")

    def arm(seconds=90):
        faulthandler.dump_traceback_later(seconds, exit=True)

    arm()
    result["copy_bandwidth_Bps"] = bw = copy_bandwidth()
    result["floors_ms"] = {T: {"hbm_4.26": floor_ms(T), "hbm_measured": floor_ms(T, bps=bw)} for T in SIZES}
    scale = D**-0.5
    tol = tolerance(torch.bfloat16)
    data = {}
    for T in SIZES:
        q, k, v = make(B, T, H, D, D, torch.bfloat16, seed=T + int(time.time()) % 1000)
        data[T] = (q, k, v, oracle(q, k, v, scale)[0].float())
        torch.cuda.empty_cache()
    print(f"[{time.perf_counter() - t_start:.0f}s] inputs and oracles ready", flush=True)

    # 1. The table's choice and the sweep, each checked (varlen, h0, ht) and then checked and timed per size.
    for cfg in [None] + (SWEEP[:4] if args.quick else SWEEP):
        if time.perf_counter() - t_start > args.budget - (15 if args.sweep_only else 110):
            result["configs"][cfg_name(cfg)] = {"status": "not run (budget)"}
            continue
        arm()
        entry = {"config": None if cfg is None else cfg.__dict__}
        try:
            t0 = time.perf_counter()
            entry["varlen_rel_error"] = vl = varlen_check(cfg)
            entry["compile_and_check_s"] = round(time.perf_counter() - t0, 1)
            if not (vl[0] <= tol and vl[1] <= 1e-3):
                entry["status"] = "WRONG (varlen check)"
            else:
                entry["status"] = "ok"
                entry["sizes"] = {T: time_kernel(*data[T][:3], scale, data[T][3], tol, cfg) for T in SIZES}
        except Exception as e:  # noqa: BLE001 - a configuration that fails to compile is a result
            entry["status"] = "failed"
            entry["error"] = "".join(traceback.format_exception_only(type(e), e))[-400:]
        result["configs"][cfg_name(cfg)] = entry
        print(f"[{time.perf_counter() - t_start:.0f}s]", cfg_name(cfg),
              json.dumps(entry.get("sizes", entry.get("error", entry["status"])), default=str)[:300], flush=True)
        save()
        torch.cuda.empty_cache()

    # 2. Other shapes and features with the table's choice (D=64 also with a small sweep).
    extras, kept = result["extras"], {}
    for name, (Bn, T, Hn, K, dtype, kw) in EXTRAS.items():
        if args.sweep_only or time.perf_counter() - t_start > args.budget - 80:
            extras[name] = {"status": "not run (budget)"}
            continue
        arm(120)
        try:
            q, k, v = make(Bn, T, Hn, K, K, dtype, seed=7 + T)
            sc = K**-0.5
            call_kw, fla_kw, h0, cu = {}, {}, None, None
            if kw.get("h0"):
                h0 = torch.randn(Bn, Hn, K, K, device=DEVICE)
                call_kw = dict(initial_state=h0, output_final_state=True)
                fla_kw = dict(initial_state=h0, output_final_state=True)
            if kw.get("varlen"):
                g = torch.Generator().manual_seed(T)
                cuts = torch.randperm(T - 1, generator=g)[: kw["varlen"] - 1].add(1).sort().values
                cu = torch.cat([torch.tensor([0]), cuts, torch.tensor([T])]).to(DEVICE)
                call_kw = dict(cu_seqlens=cu)
                fla_kw = dict(cu_seqlens=cu.long())
            ref = oracle(q, k, v, sc, h0, cu)[0].float()
            tl_ = tolerance(dtype)
            row = {"floor_ms": floor_ms(T, Hn=Hn, K=K, V=K, Bn=Bn),
                   "config": config_for(K, K, dtype, T / (1 if cu is None else len(cu) - 1), cu is not None).__dict__,
                   "lookback": time_kernel(q, k, v, sc, ref, tl_, None, **call_kw)}
            if K == 64 or cu is not None:
                row["sweep"] = {cfg_name(c): time_kernel(q, k, v, sc, ref, tl_, c, **call_kw)
                                for c in (SWEEP_D64 if K == 64 else SWEEP_VARLEN)}
            extras[name] = row
            kept[name] = (q, k, v, sc, ref, fla_kw)
        except Exception as e:  # noqa: BLE001
            extras[name] = {"status": "failed", "error": "".join(traceback.format_exception_only(type(e), e))[-400:]}
        print(f"[{time.perf_counter() - t_start:.0f}s]", name, json.dumps(extras[name], default=str)[:300], flush=True)
        save()

    # 3. fla on the same inputs, after a warm call (its first call autotunes), while the budget lasts.
    for T in SIZES:
        arm(150)
        if args.budget - (time.perf_counter() - t_start) < 15:
            result["fla_main"][T] = {"status": "not run (budget)"}
            continue
        result["fla_main"][T] = time_fla(fla, *data[T][:3], scale, data[T][3])
        print(f"[{time.perf_counter() - t_start:.0f}s] fla T={T}: {result['fla_main'][T]}", flush=True)
        save()
    del data
    for name, (q, k, v, sc, ref, fla_kw) in kept.items():
        arm(120)
        left = args.budget - (time.perf_counter() - t_start)
        extras[name]["fla"] = time_fla(fla, q, k, v, sc, ref, **fla_kw) if left > 20 else {"status": "not run (budget)"}
        print(f"[{time.perf_counter() - t_start:.0f}s] fla {name}: {extras[name]['fla']}", flush=True)
        save()
    faulthandler.cancel_dump_traceback_later()
    save()
    print(table(result))
    return 0


def table(result) -> str:
    lines = [f"lookback linear attention, B={B} H={H} D={D} bf16 causal; median ms (x HBM floor at 4.26 TB/s); "
             f"copy {result['copy_bandwidth_Bps'] / 1e12:.2f} TB/s; {result['elapsed_s']} s"]
    head = f"{'config':28s}" + "".join(f"{T:>16d}" for T in SIZES) + "   max rel err"
    lines.append(head)

    def cells(d):
        out, errs = "", []
        for T in SIZES:
            e = d.get(T, {})
            if e.get("status") == "ok":
                out += f"{e['ms']:9.3f} ({e['ms'] / floor_ms(T):.2f}x)"
                errs.append(e["rel_error"])
            else:
                out += f"{e.get('status', '-'):>16s}"
        return out + (f"   {max(errs):.2e}" if errs else "")

    lines.append(f"{'floor (4 tensors)':28s}" + "".join(f"{floor_ms(T):16.3f}" for T in SIZES))
    lines.append(f"{'fla chunk_linear_attn':28s}" + cells(result["fla_main"]))
    ranked = sorted(result["configs"].items(),
                    key=lambda kv: kv[1].get("sizes", {}).get(16384, {}).get("ms", math.inf))
    for name, e in ranked:
        lines.append(f"{name:28s}" + (cells(e["sizes"]) if "sizes" in e else f"  {e['status']}"))
    for name, e in result["extras"].items():
        if "lookback" not in e:
            lines.append(f"{name:28s}  {e.get('status')} {e.get('error', '')[:80]}")
            continue
        lb, fl = e["lookback"], e.get("fla", {"status": "-"})
        lbs = f"{lb['ms']:.3f} ({lb['ms'] / e['floor_ms']:.2f}x) err {lb['rel_error']:.1e}" if "ms" in lb else lb[
            "status"]
        fls = f"{fl['ms']:.3f} err {fl['rel_error']:.1e}" if "ms" in fl else fl["status"]
        lines.append(f"{name:28s}  floor {e['floor_ms']:.3f}  lookback {lbs}  fla {fls}")
        for cn, ce in e.get("sweep", {}).items():
            lines.append(f"{'':4s}{cn:24s}  " + (f"{ce['ms']:.3f}" if "ms" in ce else ce["status"]))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
