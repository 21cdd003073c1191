"""A term's record beside nbgrader's gradebook: every result kept, one seed per term, what a regrade changed, the
class CSV.

``reports/results/<student>/<lesson>.json`` holds the latest result of each submission (``autograde`` writes
it); ``report`` prints them all (the whole term, not only the last run); ``reports/seed.json`` is the term's
master seed, drawn at the first autograde and used by every later one (``--seed`` or ``--new-seed`` to change
it), so a regrade of an unchanged notebook gets the same inputs and the same score; ``reports/history.jsonl``
has one line per regrade that changed a score. ``export`` writes one row per student (roster names included),
with each assigned lesson's total, late penalty and per-cell points.
"""

from __future__ import annotations

import csv
import json
import pathlib
import time

from .results import CellResult, CheckResult, NotebookResult

__all__ = ["load_results", "term_seed", "changes", "record_changes", "write_csv", "overrides", "gradebook_lines"]


def _result(d: dict) -> NotebookResult:
    d = dict(d)
    d.pop("score", None)
    d.pop("max_score", None)
    cells = []
    for c in d.pop("cells", []):
        c = dict(c)
        checks = [CheckResult(**k) for k in c.pop("checks", [])]
        cells.append(CellResult(checks=checks, **c))
    known = {k: v for k, v in d.items() if k in NotebookResult.__dataclass_fields__}
    return NotebookResult(cells=cells, **known)


def load_results(root: pathlib.Path) -> dict[tuple[str, str], NotebookResult]:
    """(student, lesson) -> the latest result recorded for it."""
    out = {}
    base = root / "reports" / "results"
    for p in sorted(base.glob("*/*.json")) if base.exists() else []:
        try:
            r = _result(json.loads(p.read_text()))
        except (ValueError, TypeError, KeyError):
            continue
        out[(r.student, r.lesson)] = r
    return out


def term_seed(root: pathlib.Path, given: int | None = None, *, new: bool = False) -> tuple[int, str]:
    """The term's master seed and a line saying where it came from; recorded in ``reports/seed.json``."""
    from kernels.checks import engine

    path = root / "reports" / "seed.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(path.read_text()) if path.exists() else None
    if given is None and not new and old is not None:
        return int(old["seed"]), f"the term's seed {old['seed']} (drawn {old['since']}; --new-seed for another)"
    seed = given if given is not None else engine.draw_seed()
    path.write_text(json.dumps({"seed": seed, "since": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                "before": ([old] + old.get("before", []))[:20] if old else []}, indent=1))
    why = "given" if given is not None else "new"
    return seed, f"seed {seed} ({why}; recorded in {path.relative_to(root)}: later runs reuse it)"


def changes(old: NotebookResult | None, new: NotebookResult) -> str:
    """One line saying what a regrade changed ("" when nothing did)."""
    if old is None:
        return ""
    diffs = []
    before = {c.grade_id: c for c in old.cells}
    for c in new.cells:
        o = before.get(c.grade_id)
        if o is None or abs(o.score - c.score) > 1e-9:
            first = c.gist() if c.score < c.points else "passed"
            diffs.append(f"{c.grade_id} {o.score if o else 0:g}->{c.score:g} ({first})")
    if not diffs and abs(old.score - new.score) < 1e-9:
        return ""
    return f"{new.student}/{new.lesson}: {old.score:g} -> {new.score:g}: " + "; ".join(diffs)


def record_changes(root: pathlib.Path, results: list[NotebookResult], seed: int) -> list[str]:
    """Compare ``results`` with the recorded ones (before they are replaced); log and return the changes."""
    before = load_results(root)
    lines = [line for r in results if (line := changes(before.get((r.student, r.lesson)), r))]
    if lines:
        with (root / "reports" / "history.jsonl").open("a") as f:
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
            for line in lines:
                f.write(json.dumps({"when": when, "seed": seed, "change": line}) + "\n")
    return lines


