"""Run every lesson as it is graded, on this machine: the solution notebook and the untouched student copy.

For each lesson in ``solutions/`` the solution notebook must run without an error and pass every graded cell;
the student copy from ``course/`` (locked cells restored, as autograding does) must fail every graded cell
while its setup and widget cells still run. Prints a table and writes ``results/<gpu|cpu>/course.json`` with
the machine, versions, the run time of each notebook and what each graded cell printed or raised.

    python3 scripts/gpu_course.py [LESSON ...]      # needs nbclient, ipykernel, jupytext, nbformat
"""

from __future__ import annotations

import datetime
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _cell_text(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        elif o.get("output_type") == "error":
            parts.append(f"{o.get('ename')}: {o.get('evalue')}")
        elif "text/plain" in o.get("data", {}):
            parts.append(o["data"]["text/plain"])
    return "".join(parts)[-3000:]


def main(argv: list[str]) -> int:
    import torch
    import triton

    import kernels
    from kernels.course import graded_cells, lesson_ids
    from kernels.course.run import problems, run_lesson

    rows, bad = [], 0
    for lesson in lesson_ids(argv or None):
        row = {"lesson": lesson}
        for copy in ("solution", "student"):
            try:
                run = run_lesson(lesson, copy)
            except Exception as e:  # noqa: BLE001 - record and go on to the next notebook
                row[copy] = {"status": "error", "problems": [f"{type(e).__name__}: {e}"]}
                bad += 1
                print(f"{lesson:30s} {copy:8s} ERROR {e}", flush=True)
                continue
            found = problems(run)
            bad += bool(found)
            cells = {c.id: c for c in run.nb.cells}
            row[copy] = {"status": "ok" if not found else "failed", "seconds": round(run.seconds, 1),
                         "problems": found,
                         "graded": {g: {"failed": run.failed(g), "output": _cell_text(cells[g])}
                                    for g in graded_cells(run.nb)}}
            print(f"{lesson:30s} {copy:8s} {row[copy]['status']:6s} {run.seconds:7.1f} s", flush=True)
            for p in found:
                print(f"    {p}", flush=True)
        rows.append(row)
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "where": kernels.describe(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "lessons": rows,
    }
    out = ROOT / "results" / ("gpu" if kernels.ON_GPU else "cpu")
    out.mkdir(parents=True, exist_ok=True)
    (out / "course.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out / 'course.json'}: {'all good' if not bad else f'{bad} notebook runs with problems'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
