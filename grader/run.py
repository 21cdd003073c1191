"""Grading a class: submissions in parallel slots, a progress bar, the summary table and the JSON report."""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from . import policy
from .collect import Submission
from .grade import CellResult, Grader, NotebookResult
from .policy import excluded_points

__all__ = ["grade_class", "table", "Progress"]

if sys.version_info < (3, 12):
    # CPython 3.11 counts the depth of the AST it converts per interpreter, not per thread: two grading threads
    # parsing at once can fail with "AST constructor recursion depth mismatch". Parse one at a time.
    import ast as _ast

    if not getattr(_ast.parse, "_one_at_a_time", False):
        _parse, _parse_lock = _ast.parse, threading.Lock()

        def _locked_parse(*args, **kwargs):
            with _parse_lock:
                return _parse(*args, **kwargs)

        _locked_parse._one_at_a_time = True
        _ast.parse = _locked_parse


class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, total: int, label: str = "grading", every: float | None = None):
        self.total, self.done, self.label = total, 0, label
        self.t0 = time.time()
        self.lock = threading.Lock()
        self.tty = sys.stderr.isatty()
        self.running: dict[str, float] = {}  # submission -> when its grading started
        self.every = every if every is not None else (5.0 if self.tty else 30.0)
        if total:
            threading.Thread(target=self._tick, daemon=True, name="progress").start()

    def begin(self, what: str) -> None:
        with self.lock:
            self.running[what] = time.time()

    def _tick(self) -> None:
        """A live line while submissions run longer than ``every`` seconds (a hang is seen, not silence)."""
        while True:
            time.sleep(self.every)
            with self.lock:
                if self.done >= self.total:
                    return
                now = time.time()
                slow = [f"{w} {now - t:.0f} s" for w, t in sorted(self.running.items(), key=lambda x: x[1])
                        if now - t >= self.every]
                if not slow:
                    continue
                line = f"{self.label}: {self.done}/{self.total} done; still running: {', '.join(slow)}"
                sys.stderr.write(("\r" + line[:150].ljust(150)) if self.tty else line + "\n")
                sys.stderr.flush()

    def step(self, what: str, key: str | None = None, details: list[str] = ()) -> None:
        """One more done; ``details`` (a submission's lost points) go under its line where stderr is a log, so a
        batch cut off before its table still says why each finished submission lost what it lost."""
        with self.lock:
            self.running.pop(key or what, None)
            self.done += 1
            n = 30
            filled = int(n * self.done / max(self.total, 1))
            el = time.time() - self.t0
            eta = el / self.done * (self.total - self.done)
            line = (f"{self.label} [{'#' * filled}{'.' * (n - filled)}] {self.done}/{self.total} "
                    f"{el:4.0f}s elapsed, ~{eta:4.0f}s left  {what}")
            if self.tty:
                sys.stderr.write("\r" + line[:150].ljust(150))
                if self.done == self.total:
                    sys.stderr.write("\n")
            else:
                sys.stderr.write(line + "\n" + "".join(f"    {d}\n" for d in details))
            sys.stderr.flush()


def _missing(sub: Submission, source: dict) -> NotebookResult:
    from .notebook import split

    _, graded = split(source)
    reason = "; ".join(sub.notes) or "not submitted"
    cells = [CellResult(g.grade_id, g.points, 0.0, error=f"scored 0: {reason}") for g in graded]
    return NotebookResult(sub.student, sub.lesson, cells, notes=list(sub.notes))


def grade_class(grader: Grader, subs: list[Submission], sources: dict[str, dict], releases: dict[str, dict],
                *, slots: int = 2, progress: bool = True, speed_policy: str | None = None) -> list[NotebookResult]:
    """Grade every submission; ``slots`` run at once, each with its own sandbox uids. ``speed_policy`` (None: the
    caller scores speed cells itself) is applied to each result before its progress line, so the line shows the
    score the table will (:mod:`grader.policy`)."""
    free: queue.Queue[int] = queue.Queue()
    for s in range(slots):
        free.put(s)
    bar = Progress(len(subs)) if progress else None

    def one(sub: Submission) -> NotebookResult:
        key = f"{sub.student}/{sub.lesson}"
        if bar:
            bar.begin(key)
        if sub.notebook is None:
            r = _missing(sub, sources[sub.lesson])
        else:
            slot = free.get()
            try:
                r = grader.grade(sub.student, sub.lesson, sub.notebook, sources[sub.lesson],
                                 releases.get(sub.lesson), slot=slot)
            except Exception as e:  # a grader bug must not abort the batch; it is reported
                _, graded = __import__("grader.notebook", fromlist=["split"]).split(sources[sub.lesson])
                r = NotebookResult(sub.student, sub.lesson,
                                   [CellResult(g.grade_id, g.points, 0.0, error=f"grader error: {e!r}")
                                    for g in graded])
            finally:
                free.put(slot)
            r.notes = list(sub.notes) + r.notes
        if speed_policy is not None:
            policy.apply([r], speed_policy)
        if bar:
            bar.step(f"{key} {r.score:g}/{r.max_score:g}", key,
                     [f"{c.grade_id}: {c.gist(200)}" for c in r.cells if not c.passed])
        return r

    with ThreadPoolExecutor(max_workers=slots) as pool:
        return list(pool.map(one, subs))


def table(results: list[NotebookResult], expected: dict | None = None, mode: str = "") -> str:
    """Student x lesson: points (``*`` marks a score other than expected), failed checks, time."""
    lessons = sorted({r.lesson for r in results})
    students = list(dict.fromkeys(r.student for r in results))
    by = {(r.student, r.lesson): r for r in results}
    short = {lesson: lesson.split("_", 1)[0] for lesson in lessons}
    head = ["student"] + [short[x] for x in lessons] + ["total", "failed", "time"]
    rows = []
    for st in students:
        row, tot, mx, fails, secs = [st], 0.0, 0.0, 0, 0.0
        for lesson in lessons:
            r = by.get((st, lesson))
            if r is None:
                row.append("")
                continue
            mark = ""
            if expected is not None and (st, lesson) in expected and abs(expected[(st, lesson)] - r.score) > 1e-9:
                mark = f"*(want {expected[(st, lesson)]:g})"
            row.append(f"{r.score:g}/{r.max_score:g}{mark}")
            tot += r.score
            mx += r.max_score - excluded_points(r)
            fails += sum(1 for c in r.cells if not c.passed)
            secs += r.seconds
        row += [f"{tot:g}/{mx:g}", str(fails), f"{secs:.0f}s"]
        rows.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [f"lessons: {', '.join(f'{short[x]}={x}' for x in lessons)}" + (f"; mode: {mode}" if mode else ""),
             fmt.format(*head), fmt.format(*["-" * w for w in widths])]
    lines += [fmt.format(*r) for r in rows]
    return "\n".join(lines)


def report(results: list[NotebookResult], path, extra: dict | None = None) -> dict:
    data = {"results": [r.as_dict() for r in results], **(extra or {})}
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    return data
