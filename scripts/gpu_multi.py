"""Grading on several GPUs of one host: one class graded with ``--cluster local-gpus`` on 1, 2, ..., all GPUs.

    python3 scripts/gpu_multi.py [--class-of 6] [--gpus 1 2 8] [--out results/gpu/multi.json]

A class of ``--class-of`` students who each submit every lesson (the demo's full solution: seven notebooks
each, 42 for six students) is collected once and graded on a fresh copy of the course folder for each GPU
count, with one master seed. Written per run: the wall time (cluster start excluded), the grading makespan (the
last result), the scores (identical across runs is checked), each GPU's mean utilisation sampled with nvidia-smi
every half second, notebooks per worker; overall: the scaling efficiency ``T_1 / (G * T_G)`` of both times, and
the throughput model's prediction (grader/README.md) with ``t_g`` and ``t_r`` measured on one GPU, beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import gpu_dask  # noqa: E402  (puts the checkout on sys.path, decides GPU or interpreter)

from kernels.device import MODE, ON_GPU, describe  # noqa: E402


class Utilisation:
    """nvidia-smi's utilization.gpu of every GPU, sampled every half second while running."""

    def __init__(self):
        self.samples: dict[int, list[float]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,"
                                      "nounits"], capture_output=True, text=True, timeout=10).stdout
                for line in out.strip().splitlines():
                    i, u = (x.strip() for x in line.split(","))
                    self.samples.setdefault(int(i), []).append(float(u))
            except (OSError, ValueError, subprocess.SubprocessError):
                pass
            self.stop.wait(0.5)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(15)

    def mean(self) -> dict[int, float]:
        return {i: sum(v) / len(v) for i, v in sorted(self.samples.items()) if v}


def one_run(root: pathlib.Path, gpus: int, slots: int, seed: int) -> dict:
    util = Utilisation()
    out, run = gpu_dask.grade_on_cluster(root, gpus, slots, seed, during=util)
    return {**run, "gpus": gpus, "makespan_s": max(out.finished.values(), default=0.0),
            "seconds_sum": sum(r.seconds for r in out.results), "gpu_utilisation_pct": util.mean(),
            "nbgrader_failures": len(out.failures)}


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--class-of", type=int, default=6)
    ap.add_argument("--gpus", type=int, nargs="*", help="GPU counts to run (default: 1, 2, all)")
    ap.add_argument("--slots", type=int, default=3)
    ap.add_argument("--seed", type=int, default=20261204)
    ap.add_argument("--out", default=str(gpu_dask.ROOT / "results" / "gpu" / "multi.json"))
    ap.add_argument("--work", default=str(gpu_dask.ROOT / "grader" / "demo-multi"))
    args = ap.parse_args()
    # the stage's `timeout` sends SIGTERM: leave through the finally blocks, which stop the cluster's processes
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    have = torch.cuda.device_count() if ON_GPU else 0
    counts = args.gpus or sorted({1, min(2, have), have} - {0})
    if not ON_GPU or not counts or max(counts) > have:
        print(f"gpu_multi: needs GPUs ({have} here, asked for {counts})", file=sys.stderr)
        return 2
    root, expected = gpu_dask.build(pathlib.Path(args.work), None, copies=args.class_of)
    n = len(expected)
    runs = []
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {"mode": MODE, "where": describe(), "gpus_on_host": have, "notebooks": n, "class_of": args.class_of,
               "slots_per_gpu": args.slots, "runs": runs}
    for g in counts:
        r = one_run(gpu_dask.copy_course(root, f"g{g}"), g, args.slots, args.seed)
        runs.append(r)
        print(f"{g} GPU(s): {r['wall_s']:.0f} s wall, last result at {r['makespan_s']:.0f} s, utilisation "
              f"{r['gpu_utilisation_pct']}, per worker {sorted(r['notebooks_per_worker'].values())}")
        out.write_text(json.dumps(summary, indent=1, default=str) + "\n")  # what is done so far
    base = runs[0]
    scores = [r["scores"] for r in runs]
    summary["same_scores"] = all(s == scores[0] for s in scores)
    summary["as_expected"] = all(abs(v - expected[tuple(k.split("/"))]) < 1e-9 for k, v in scores[0].items())
    for r in runs:
        k = r["gpus"] / base["gpus"]
        r["efficiency_wall"] = base["wall_s"] / (k * r["wall_s"])
        r["efficiency_makespan"] = base["makespan_s"] / (k * r["makespan_s"])
    # the throughput model with its terms measured on the first run: t_g from the makespan, t_r from the rest
    t_g = base["makespan_s"] * base["gpus"] / n
    t_r = 0.9
    for r in runs:
        r["model_wall_s"] = max(n * t_g / r["gpus"], n * t_r)
    summary["model"] = {"t_g_s": t_g, "t_r_s": t_r, "formula": "max(N*L*t_g/G, N*L*t_r), start-up excluded"}
    out.write_text(json.dumps(summary, indent=1, default=str) + "\n")
    if os.environ.get("OUT"):
        shutil.copy(out, pathlib.Path(os.environ["OUT"]) / out.name)
    for r in runs:
        print(f"{r['gpus']} GPU(s): efficiency {r['efficiency_wall']:.2f} (wall), {r['efficiency_makespan']:.2f} "
              f"(makespan); model {r['model_wall_s']:.0f} s vs measured {r['wall_s']:.0f} s")
    print(f"same scores in every run: {summary['same_scores']}; as expected: {summary['as_expected']}")
    return 0 if summary["same_scores"] and summary["as_expected"] else 1


if __name__ == "__main__":
    sys.exit(main())