def write_csv(root: pathlib.Path, path: pathlib.Path) -> pathlib.Path:
    """One row per student: roster name, then per assigned lesson its score (less any late penalty), the late
    penalty, and each graded cell's points; the total. Assigned lessons: those anyone's work was collected for."""
    from .lms import kept_roster

    results = load_results(root)
    lessons = {lesson for _, lesson in results}
    for sdir in (root / "submitted").glob("*") if (root / "submitted").exists() else []:
        lessons |= {d.name for d in sdir.iterdir() if d.is_dir()} if sdir.is_dir() else set()
    lessons = sorted(lessons)
    roster = kept_roster(root)
    students = sorted({s for s, _ in results} | set(roster.names if roster else []))
    penalties, by_hand = _marks(root)
    cells: dict[str, list[tuple[str, float]]] = {}
    for (_, lesson), r in sorted(results.items()):
        cells.setdefault(lesson, [])
        for c in r.cells:
            if c.grade_id not in [g for g, _ in cells[lesson]]:
                cells[lesson].append((c.grade_id, c.points))
    head = ["student", "name"]
    for lesson in lessons:
        head += [lesson, f"{lesson} late penalty"] + [f"{lesson}:{g}" for g, _ in cells.get(lesson, [])]
    head += ["total", "max"]
    rows = []
    for st in students:
        row = [st, roster.names.get(st, "") if roster else ""]
        total = maximum = 0.0
        for lesson in lessons:
            r = results.get((st, lesson))
            pen = penalties.get((st, lesson), 0.0)
            points = _points(r, by_hand)  # an instructor's score takes the place of the grader's
            score = max(0.0, sum(points.values()) - pen)
            row += [f"{score:g}", f"{pen:g}"]
            row += [f"{points.get(g, 0.0):g}" for g, _ in cells.get(lesson, [])]
            total += score
            maximum += sum(p for _, p in cells.get(lesson, []))
        rows.append(row + [f"{total:g}", f"{maximum:g}"])
    path = pathlib.Path(path)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        w.writerows(rows)
    return path


def _marks(root: pathlib.Path) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], dict[str, float]]]:
    """What the gradebook holds beside the grader's points, read in one pass: (student, lesson) -> its late
    penalty, and (student, lesson) -> {grade id: points} of every score set by hand (nbgrader's formgrader, or
    ``manual_score`` in Python), which takes the place of the grader's in the CSV and the report."""
    if not (root / "gradebook.db").exists():
        return {}, {}
    from nbgrader.api import Gradebook

    penalties: dict[tuple[str, str], float] = {}
    by_hand: dict[tuple[str, str], dict[str, float]] = {}
    with Gradebook(f"sqlite:///{(root / 'gradebook.db').resolve()}") as gb:
        for a in gb.assignments:
            for sub in a.submissions:
                key = (sub.student.id, a.name)
                if sub.late_submission_penalty:
                    penalties[key] = float(sub.late_submission_penalty)
                for nb in sub.notebooks:
                    for g in nb.grades:
                        if g.manual_score is not None:
                            by_hand.setdefault(key, {})[g.name] = float(g.manual_score)
    return penalties, by_hand


def overrides(root: pathlib.Path) -> dict[tuple[str, str], dict[str, float]]:
    """(student, lesson) -> {grade id: points} of every score set by hand in the gradebook (:func:`_marks`)."""
    return _marks(root)[1]


def _points(r: NotebookResult | None, by_hand: dict) -> dict[str, float]:
    """Grade id -> the points the gradebook holds for ``r``: the grader's, where no score was set by hand."""
    if r is None:
        return {}
    return {**{c.grade_id: c.score for c in r.cells}, **by_hand.get((r.student, r.lesson), {})}


def gradebook_lines(root: pathlib.Path, results: list[NotebookResult]) -> list[str]:
    """What the gradebook changes in these results: scores set by hand, then late penalties (the grader's table
    shows its own points; the gradebook, the feedback and the CSV hold these)."""
    pen, by_hand = _marks(root)
    out = []
    for r in results:
        mine = by_hand.get((r.student, r.lesson), {})
        if mine:
            cells = {c.grade_id: c.score for c in r.cells}
            changed = ", ".join(f"{g} {cells.get(g, 0.0):g} -> {v:g}" for g, v in sorted(mine.items()))
            total = sum(_points(r, by_hand).values())
            out.append(f"by hand: {r.student}/{r.lesson}: {changed} (set in the gradebook): "
                       f"{max(0.0, total - pen.get((r.student, r.lesson), 0.0)):g}/{r.max_score:g} in the gradebook")
    return out + [f"late: {line}" for line in _late(results, pen, by_hand)]


def late_lines(root: pathlib.Path, results: list[NotebookResult]) -> list[str]:
    """What the gradebook takes off these results for lateness (the table shows the points before it)."""
    return _late(results, *_marks(root))


def _late(results: list[NotebookResult], pen: dict, by_hand: dict) -> list[str]:
    return [f"{r.student}/{r.lesson}: handed in late, {pen[(r.student, r.lesson)]:g} off: "
            f"{max(0.0, sum(_points(r, by_hand).values()) - pen[(r.student, r.lesson)]):g}/{r.max_score:g} in the "
            "gradebook" for r in results if pen.get((r.student, r.lesson))]
