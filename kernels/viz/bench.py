"""Widget latency: ``python -m kernels.viz.bench [--out DIR] [--repeat N]``.

Builds every lesson view at its default sizes (and draws its first picture, as displaying it does), then changes
each control through a few values, timing each update as a learner's slider move causes it: the redraw, the PNG
encode, and any re-trace of the learner's kernel in the interpreter (configurations more than one control away
from the defaults; the others are traced when the view is built). Prints a table and writes ``DIR/viz.json``.
The target is at most 200 ms per update on the CPU machine. Both the wall time and this
process's CPU time are recorded: on a shared machine (see the load average printed) the wall time includes
waiting for a core, so the target is checked on CPU time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import time

from ..device import describe

TARGET_MS = 200.0


def _views():
    from . import (
        chunk_state_explorer,
        coalescing_view,
        grid_explorer,
        matmul_tile_explorer,
        ptx_explorer,
        recurrence_stepper,
        working_set_view,
    )
    from .measure import reference

    ws = reference().get("working_set") or {"bytes": [2**p for p in range(20, 32)],
                                             "bandwidth": [1e12] * 12}  # timing only: values do not matter
    return [
        ("00 grid_explorer", grid_explorer, {"pid": [3, 7, 0], "n": [1500, 777, 1000], "BLOCK": [256, 64, 128]}),
        ("01 working_set_view", lambda: working_set_view(ws),
         {"size": [ws["bytes"][0], ws["bytes"][-1], ws["bytes"][len(ws["bytes"]) // 2]]}),
        ("01 coalescing_view", coalescing_view, {"stride": [2, 8, 32, 1]}),
        ("02 recurrence_stepper", recurrence_stepper, {"t": [5, 12, 23], "strategy": ["state on chip",
                                                                                       "state in HBM (naive)"]}),
        ("03 matmul_tile_explorer", matmul_tile_explorer,
         {"pid": [3, 8, 0], "step": [1, 3, 0], "GROUP_M": [1, 4, 2], "BLOCK_K": [32, 16]}),
        ("04 chunk_state_explorer", chunk_state_explorer, {"i": [2, 6, 0], "chunk": [32, 16]}),
        ("05 ptx_explorer", ptx_explorer, {"k": [2, 5, 0], "category": ["global memory", "shared memory",
                                                                         "tensor cores"]}),
    ]


def run(repeat: int = 1) -> dict:
    rows = []
    for label, make, moves in _views():
        t0 = time.perf_counter()
        view = make()
        view.png()  # the first picture is drawn when the view is displayed
        build = (time.perf_counter() - t0) * 1e3
        cpu: dict[str, list[float]] = {}
        wall: list[float] = []
        for _ in range(repeat):
            for key, values in moves.items():
                for v in values:
                    t0, c0 = time.perf_counter(), time.process_time()
                    view.set(**{key: v})
                    view.png()
                    cpu.setdefault(key, []).append((time.process_time() - c0) * 1e3)
                    wall.append((time.perf_counter() - t0) * 1e3)
                    if view.error:
                        raise RuntimeError(f"{label}: {key}={v!r} failed: {view.error}")
        every = [t for ts in cpu.values() for t in ts]
        rows.append({"view": label, "build_ms": build, "median_cpu_ms": statistics.median(every),
                     "max_cpu_ms": max(every), "median_wall_ms": statistics.median(wall), "max_wall_ms": max(wall),
                     "per_control_cpu": {k: {"median_ms": statistics.median(v), "max_ms": max(v)}
                                         for k, v in cpu.items()},
                     "ok": max(every) <= TARGET_MS})
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "where": describe(), "python": platform.python_version(), "cores": os.cpu_count(),
            "load_average": os.getloadavg(), "target_ms": TARGET_MS, "views": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args(argv)
    res = run(args.repeat)
    load = ", ".join(f"{x:.1f}" for x in res["load_average"])
    print(f"widget update latency ({res['where']}); {res['cores']} cores, load average {load}; "
          f"target <= {TARGET_MS:.0f} ms CPU per update")
    print(f"{'view':<26}{'build ms':>9}{'cpu med':>9}{'cpu max':>9}{'wall med':>10}{'wall max':>10}  slowest control")
    for r in res["views"]:
        slow = max(r["per_control_cpu"].items(), key=lambda kv: kv[1]["max_ms"])
        print(f"{r['view']:<26}{r['build_ms']:>9.0f}{r['median_cpu_ms']:>9.0f}{r['max_cpu_ms']:>9.0f}"
              f"{r['median_wall_ms']:>10.0f}{r['max_wall_ms']:>10.0f}  {slow[0]} ({slow[1]['max_ms']:.0f} ms)"
              f"{'' if r['ok'] else '  OVER TARGET'}")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "viz.json").write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {out / 'viz.json'}")
    return 0 if all(r["ok"] for r in res["views"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
