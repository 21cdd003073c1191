"""Execute lesson notebooks top to bottom and judge their graded cells.

The solution notebook must run without an error anywhere; the untouched student copy must fail every graded
cell while the setup, widget and prose cells still run (widgets fall back to the package's reference kernels).
"""

from __future__ import annotations

import os
import pathlib
import tempfile
import time
from dataclasses import dataclass, field

from ..layout import COURSE, ROOT
from .build import graded_cells, solution_notebook, student_notebook

__all__ = ["Executed", "execute", "restore_locked", "lesson_notebook", "run_lesson", "graded_only", "judged_only",
           "run_graded_together", "run_widgets_alone", "problems"]


@dataclass
class Executed:
    """One notebook run: the executed notebook, its wall time and the error of each failing cell."""

    lesson: str
    copy: str  # "solution", "student" or "widgets"
    nb: object
    seconds: float
    errors: dict[str, str] = field(default_factory=dict)  # cell id -> "Name: message"

    def failed(self, cell_id: str) -> bool:
        return cell_id in self.errors


def _errors(nb) -> dict[str, str]:
    out = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                out[cell.get("id") or f"cell{i}"] = f"{o.get('ename')}: {o.get('evalue')}"[:2000]
                break
    return out


def execute(nb, *, lesson: str, copy: str, cwd: pathlib.Path | None = None, cell_timeout: int = 600) -> Executed:
    """Run every cell of ``nb`` in a fresh ``python3`` kernel (errors do not stop the run)."""
    from nbclient import NotebookClient

    # the kernel's Unix sockets live in this folder: its path must stay within the 107 bytes a socket's name may
    # have, also for the name of every lesson joined (run_graded_together)
    with tempfile.TemporaryDirectory(prefix=f"{lesson[:24]}-") as tmp:
        where = str(cwd or tmp)
        client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3", allow_errors=True,
                                resources={"metadata": {"path": where}})
        # the kernel talks to this process over Unix sockets in the private temporary folder, not over TCP on
        # localhost (which ipykernel warns of, and any local user could connect to)
        client.km = client.create_kernel_manager()
        client.km.transport = "ipc"
        client.km.ip = os.path.join(tmp, "kernel")
        # the kernel imports this checkout's `kernels`, installed or not
        pypath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        t0 = time.perf_counter()
        client.execute(env=dict(os.environ, PYTHONPATH=pypath))
        seconds = time.perf_counter() - t0
    return Executed(lesson, copy, nb, seconds, _errors(nb))


def restore_locked(student, source):
    """What autograding runs: the student's notebook with every locked cell (checks with their hidden tests,
    setup, widgets, prose) put back from the source, as nbgrader's autograde does; answer cells stay as they are."""
    locked = {c.id: c.source for c in source.cells if c.metadata.get("nbgrader", {}).get("locked")}
    for cell in student.cells:
        if cell.get("id") in locked:
            cell.source = locked[cell.id]
    return student


def run_lesson(lesson: str, copy: str = "solution", *, course: pathlib.Path = COURSE) -> Executed:
    """Execute the solution notebook (from ``solutions/``) or the untouched student copy (from ``course/``) as
    it is graded, locked cells restored (:func:`restore_locked`)."""
    return execute(lesson_notebook(lesson, copy, course=course), lesson=lesson, copy=copy)


def lesson_notebook(lesson: str, copy: str = "solution", *, course: pathlib.Path = COURSE):
    """The notebook :func:`run_lesson` executes: the solution, or the student copy with locked cells restored."""
    if copy == "solution":
        return solution_notebook(lesson)
    if copy == "student":
        return restore_locked(student_notebook(lesson, course), solution_notebook(lesson))
    raise ValueError(f"copy must be 'solution' or 'student', got {copy!r}")


