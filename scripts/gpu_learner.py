"""On the GPU machine: the measurements lessons 00-05 quote and the learner's path depends on.

    python3 scripts/gpu_learner.py [--out results/gpu/learner.json] [--budget SECONDS] [--skip PART ...]

Parts, in order, each recorded as it finishes (a run cut off by its time limit keeps what it did):
- ``capstone``: lesson 04's speed check (``04_chunked_linear_attention.chunked_speed``) on the lesson's own
  kernel with chunks of 16 (expected to fail: 1.29 ms against fla-core's 0.76) and of 64 (expected to pass);
- ``prefetch``: the recurrent ladder's ``fused`` and ``prefetch`` versions, validated then timed (lesson 02);
- ``graph``: launch cost of a one-program vector add, one by one and replayed from a CUDA graph (lesson 05);
- ``notebooks``: the solution notebooks of lessons 01, 02 and 05 run whole, with the output of the cells that
  changed (roofline, working set, benchmark, CUDA graph, driver-API launch of both exports).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "checks" / "lessons"))

CELLS = {"01_memory_hierarchy": ["copy_measure", "bench_copy", "l2_widget", "roofline"],
         "02_naive_hbm_loops": ["bench"],
         "05_ptx_export_rust": ["graph", "export", "driver", "rust"]}


def capstone() -> dict:
    from lessonkit import grade, kernel, solution_cells

    fused = kernel(solution_cells("04_chunked_linear_attention")["ex3-fused"], "chunked_attention_kernel")
    out = {}
    for bt in (16, 64):
        chunk = dict(BT=bt, BV=64, num_warps=4, num_stages=2)
        t0 = time.time()
        got = grade("04_chunked_linear_attention.chunked_speed", chunk, fused)
        out[f"BT={bt}"] = {"chunk": chunk, "passed": got.passed, "message": got.message, "perf": got.perf,
                           "seconds": round(time.time() - t0, 1)}
        print(f"capstone, chunks of {bt}: {'PASS' if got.passed else 'FAIL'} {got.message[:300]}", flush=True)
    return out


def prefetch() -> dict:
    from kernels.bench import run

    result = run("recurrent", only=["fused", "prefetch"], out=ROOT / "results" / "gpu" / "learner-recurrent")
    rows = []
    for row in result["rows"]:
        rows.append({"problem": row["problem"], "hbm_floor_ms": row["hbm_floor_ms"],
                     **{v: {k: e.get(k) for k in ("status", "ms", "rel_error")} for v, e in row["versions"].items()}})
    return {"rows": rows}


def graph() -> dict:
    from kernels.bench import graph_launch_us
    from kernels.testing import randn
    from kernels.vector_add import naive_vector_add

    x, y = randn(4096, seed=0), randn(4096, seed=1)
    got = graph_launch_us(lambda: naive_vector_add(x, y))
    print(f"one-program vector add: {got['eager_us']:.2f} us a launch one by one, {got['graph_us']:.2f} us from a "
          "CUDA graph", flush=True)
    return got


def notebooks() -> dict:
    from grader.course.run import problems, run_lesson

    out = {}
    for lesson, cells in CELLS.items():
        t0 = time.time()
        run = run_lesson(lesson, "solution")
        shown = {}
        for cell in run.nb.cells:
            if cell.get("id") in cells:
                text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
                images = sum("image/png" in o.get("data", {}) for o in cell.get("outputs", []))
                shown[cell.id] = {"text": text[-3000:], "images": images}
        out[lesson] = {"seconds": round(time.time() - t0, 1), "problems": problems(run), "cells": shown}
        print(f"{lesson}: {run.seconds:.0f} s, problems: {problems(run) or 'none'}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/gpu_learner.py", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "results" / "gpu" / "learner.json")
    ap.add_argument("--budget", type=float, default=280.0, help="seconds; parts not started by then are skipped")
    ap.add_argument("--skip", nargs="*", default=[], help="parts to leave out")
    args = ap.parse_args(argv)

    import kernels

    record = {"gpu": None, **kernels.device.machine()}
    t0 = time.time()
    for name, part in (("capstone", capstone), ("prefetch", prefetch), ("graph", graph), ("notebooks", notebooks)):
        if name in args.skip:
            continue
        if time.time() - t0 > args.budget:
            record[name] = {"skipped": f"budget of {args.budget:.0f} s spent"}
            continue
        try:
            record[name] = part()
        except Exception as e:  # noqa: BLE001 (one part failing must not cost the others)
            record[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-3000:]}
            print(f"{name} failed: {type(e).__name__}: {e}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
