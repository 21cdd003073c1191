"""Lessons 03-05 on the GPU in one go: their checks' GPU tests, then each solution notebook top to bottom.

    python3 scripts/gpu_lessons_03_05.py [--skip-tests] [--full-table] [LESSON ...]

Writes results/gpu/lessons-03-05.json (date, GPU, versions; per test file its outcome and seconds; per notebook
its status, seconds and the first error) and each executed notebook, with its outputs, to
results/gpu/notebooks/<lesson>.ipynb. ``--full-table`` runs lesson 04's benchmark at all four T of the H200 table.
Needs jupytext, nbclient and ipykernel (the .gpu-wheels) and, for lesson 05's Rust launch, the prebuilt
rust/target/release/workbook-launch.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
LESSONS = ("03_tiled_sram", "04_chunked_linear_attention", "05_ptx_export_rust")
TESTS = ("tests/checks/lessons/test_l03_tiled_sram.py", "tests/checks/lessons/test_l04_chunked_linear_attention.py",
         "tests/checks/lessons/test_l05_ptx_export_rust.py")


def run_tests() -> list[dict]:
    rows = []
    for path in TESTS:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
                               "--durations=5", path], cwd=ROOT, capture_output=True, text=True, timeout=600)
        secs = time.perf_counter() - t0
        tail = proc.stdout.strip().splitlines()[-12:]
        rows.append({"tests": path, "status": "ok" if proc.returncode == 0 else f"failed ({proc.returncode})",
                     "seconds": round(secs, 1), "tail": tail})
        print(f"{path:60s} {rows[-1]['status']:12s} {secs:6.1f} s", flush=True)
        if proc.returncode:
            print("\n".join(tail), flush=True)
    return rows


def run_notebook(lesson: str, full_table: bool, out: pathlib.Path) -> dict:
    import jupytext
    import nbclient
    import nbformat

    nb = jupytext.read(ROOT / "solutions" / f"{lesson}.py")
    if full_table:
        for cell in nb.cells:
            cell.source = cell.source.replace("FULL_TABLE = False", "FULL_TABLE = True")
    t0 = time.perf_counter()
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3", allow_errors=True,
                                     resources={"metadata": {"path": str(ROOT / "solutions")}})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    client.execute(env=env)
    secs = time.perf_counter() - t0
    errors = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                errors.append(f"{cell.get('id')}: {o.get('ename')}: {o.get('evalue')}"[:1500])
    out.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out / f"{lesson}.ipynb")
    row = {"notebook": lesson, "status": "ok" if not errors else "failed", "seconds": round(secs, 1),
           "errors": errors}
    print(f"{lesson:32s} {row['status']:7s} {secs:7.1f} s", flush=True)
    for e in errors:
        print("   ", e, flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lessons", nargs="*", default=list(LESSONS))
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--full-table", action="store_true")
    args = ap.parse_args()

    import torch
    import triton

    import kernels

    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "where": kernels.describe(), "torch": torch.__version__, "triton": triton.__version__,
              "tests": [] if args.skip_tests else run_tests(), "notebooks": []}
    out = ROOT / "results" / ("gpu" if kernels.ON_GPU else "cpu")
    for lesson in args.lessons:
        record["notebooks"].append(run_notebook(lesson, args.full_table, out / "notebooks"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "lessons-03-05.json").write_text(json.dumps(record, indent=1) + "\n")
    ok = all(r["status"] == "ok" for r in record["tests"] + record["notebooks"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
