"""Measure on the GPU: median times, Triton's profiler (proton), Nsight Compute, and autotuning re-measured.

Everything here needs a GPU except :func:`tools` and :func:`ncu_command`; without one each function raises
:class:`NeedsGpu` with what to run where. ``proton`` ships in the triton wheel (``triton.profiler``); Nsight
Compute (``ncu``) comes with the CUDA toolkit (``/usr/local/cuda/bin/ncu``) or NVIDIA's installer.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import kernels

from ..device import ON_GPU

__all__ = ["NeedsGpu", "tools", "time_ms", "proton_profile", "ncu_command", "run_ncu", "NCU_METRICS", "autotune",
           "sweep", "floor_ms", "H200_BANDWIDTH", "H200_FP16_FLOPS"]

#: The H200's peaks the floor uses: HBM3e bandwidth (what a copy reaches, not the datasheet's 4.8 TB/s) and dense
#: fp16 tensor-core rate.
H200_BANDWIDTH = 4.26e12
H200_FP16_FLOPS = 989e12

#: What ``run_ncu`` asks Nsight Compute for: DRAM and L2 throughput, achieved occupancy, the main stall reasons.
NCU_METRICS = {
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput, % of peak",
    "lts__t_sectors.avg.pct_of_peak_sustained_elapsed": "L2 throughput, % of peak",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy, %",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput, % of peak",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": "stall: waiting on global memory",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": "stall: barrier",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio": "stall: shared-memory queue",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio": "stall: math pipe busy",
    "gpu__time_duration.sum": "duration, ns",
}

_HOW = {
    "gpu": "an NVIDIA GPU with CUDA: run this notebook on one (README: on a rented cloud GPU)",
    "proton": "proton is part of the triton wheel (`import triton.profiler as proton`); pip install triton==3.6.0",
    "ncu": "Nsight Compute: part of the CUDA toolkit (/usr/local/cuda/bin/ncu) or "
           "https://developer.nvidia.com/nsight-compute; profiling needs GPU performance counters "
           "(root, or the driver option NVreg_RestrictProfilingToAdminUsers=0)",
}


class NeedsGpu(RuntimeError):
    """What was asked for measures a GPU (or a tool) this machine does not have; the message says how to get it."""


def _need_gpu(what: str) -> None:
    if not ON_GPU:
        raise NeedsGpu(f"{what} measures a GPU, and this machine has none. Needs {_HOW['gpu']}.")


def _ncu_path() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for base in sorted(pathlib.Path("/usr/local").glob("cuda*"), reverse=True):
        for cand in (base / "bin" / "ncu", *sorted(base.glob("nsight-compute*/ncu"))):
            if cand.exists():
                return str(cand)
    return None


def tools() -> dict[str, dict]:
    """Which measuring tools this machine has: ``{name: {"available": bool, "where": str, "how": str}}``."""
    try:
        import triton.profiler  # noqa: F401

        proton = True
    except Exception:
        proton = False
    ncu = _ncu_path()
    return {
        "gpu": {"available": ON_GPU, "where": "torch.cuda" if ON_GPU else "", "how": _HOW["gpu"]},
        "proton": {"available": proton and ON_GPU, "where": "triton.profiler" if proton else "",
                   "how": _HOW["proton"] if not proton else _HOW["gpu"]},
        "ncu": {"available": bool(ncu) and ON_GPU, "where": ncu or "", "how": _HOW["ncu"]},
    }


def time_ms(fn, *, warmup: int = 25, rep: int = 100) -> float:
    """Median milliseconds of ``fn()`` on the GPU (``triton.testing.do_bench``: L2 flushed between runs)."""
    _need_gpu("time_ms")
    import triton

    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def floor_ms(bytes_moved: float, flops: float, *, bandwidth: float = H200_BANDWIDTH,
             rate: float = H200_FP16_FLOPS) -> float:
    """The hardware floor: the larger of moving the bytes at full bandwidth and doing the flops at full rate."""
    return 1e3 * max(bytes_moved / bandwidth, flops / rate)


def _walk(node: dict, path: tuple, out: list) -> None:
    name = node.get("frame", {}).get("name", "")
    metrics = node.get("metrics", {})
    here = (*path, name) if name else path
    if not node.get("children") and metrics:
        ns = next((v for k, v in metrics.items() if k.startswith("time")), None)
        out.append({"kernel": name, "path": "/".join(here), "count": int(metrics.get("count", 0)),
                    "time_ms": (ns or 0) / 1e6})
    for child in node.get("children", []):
        _walk(child, here, out)


def proton_profile(fn, *, name: str = "lesson06", repeat: int = 20, out_dir: str | None = None) -> list[dict]:
    """Run ``fn()`` ``repeat`` times under proton; return one row per kernel: launches and total GPU time."""
    _need_gpu("proton_profile")
    import torch
    import triton.profiler as proton

    out = pathlib.Path(out_dir or tempfile.mkdtemp(prefix="proton-"))
    out.mkdir(parents=True, exist_ok=True)
    fn()
    torch.cuda.synchronize()
    proton.start(str(out / name), hook="triton")
    for _ in range(repeat):
        fn()
    torch.cuda.synchronize()
    proton.finalize()
    data = json.loads((out / f"{name}.hatchet").read_text())
    rows: list = []
    for root in data if isinstance(data, list) else [data]:
        if isinstance(root, dict) and ("frame" in root or "children" in root):
            _walk(root, (), rows)
    return sorted(rows, key=lambda r: -r["time_ms"])


def ncu_command(script: str, kernel: str, metrics=tuple(NCU_METRICS), *, count: int = 1) -> list[str]:
    """The Nsight Compute command line that profiles ``count`` launches of the kernels matching ``kernel``
    (a regex) in ``python script``."""
    return [_ncu_path() or "ncu", "--csv", "--page", "raw", "--launch-count", str(count), "--kernel-name",
            f"regex:{kernel}", "--metrics", ",".join(metrics), sys.executable, script]


def run_ncu(code: str, kernel: str, *, metrics=tuple(NCU_METRICS), timeout: float = 300) -> dict[str, float]:
    """Profile the first launch of ``kernel`` (a regex on its name) in a Python snippet; return metric -> value."""
    _need_gpu("run_ncu")
    if _ncu_path() is None:
        raise NeedsGpu(f"Nsight Compute (ncu) is not installed here. Get it: {_HOW['ncu']}")
    with tempfile.TemporaryDirectory(prefix="ncu-") as d:
        script = pathlib.Path(d) / "profiled.py"
        script.write_text(code)
        env = dict(os.environ)
        home = str(pathlib.Path(kernels.__file__).resolve().parent.parent)  # where this package is imported from
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [home, env.get("PYTHONPATH")]))
        try:
            proc = subprocess.run(ncu_command(str(script), kernel, metrics), capture_output=True, text=True,
                                  timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"ncu took longer than {timeout:.0f} s") from None
    return _parse_ncu_csv(proc.stdout, proc.stderr)


def _parse_ncu_csv(stdout: str, stderr: str = "") -> dict[str, float]:
    import csv

    lines = [ln for ln in stdout.splitlines() if ln.startswith('"')]
    if len(lines) < 3:
        tail = (stderr or stdout).strip()[-600:]
        hint = " (no permission for GPU performance counters?)" if "ERR_NVGPUCTRPERM" in stdout + stderr else ""
        raise RuntimeError(f"ncu returned no measurements{hint}: {tail}")
    header, _units, first = list(csv.reader(lines[:3]))
    out = {}
    for key, value in zip(header, first):
        try:
            out[key] = float(value.replace(",", ""))
        except ValueError:
            continue
    return out


def sweep(launch, configs: list[dict], *, warmup: int = 10, rep: int = 50) -> list[dict]:
    """Time ``launch(config)`` for every config; one row per config with its median ms (``None``: did not run,
    with the reason)."""
    _need_gpu("sweep")
    rows = []
    for cfg in configs:
        try:
            ms = time_ms(lambda c=cfg: launch(c), warmup=warmup, rep=rep)
            rows.append({"config": dict(cfg), "ms": ms})
        except Exception as e:  # out of resources (shared memory, registers) is an answer, not a crash
            rows.append({"config": dict(cfg), "ms": None, "error": f"{type(e).__name__}: {str(e)[:200]}"})
    return rows


def autotune(kernel, configs: list[dict], run_tuned, fresh_args, key: tuple[str, ...] = ("M", "N", "K"), *,
             rep: int = 100) -> dict:
    """Autotune ``kernel`` over ``configs`` with ``triton.autotune``, then re-measure the winner on fresh inputs.

    ``run_tuned(tuned, args)`` launches the autotuned kernel (no meta-parameters: the tuner supplies them);
    ``fresh_args()`` draws new inputs. Returns every config's time as the tuner measured it, the winner, the
    tuning time, the winner's median re-measured by :func:`time_ms` on fresh inputs, and the tuned kernel.
    """
    _need_gpu("autotune")
    import time

    import triton

    options = ("num_warps", "num_stages")
    tconfigs = [triton.Config({k: v for k, v in c.items() if k not in options},
                              **{k: c[k] for k in options if k in c}) for c in configs]
    tuned = triton.autotune(configs=tconfigs, key=list(key))(kernel)
    args = fresh_args()
    start = time.perf_counter()
    run_tuned(tuned, args)
    tuning_s = time.perf_counter() - start
    rows = [{"config": {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
             "ms": float(t[0]) if isinstance(t, (list, tuple)) else float(t)}
            for cfg, t in getattr(tuned, "configs_timings", {}).items()]
    best = tuned.best_config
    winner = {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages}
    again = fresh_args()
    remeasured = time_ms(lambda: run_tuned(tuned, again), rep=rep)
    return {"rows": rows, "winner": winner, "tuning_s": tuning_s, "winner_ms": remeasured,
            "winner_tuned_ms": next((r["ms"] for r in rows if r["config"] == winner), None), "tuned": tuned}
