"""Lesson 06 on the GPU in one go: its tests, the solution notebook top to bottom, and its zoo.

    python3 scripts/gpu_lesson06.py [--budget SECONDS] [--skip-tests] [--skip-notebook] [--skip-zoo] [--zoo-jobs N]

Each part gets what is left of the budget (the zoo, longest, goes last) and the record is saved after each.
Writes results/gpu/lesson06.json (date, GPU, versions; per test file its outcome and seconds; the zoo's verdicts;
the notebook's status, seconds, first errors, and the times it measured: planted vs fixed, the autotune sweep),
the zoo's own report results/gpu/zoo-lesson06.json, and the executed notebook, with its outputs, to
results/gpu/notebooks/06_profile_compile_autotune.ipynb. Needs jupytext, nbclient and ipykernel (the .gpu-wheels).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
LESSON = "06_profile_compile_autotune"
TESTS = ("tests/kernels/test_profile.py", "tests/checks/lessons/test_l06_profile_compile_autotune.py",
         "tests/viz/test_profile_views.py")
OUT = ROOT / "results" / "gpu"


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def run_tests(left, reserve: float) -> list[dict]:
    rows = []
    for i, path in enumerate(TESTS):
        t0 = time.perf_counter()
        # what comes after (the notebook ~60 s on the H200, the zoo ~30 s) is reserved; the tests share the rest
        limit = max(30.0, (left() - reserve) / (len(TESTS) - i))
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=5",
                                   path], cwd=ROOT, capture_output=True, text=True, timeout=limit,
                                  env=_env())
        except subprocess.TimeoutExpired:
            rows.append({"tests": path, "status": "timeout", "seconds": round(time.perf_counter() - t0, 1)})
            print(f"{path}: timed out", flush=True)
            continue
        secs = time.perf_counter() - t0
        tail = proc.stdout.strip().splitlines()[-15:]
        rows.append({"tests": path, "status": "ok" if proc.returncode == 0 else f"failed ({proc.returncode})",
                     "seconds": round(secs, 1), "tail": tail})
        print(f"{path:62s} {rows[-1]['status']:12s} {secs:6.1f} s", flush=True)
        if proc.returncode:
            print("\n".join(tail), flush=True)
    return rows


def run_zoo(jobs: int, left) -> dict:
    report = OUT / "zoo-lesson06.json"
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "grader.zoo", "--lesson", LESSON, "--jobs", str(jobs),
                               "--out", str(report)], cwd=ROOT, capture_output=True, text=True,
                              timeout=max(10, left() - 10), env=_env())
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        print(f"zoo: timed out after {time.perf_counter() - t0:.0f} s", flush=True)
        return {"status": "timeout", "seconds": round(time.perf_counter() - t0, 1), "tail": out.splitlines()[-20:]}
    secs = time.perf_counter() - t0
    bad = [ln for ln in proc.stdout.splitlines() if ln.startswith("BAD") or ln.startswith("      ")]
    print(f"zoo: exit {proc.returncode} in {secs:.0f} s; {proc.stdout.strip().splitlines()[-1:]}", flush=True)
    for ln in bad[:40]:
        print("   ", ln[:400], flush=True)
    row = {"status": "ok" if proc.returncode == 0 else f"failed ({proc.returncode})", "seconds": round(secs, 1),
           "bad": bad[:60], "stderr_tail": proc.stderr.strip().splitlines()[-10:]}
    if report.exists():
        data = json.loads(report.read_text())
        row.update({k: data.get(k) for k in ("entries", "wrong", "right", "bad")})
    return row


def run_notebook(out: pathlib.Path) -> dict:
    import nbclient
    import nbformat

    from grader.course import SOLUTIONS, solution_notebook

    nb = solution_notebook(LESSON, validate=False)
    t0 = time.perf_counter()
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                                     resources={"metadata": {"path": str(SOLUTIONS)}})
    client.execute(env=_env())
    secs = time.perf_counter() - t0
    errors = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                errors.append(f"{cell.get('id')}: {o.get('ename')}: {o.get('evalue')}"[:1500])
    out.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out / f"{LESSON}.ipynb")
    row = {"notebook": LESSON, "status": "ok" if not errors else "failed", "seconds": round(secs, 1),
           "errors": errors}
    artifacts = ROOT / "artifacts" / LESSON
    for name in ("times", "sweep"):
        path = artifacts / f"{name}.json"
        if path.exists():
            row[name] = json.loads(path.read_text())
    print(f"{LESSON:32s} {row['status']:7s} {secs:7.1f} s", flush=True)
    for e in errors:
        print("   ", e, flush=True)
    for r in row.get("times", {}).get("rows", []):
        print(f"    {r['version']:8s} {r['ms']:8.3f} ms", flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=560, help="seconds for all of it")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-zoo", action="store_true")
    ap.add_argument("--skip-notebook", action="store_true")
    ap.add_argument("--zoo-jobs", type=int, default=3)
    args = ap.parse_args()


    import kernels

    record = kernels.device.machine()
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "lesson06.json"

    def save():
        path.write_text(json.dumps(record, indent=1, default=str) + "\n")

    start = time.perf_counter()

    def left() -> float:
        return args.budget - (time.perf_counter() - start)

    # a part skipped keeps its result from the run before, so the record stays whole
    earlier = json.loads(path.read_text()) if path.is_file() else {}
    reserve = (0 if args.skip_notebook else 70) + (0 if args.skip_zoo else 40)
    record["tests"] = earlier.get("tests", []) if args.skip_tests else run_tests(left, reserve)
    save()
    record["notebook"] = earlier.get("notebook", {}) if args.skip_notebook else run_notebook(OUT / "notebooks")
    save()
    record["zoo"] = earlier.get("zoo", {}) if args.skip_zoo else run_zoo(args.zoo_jobs, left)
    save()
    parts = record["tests"] + ([record["zoo"]] if record["zoo"] else []) + [record["notebook"]]
    return 0 if all(r.get("status") == "ok" for r in parts if r) else 1


if __name__ == "__main__":
    sys.exit(main())
