"""The leaderboard of the speed-graded exercises: per GPU model, times as multiples of that machine's floor.

A row is one student's timed check of one exercise on one GPU model. Only results that passed the correctness
re-check on fresh inputs after timing get a row: a check that failed a case, the re-check, the comparison with
the baseline's output at the timed size, or that beat the hardware floor (a kernel that skips work) is left
out; a correct kernel that missed the speed requirement stays, marked as such. The time is shown as a multiple
of the floor the grading machine measured for the problem (bytes / its copy bandwidth, FLOPs / its matmul rate),
so runs on machines of one model compare, and models are never mixed in one table. Exercises of later lessons
(the capstone) come first.

``reports/leaderboard.html`` and ``reports/leaderboard.csv`` in the course folder; while a distributed run grades
they are rewritten after every result, with how many are done (the page reloads itself until the run ends).
"""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import json
import math
import os
import pathlib
import time

__all__ = ["Row", "rows_of", "from_results_dir", "write", "Live", "gpu_model"]


@dataclasses.dataclass
class Row:
    gpu: str
    exercise: str
    student: str
    lesson: str
    student_ms: float
    floor_ms: float
    baseline_ms: float
    case: str
    meets: bool  # the speed requirement too

    @property
    def x_floor(self) -> float:
        return self.student_ms / self.floor_ms

    @property
    def speedup(self) -> float:
        return self.baseline_ms / self.student_ms


def gpu_model(where: str) -> str | None:
    """``"NVIDIA H200"`` from ``kernels.device.describe()``'s line; ``None`` when it was not a GPU."""
    if not where or not where.startswith("GPU: "):
        return None
    return where[5:].split(",")[0].split("|")[0].strip() or None


def _number(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def rows_of(result) -> list[Row]:
    """The leaderboard rows of one graded notebook (a ``NotebookResult`` or its ``as_dict()``)."""
    d = result if isinstance(result, dict) else result.as_dict()
    gpu = gpu_model(d.get("where", ""))
    if gpu is None:
        return []
    out = []
    for cell in d.get("cells", []):
        for c in cell.get("checks", []):
            perf = c.get("perf") or {}
            s, floor, base = (_number(perf.get(k)) for k in ("student_ms", "floor_ms", "baseline_ms"))
            if not (s and floor and base) or perf.get("faults") or perf.get("mismatch"):
                continue
            lines = c.get("lines") or []
            slow_only = (c.get("status") == "failed" and len(lines) == 1
                         and lines[0].startswith(f"{c.get('exercise')}: too slow at"))
            if not (c.get("passed") or slow_only):
                continue  # a failed case, the re-check after timing, or faster than the floor
            out.append(Row(gpu, c["exercise"], d["student"], d["lesson"], s, floor, base, str(perf.get("case", "")),
                           bool(c.get("passed"))))
    return out


def from_results_dir(root: pathlib.Path) -> list[Row]:
    """Every row of the results recorded in course folder ``root`` (``reports/results/<student>/<lesson>.json``)."""
    rows = []
    for p in sorted((pathlib.Path(root) / "reports" / "results").glob("*/*.json")):
        try:
            rows += rows_of(json.loads(p.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return rows


def _best(rows: list[Row]) -> dict[tuple[str, str], list[Row]]:
    """(gpu, exercise) -> one row per student (their fastest), fastest first."""
    best: dict[tuple[str, str, str], Row] = {}
    for r in rows:
        k = (r.gpu, r.exercise, r.student)
        if k not in best or r.x_floor < best[k].x_floor:
            best[k] = r
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in best.values():
        groups.setdefault((r.gpu, r.exercise), []).append(r)
    def later_first(k):
        lesson = k[1].split(".")[0]
        return (k[0], -int(lesson[:2]) if lesson[:2].isdigit() else 0, k[1])

    order = sorted(groups, key=later_first)
    return {k: sorted(groups[k], key=lambda r: (r.x_floor, r.student)) for k in order}


def _atomic(path: pathlib.Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write(rows: list[Row], out: pathlib.Path, progress: tuple[int, int] | None = None) -> tuple[pathlib.Path,
                                                                                                pathlib.Path]:
    """``out/leaderboard.html`` and ``out/leaderboard.csv``; ``progress`` (done, total) while grading."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    groups = _best(rows)
    head = ["gpu", "exercise", "rank", "student", "lesson", "time_ms", "floor_ms", "x_floor", "baseline_ms",
            "speedup", "meets_requirement", "case"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(head)
    for (gpu, ex), rs in groups.items():
        for i, r in enumerate(rs, 1):
            w.writerow([gpu, ex, i, r.student, r.lesson, f"{r.student_ms:.5f}", f"{r.floor_ms:.5f}",
                        f"{r.x_floor:.3f}", f"{r.baseline_ms:.5f}", f"{r.speedup:.3f}", "yes" if r.meets else "no",
                        r.case])
    csv_path = out / "leaderboard.csv"
    _atomic(csv_path, buf.getvalue())
    e = html.escape
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    state = (f"grading: {progress[0]} of {progress[1]} done (this page reloads itself)" if progress
             and progress[0] < progress[1] else "final")
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>Leaderboard</title>",
             "<meta http-equiv='refresh' content='10'>" if progress and progress[0] < progress[1] else "",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:2em}"
             "td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}td.l,th.l{text-align:left}"
             "tr.slow{color:#888}</style></head><body>",
             f"<h1>Leaderboard</h1><p>{e(state)}; {when}. Times are multiples of the floor that the grading "
             "GPU measured for the problem (its bytes at the measured copy bandwidth, its FLOPs at the measured "
             "matmul rate): 1.0 would be the hardware's limit. Only kernels that passed every case and the "
             "correctness re-check on fresh inputs after timing are listed; grey rows are correct but missed "
             "the speed requirement.</p>"]
    if not groups:
        parts.append("<p>No timed results yet (speed is graded on a GPU only).</p>")
    for (gpu, ex), rs in groups.items():
        parts.append(f"<h2>{e(ex)} on {e(gpu)}</h2><table><tr><th>#</th><th class='l'>student</th>"
                     "<th>× floor</th><th>ms</th><th>floor ms</th><th>vs baseline</th><th class='l'>case</th></tr>")
        for i, r in enumerate(rs, 1):
            parts.append(f"<tr{'' if r.meets else ' class=slow'}><td>{i}</td><td class='l'>{e(r.student)}</td>"
                         f"<td>{r.x_floor:.2f}</td><td>{r.student_ms:.4f}</td><td>{r.floor_ms:.4f}</td>"
                         f"<td>{r.speedup:.2f}x</td><td class='l'>{e(r.case)}</td></tr>")
        parts.append("</table>")
    parts.append("</body></html>\n")
    html_path = out / "leaderboard.html"
    _atomic(html_path, "".join(parts))
    return html_path, csv_path


class Live:
    """The leaderboard kept current while a run grades: ``add`` after each result, ``finish`` at the end."""

    def __init__(self, out: pathlib.Path, earlier: list[Row] | None = None):
        self.out = pathlib.Path(out)
        self.rows: list[Row] = list(earlier or [])
        self.html = self.out / "leaderboard.html"

    def add(self, done: int, total: int, result) -> None:
        new = rows_of(result)
        self.rows += new
        write(self.rows, self.out, (done, total))

    def finish(self, rows: list[Row] | None = None) -> None:
        if rows is not None:
            self.rows = rows
        write(self.rows, self.out)