def graded_only(nb):
    """The cells grading needs: every code cell up to the last graded one, less widgets and benchmarks (cell
    ids starting with ``bench``); no markdown."""
    last = max((i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade")), default=-1)
    nb.cells = [c for c in nb.cells[: last + 1] if c.cell_type == "code"
                and "widget" not in c.metadata.get("tags", []) and not c.get("id", "").startswith("bench")]
    return nb


def judged_only(nb):
    """The student copy up to its last cell that :func:`problems` judges (a graded cell, a widget, the setup cell):
    what follows (benchmarks, the score table) can change none of its verdicts."""
    judged = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (
        c.metadata.get("nbgrader", {}).get("grade") or "widget" in c.metadata.get("tags", []))]
    nb.cells = nb.cells[: max(judged, default=_first_code(nb)) + 1]
    return nb


def run_graded_together(lessons: list[str], copy: str = "solution", *, cell_timeout: int = 300) -> list[Executed]:
    """The graded-only cells of several lessons, one lesson after another in a single kernel (one start-up, one
    import of torch and triton), judged per lesson as :func:`run_lesson` would be."""
    import nbformat

    parts = {lesson: graded_only(lesson_notebook(lesson, copy)) for lesson in lessons}
    merged = nbformat.v4.new_notebook(metadata=next(iter(parts.values())).metadata)
    for lesson, nb in parts.items():
        for cell in nb.cells:
            cell = nbformat.from_dict(dict(cell))
            cell.id = f"{lesson}__{cell.id}"[:64]
            merged.cells.append(cell)
    run = execute(merged, lesson="+".join(lessons), copy=copy, cell_timeout=cell_timeout)
    out = []
    for lesson, nb in parts.items():
        prefix = f"{lesson}__"
        nb.cells = [c for c in run.nb.cells if c.id.startswith(prefix)]
        for cell in nb.cells:
            cell.id = cell.id[len(prefix):]
        errors = {k[len(prefix):]: v for k, v in run.errors.items() if k.startswith(prefix)}
        out.append(Executed(lesson, copy, nb, run.seconds, errors))
    return out


def run_widgets_alone(lesson: str) -> Executed:
    """Execute only the setup cell and the cells tagged ``widget`` of the student copy: every widget must work
    without the learner's solutions and without the cells between it and the setup."""
    nb = student_notebook(lesson)
    first = _first_code(nb)
    nb.cells = [nb.cells[first]] + [c for c in nb.cells if "widget" in c.metadata.get("tags", [])]
    return execute(nb, lesson=lesson, copy="widgets")


def problems(run: Executed) -> list[str]:
    """What is wrong with one run, as messages (empty: all good)."""
    graded = graded_cells(run.nb)
    if run.copy in ("solution", "widgets"):
        return [f"{run.lesson} ({run.copy}): cell {cid!r} failed: {err}" for cid, err in run.errors.items()]
    out = [f"{run.lesson} (student copy): graded cell {cid!r} passed without the learner's work"
           for cid in graded if not run.failed(cid) and not _not_graded_here(run.nb, cid)]
    for cell in run.nb.cells:
        cid = cell.get("id")
        meta = cell.metadata.get("nbgrader", {})
        needs_no_solution = "widget" in cell.metadata.get("tags", []) or cid == run.nb.cells[_first_code(run.nb)].id
        if needs_no_solution and run.failed(cid):
            out.append(f"{run.lesson} (student copy): cell {cid!r} must run without the learner's solutions: "
                       f"{run.errors[cid]}")
        if meta.get("grade") and run.failed(cid) and run.errors[cid].startswith("NameError: name 'check'"):
            out.append(f"{run.lesson} (student copy): graded cell {cid!r} fails only because `check` is undefined")
    return out


def _not_graded_here(nb, cell_id: str) -> bool:
    """A graded cell that could not grade on this machine (lesson 05's Rust where cargo is missing): it neither
    passes nor fails, it says so (0 points from the grader, deferred in the learner's own score)."""
    cell = next((c for c in nb.cells if c.get("id") == cell_id), None)
    text = "".join(o.get("text", "") for o in (cell or {}).get("outputs", []) if o.get("output_type") == "stream")
    return "not graded here" in text


def _first_code(nb) -> int:
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
