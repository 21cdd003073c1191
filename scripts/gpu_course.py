"""Run the lessons as they are graded, on this machine: the solution and the untouched student copy.

The solution must pass every graded cell; the student copy from ``course/`` (locked cells restored, as
autograding does) must fail every graded cell while its setup cell still runs. Prints a table and writes
``results/<gpu|cpu>/course.json`` (machine, versions, seconds, what each graded cell printed or raised).

    python3 scripts/gpu_course.py [LESSON ...] [--full] [--copy solution|student|both] [--cell-timeout S]

By default only the cells grading needs run (every code cell up to the last graded one, less widgets and
benchmarks), all lessons of one copy in a single kernel: one start-up and one import for the lot. ``--full``
runs every notebook whole, one kernel each, and records each notebook's run time. Needs nbclient, ipykernel,
jupytext and nbformat.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _cell_text(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        elif o.get("output_type") == "error":
            parts.append(f"{o.get('ename')}: {o.get('evalue')}")
    return "".join(parts)[-3000:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/gpu_course.py", description=__doc__.splitlines()[0])
    ap.add_argument("lessons", nargs="*", help="lesson ids or numbers (default: all)")
    ap.add_argument("--full", action="store_true", help="run every notebook whole, one kernel each")
    ap.add_argument("--copy", choices=("solution", "student", "both"), default="both")
    ap.add_argument("--cell-timeout", type=int, default=300, help="seconds before a cell counts as hung")
    args = ap.parse_args(argv)


    import kernels
    from grader.course import graded_cells, lesson_ids
    from grader.course.run import execute, lesson_notebook, problems, run_graded_together

    lessons = lesson_ids(args.lessons or None)
    copies = ("solution", "student") if args.copy == "both" else (args.copy,)
    t0 = time.perf_counter()
    rows: dict[str, dict] = {lesson: {"lesson": lesson} for lesson in lessons}
    bad = 0
    out = ROOT / "results" / ("gpu" if kernels.ON_GPU else "cpu")
    out.mkdir(parents=True, exist_ok=True)
    path = out / ("course-full.json" if args.full else "course.json")

    def save(rows):  # after each copy, so a run cut short by a time limit still leaves what it found
        record = {
            **kernels.device.machine(),
            "mode": "full notebooks" if args.full else "graded cells only, one kernel per copy",
            "seconds": round(time.perf_counter() - t0, 1),
            "lessons": list(rows.values()),
        }
        path.write_text(json.dumps(record, indent=1) + "\n")
        return record

    def record_run(run, copy):
        nonlocal bad
        found = problems(run)
        bad += bool(found)
        cells = {c.id: c for c in run.nb.cells}
        rows[run.lesson][copy] = {
            "status": "ok" if not found else "failed", "seconds": round(run.seconds, 1), "problems": found,
            "graded": {g: {"failed": run.failed(g), "output": _cell_text(cells[g])} for g in graded_cells(run.nb)},
        }
        print(f"{run.lesson:30s} {copy:8s} {rows[run.lesson][copy]['status']:6s} {run.seconds:7.1f} s"
              f"{'' if args.full else ' (all lessons, one kernel)'}", flush=True)
        for p in found:
            print(f"    {p}", flush=True)

    record = save(rows)
    for copy in copies:
        if args.full:  # one kernel per notebook; saved after each, so a cut-off run keeps the finished ones
            for lesson in lessons:
                try:
                    record_run(execute(lesson_notebook(lesson, copy), lesson=lesson, copy=copy,
                                       cell_timeout=args.cell_timeout), copy)
                except Exception as e:  # noqa: BLE001 - a dead kernel or a hang: record it, go on
                    bad += 1
                    print(f"{lesson} {copy}: ERROR {type(e).__name__}: {e}", flush=True)
                    rows[lesson][copy] = {"status": "error", "problems": [f"{type(e).__name__}: {e}"]}
                record = save(rows)
            continue
        try:
            runs = run_graded_together(lessons, copy, cell_timeout=args.cell_timeout)
        except Exception as e:  # noqa: BLE001 - a dead kernel or a hang: record it, try the other copy
            bad += 1
            print(f"{copy}: ERROR {type(e).__name__}: {e}", flush=True)
            for lesson in lessons:
                rows[lesson][copy] = {"status": "error", "problems": [f"{type(e).__name__}: {e}"]}
            record = save(rows)
            continue
        for run in runs:
            record_run(run, copy)
        record = save(rows)
    print(f"wrote {path} in {record['seconds']} s: {'all good' if not bad else f'{bad} problem runs'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
