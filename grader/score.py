"""Your score: every visible and hidden-style check of a lesson, run on your own notebook, points per exercise.

Two ways in. The last cell of each lesson calls :func:`score_here` on the notebook's own variables: it runs each
graded cell's check, hidden ones included, and reuses the outcome of any check the cells above already ran on the
same objects, so after a top-to-bottom run it takes no time. From a shell, ``python -m grader.score [LESSON ...]``
(``make score``) executes your saved notebooks (``my-work/``, else ``course/``) with the graded cells as the grader
restores them, in a fresh kernel, and prints the same table. Speed checks and GPU-only cases count only on a GPU;
without one their points are listed apart, as points that need a GPU. A class hands work in through nbgrader
(README: "Handing in work"); this score is what its autograder would give, on your machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import pathlib
import re
import sys
import textwrap
import time
from dataclasses import dataclass, field

__all__ = ["Line", "Score", "score_here", "score_notebook", "main"]

_CHECK = re.compile(r"""check\(\s*["'](?P<id>[^"']+)["']""")


@dataclass
class Line:
    """One graded cell: its exercise, points, whether they count here, and the outcome."""

    cell: str
    exercise: str
    points: float
    hidden: bool
    needs_gpu: bool  # a speed check, graded on a GPU only
    passed: bool
    why: str = ""
    needs: str = ""  # the toolchain the check builds with, where it is missing here ("cargo"): not graded here


@dataclass
class Score:
    lesson: str
    where: str
    lines: list[Line] = field(default_factory=list)

    @property
    def earned(self) -> float:
        return sum(ln.points for ln in self.lines if ln.passed and not self._deferred(ln))

    @property
    def possible_here(self) -> float:
        return sum(ln.points for ln in self.lines if not self._deferred(ln))

    @property
    def total(self) -> float:
        return sum(ln.points for ln in self.lines)

    @property
    def on_gpu(self) -> bool:
        from kernels.device import ON_GPU

        return ON_GPU

    def _deferred(self, ln: Line) -> bool:
        """Points this machine cannot grade: a check needing a GPU that passed what the interpreter checks (one
        that failed here fails on a GPU too, and counts), or a missing toolchain."""
        return (ln.needs_gpu and not self.on_gpu and ln.passed) or bool(ln.needs)

    def table(self) -> str:
        rows = {}
        for ln in self.lines:
            rows.setdefault(ln.exercise, []).append(ln)
        width = max([len(e) for e in rows] + [8])
        out = [f"{self.lesson}: your score {'on this GPU' if self.on_gpu else 'here'} ({self.where})"]
        for ex, lines in rows.items():
            deferred = [ln for ln in lines if self._deferred(ln)]
            counted = [ln for ln in lines if not self._deferred(ln)]
            if counted:
                got = sum(ln.points for ln in counted if ln.passed)
                parts = " + ".join(f"{ln.points:g}{' hidden' if ln.hidden else ''}" for ln in counted)
                why = next((ln.why for ln in counted if not ln.passed and ln.why), "")
                row = f"  {ex:<{width}} {got:>4g} / {sum(ln.points for ln in counted):<4g} ({parts})"
                if why and len(row) + 2 + len(why) > _WIDTH:  # a long reason goes under its row, wrapped
                    out += [row, textwrap.fill(why, _WIDTH, initial_indent=" " * 6, subsequent_indent=" " * 6)]
                else:
                    out.append(row + (f"  {why}" if why else ""))
            if deferred and deferred[0].needs:
                out.append(f"  {ex:<{width}}    - / {sum(ln.points for ln in deferred):<4g} needs "
                           f"{deferred[0].needs}: not installed here, so not graded (the lesson's cell says how to "
                           "get it)")
            elif deferred:
                out.append(f"  {ex:<{width}}    - / {sum(ln.points for ln in deferred):<4g} needs a GPU: passes "
                           "what the interpreter checks; the speed is graded on a GPU only")
        more = self.total - self.possible_here
        tools = sorted({ln.needs for ln in self.lines if ln.needs})
        what = " or ".join((["a GPU"] if any(self._deferred(ln) and not ln.needs for ln in self.lines) else []) + tools)
        tail = f"; {more:g} more need {what} ({self.total:g} in all)" if more else ""
        out.append(f"  {'total':<{width}} {self.earned:>4g} / {self.possible_here:<4g}{tail}")
        return "\n".join(out)


def _graded(lesson: str):
    """(cell id, exercise id, points, hidden, source) for each graded cell of the lesson, hidden tests included
    (read from the lesson's source by the course build: scoring needs the repository, not only this package)."""
    from .course import solution_notebook

    out = []
    for cell in solution_notebook(lesson).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        source = "\n".join(ln for ln in cell.source.splitlines() if not ln.strip().startswith("###"))
        found = _CHECK.search(source)
        exercise = found.group("id") if found else meta["grade_id"]
        out.append((meta["grade_id"], exercise, float(meta.get("points", 0)), "hidden=True" in source, source))
    return out


def _needs_gpu(exercise: str, hidden: bool) -> bool:
    """A check with a speed requirement or a hidden rule timed on the GPU: only a GPU can grade it, and without
    one the grader's default speed policy scores its cell 0 (``grader/policy.py``); so does this score."""
    from kernels.checks.spec import get

    try:
        return get(exercise).needs_gpu(hidden)
    except Exception:  # noqa: BLE001 (an exercise the registry does not know: graded like any other)
        return False


def _missing_tool(exercise: str) -> str:
    """The toolchain an exercise's check builds with (``"cargo"``), where it is missing on this machine."""
    from kernels.checks.engine import toolchain_missing
    from kernels.checks.spec import get

    try:
        return get(exercise).toolchain if toolchain_missing(get(exercise)) else ""
    except Exception:  # noqa: BLE001 (an exercise the registry does not know: graded like any other)
        return ""


#: The table's width; a failure's reason is cut (at a word) after _REASON characters.
_WIDTH, _REASON = 116, 600


def _clip(text: str, n: int = _REASON) -> str:
    return text if len(text) <= n else text[:n - 1].rsplit(" ", 1)[0] + " …"


def _first_line(text: str) -> str:
    """What a failed check says, in short: the first problem it lists (``  - ...``; the header before it only names
    the case, whose label leads) and what the case is there to catch where it says (``(this case ...)``: a hidden
    case's advice is the only place a student reads it), else its first line."""
    lines = text.strip().splitlines() or [""]
    problems = [ln.strip()[2:] for ln in lines[1:] if ln.strip().startswith("- ")]
    if not problems:
        return _clip(lines[0])
    case = re.search(r"on case '([^']*)'", lines[0])
    purpose = next((p for p in problems[1:] if p.startswith("(this case ")), "")
    return _clip((f"on {case.group(1)!r}: " if case else "") + problems[0] + (f" {purpose}" if purpose else ""))


def _called(objects) -> dict[int, object]:
    """The answer's objects and what their code calls from their notebook, transitively, by id: the functions,
    classes and kernels of its reach (an ``autograd.Function`` whose backward launches ``dq_kernel``: the kernel)."""
    from kernels.checks import reach

    out = {id(o): o for o in objects}
    out.update((id(v), v) for v in reach(objects).values() if callable(v) or hasattr(v, "fn"))
    return out


def _label(obj) -> str:
    return getattr(obj, "__name__", None) or getattr(getattr(obj, "fn", None), "__name__", None) or type(obj).__name__


def _cached_check(namespace_check, progress=None):
    """``check`` that reuses the outcome of the same check already run in this process on the same objects, while
    nothing they can call (their notebook's functions, classes and kernels) was redefined since. It does not run a
    check whose answer calls what an earlier one stopped at the interpreter's time limit (a loop that never ends
    costs that limit once, not once per check), and says so. ``progress(exercise, hidden, seconds, passed)``: told
    when a check runs, before (``seconds`` None) and after."""
    from kernels import checks
    from kernels.checks.engine import CASE_STOPPED

    stopped: dict[int, tuple[str, str]] = {}  # id of an object a check was stopped on: (its name, the exercise)

    def was_stopped(objects, exercise_id) -> None:
        # functions, classes and kernels: a value passed beside them (a block size) is no one's loop
        stopped.update({id(o): (_label(o), exercise_id) for o in objects if callable(o) or hasattr(o, "fn")})

    # a check the notebook's own cells ran and that was stopped (the exercise's check cell, before this score):
    # what it was stopped on is not run again here while nothing it can call was redefined
    for (exercise_id, _), (objects, failure, reached) in list(checks.history.items()):
        if failure and CASE_STOPPED in failure and checks.reach_unchanged(reached, objects):
            was_stopped(objects, exercise_id)

    def check(exercise_id, *objects, hidden=False):
        seen = checks.history.get((exercise_id, hidden))
        if (seen is not None and len(seen[0]) == len(objects) and all(a is b for a, b in zip(seen[0], objects))
                and checks.reach_unchanged(seen[2], objects)):
            if seen[1]:
                raise checks.CheckFailed(seen[1])
            return None
        hit = next((stopped[i] for i in _called(objects) if i in stopped), None) if stopped else None
        if hit:
            raise checks.CheckFailed(f"not run: {hit[0]} was stopped at the interpreter's time limit in {hit[1]}'s "
                                     "check (a loop that never ends?); fix it, run its cells again, then this one")
        if progress:
            progress(exercise_id, hidden, None, False)
        t0 = time.perf_counter()
        try:
            out = namespace_check(exercise_id, *objects, hidden=hidden)
        except Exception as e:
            if CASE_STOPPED in str(e):
                was_stopped(objects, exercise_id)
            if progress:
                progress(exercise_id, hidden, time.perf_counter() - t0, False)
            raise
        if progress:
            progress(exercise_id, hidden, time.perf_counter() - t0, True)
        return out

    return check


def score_here(lesson: str, namespace: dict, *, show: bool = True) -> Score:
    """Run every graded cell's check of ``lesson`` on the objects in ``namespace`` (a notebook's ``globals()``),
    reusing outcomes the notebook already has; print the table and return the :class:`Score`."""
    from kernels.checks import check as real_check
    from kernels.checks.engine import GRADING_ENV
    from kernels.device import MODE

    score = Score(lesson, MODE)
    if os.environ.get(GRADING_ENV):
        if show:
            print("(the grader scores this notebook itself; nothing to do here)")
        return score
    shown = sys.stdout  # the checks' own lines are kept from the table; what runs, and for how long, is not

    def progress(exercise, hidden, seconds, passed):
        if seconds is None:
            print(f"checking {exercise}{' (hidden cases)' if hidden else ''} ...", end="", file=shown, flush=True)
        else:
            print(f" {'passed' if passed else 'failed'} ({seconds:.0f} s)", file=shown, flush=True)

    check = _cached_check(namespace.get("check", real_check), progress if show else None)
    for cell, exercise, points, hidden, source in _graded(lesson):
        ns = dict(namespace, check=check)
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink):
                exec(compile(source, f"<{lesson}:{cell}>", "exec"), ns)  # noqa: S102 (the lesson's own check cell)
            passed, why = True, ""
        except NameError as e:
            passed, why = False, f"not defined yet: {e}"
        except Exception as e:  # noqa: BLE001 (a failed check, or the student's code raising)
            passed, why = False, _first_line(str(e)) or type(e).__name__
        score.lines.append(Line(cell, exercise.split(".", 1)[-1], points, hidden, _needs_gpu(exercise, hidden),
                                passed, why, _missing_tool(exercise)))
    if show:
        print(score.table())
    return score


def score_notebook(lesson: str, path: pathlib.Path) -> Score:
    """Execute the notebook at ``path`` as the grader would (locked cells and hidden tests put back, graded cells
    only) in a fresh kernel, and score each graded cell by whether it raised."""
    import nbformat

    from kernels.device import MODE

    from .course import solution_notebook
    from .course.run import execute, graded_only, restore_locked

    nb = graded_only(restore_locked(nbformat.read(path, as_version=4), solution_notebook(lesson)))
    run = execute(nb, lesson=lesson, copy="yours")
    score = Score(lesson, f"{MODE}, {path}")
    for cell, exercise, points, hidden, _ in _graded(lesson):
        why = run.errors.get(cell, "")
        if cell not in {c.get("id") for c in run.nb.cells}:
            why = "this graded cell is missing from your notebook"
        score.lines.append(Line(cell, exercise.split(".", 1)[-1], points, hidden, _needs_gpu(exercise, hidden), not why,
                                _first_line(why.split(": ", 1)[-1]) if why else "", _missing_tool(exercise)))
    return score


def _notebook_for(lesson: str, work: pathlib.Path) -> pathlib.Path:
    from .layout import COURSE

    for folder in (work, COURSE):
        path = folder / f"{lesson}.ipynb"
        if path.exists():
            return path
    raise FileNotFoundError(f"no notebook for {lesson} in {work} or {COURSE}")


def main(argv: list[str] | None = None) -> int:
    from kernels.catalog import lesson_ids

    from .layout import WORK

    ap = argparse.ArgumentParser(prog="python -m grader.score", description=__doc__.splitlines()[0])
    ap.add_argument("lessons", nargs="*", help="lesson ids or numbers (default: all)")
    ap.add_argument("--work", default=str(WORK), help="your notebooks' folder (default: my-work, else course/)")
    args = ap.parse_args(argv)
    try:
        lessons = lesson_ids(args.lessons or None)
    except Exception as e:  # noqa: BLE001
        print(e, file=sys.stderr)
        return 2
    earned = possible = total = 0.0
    for lesson in lessons:
        try:
            path = _notebook_for(lesson, pathlib.Path(args.work))
        except FileNotFoundError as e:
            print(e, file=sys.stderr)
            return 1
        print(f"running {path} ...", flush=True)
        s = score_notebook(lesson, path)
        print(s.table(), flush=True)
        earned, possible, total = earned + s.earned, possible + s.possible_here, total + s.total
    if len(lessons) > 1:
        more = total - possible
        print(f"all lessons: {earned:g} / {possible:g}" + (f"; {more:g} more need a GPU ({total:g} in all)"
                                                         if more else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
