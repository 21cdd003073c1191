"""The zoo: plausible answers to every exercise, wrong and right, and what the checks must say about each.

Every lesson's module here (``lNN_<topic>.py``, named as ``kernels/checks/lessons/lNN_<topic>.py``) lists
:class:`Entry` objects: notebook cell source for an exercise's objects, as a student could write it from the
lesson's text, most of them edits of the lesson's solution as ``solutions/`` holds it (:func:`solution`). The zoo
is the instructor's: it lives beside the grader, out of the package a learner installs. A wrong entry must fail
the hidden check, and the visible check too where the text promises a case that shows the fault, with a message
naming the fault class (``fault``); a right entry must pass both. Some faults only exist in one mode (a speed
cheat is graded on a GPU only): ``where`` names the modes in which an entry is wrong, and elsewhere it must pass.

``tests/checks/test_zoo.py`` grades every entry under the interpreter in CI; ``python -m grader.zoo``
grades them in the current mode (on the GPU machine: ``scripts/gpu_batch.sh zoo``) and writes a JSON report.
"""

from __future__ import annotations  # noqa: I001  (kernels is imported first)

import kernels as _kernels  # noqa: F401  (first: it decides GPU or interpreter before Triton is imported)
import ast
import functools
import importlib
import io
import math
import time
import tokenize
import types
from dataclasses import dataclass

import torch
import triton

from kernels.catalog import exercise_objects, lesson_ids
from kernels.checks import engine, provenance
from kernels.checks.spec import get
from kernels.device import INTERPRET, MODE

__all__ = ["Entry", "OBJECTS", "edit", "moved", "editor", "solution", "solution_value", "entries", "build",
           "grade_entry", "grade_ids", "share_threads", "compile_entry", "judge", "has_hidden"]

#: What each exercise's check cell passes, by the names the lesson's text gives them (the catalog's).
OBJECTS = exercise_objects()


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return set()


def _without_comments(source: str) -> str:
    """``source`` without its comments; a line that held only a comment goes too (blank lines stay)."""
    cut = {t.start[0]: t.start[1] for t in tokenize.generate_tokens(io.StringIO(source).readline)
           if t.type == tokenize.COMMENT}
    out = []
    for n, line in enumerate(source.splitlines(keepends=True), 1):
        if n in cut:
            line = line[:cut[n]].rstrip()
            if not line.strip():
                continue
            line += "\n"
        out.append(line)
    return "".join(out)


def edit(source: str, *pairs: str) -> str:
    """``source`` with each (old, new) pair replaced once; an ``old`` that is not there is an error."""
    for old, new in zip(pairs[::2], pairs[1::2]):
        if old not in source:
            raise ValueError(f"{old!r} is not in the source")
        source = source.replace(old, new, 1)
    return source


def moved(line: str, before: str) -> tuple[str, str, str, str]:
    """The (old, new) pairs for :func:`edit` that take ``line`` out where it first stands and put it back just before
    ``before``: a step done too early (a state updated before the chunk has read it)."""
    return line, "", before, line + before


@functools.cache
def solution(lesson: str, *names: str) -> str:
    """The top-level statements of ``solutions/<lesson>.py`` that define ``names`` (functions and classes with their
    decorators, assigned names, imports), in the file's order, one blank line apart, without comments or solution
    markers: the base that a lesson's entries edit, so that the zoo always starts from the lesson's solution."""
    from ..course import SOLUTIONS, source_text

    text = "".join(line for line in source_text(SOLUTIONS / f"{lesson}.py").splitlines(keepends=True)
                   if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
    lines = text.splitlines(keepends=True)
    parts, found = [], set()
    for node in ast.parse(text).body:
        hit = _defined(node) & set(names)
        if hit:
            start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
            parts.append(_without_comments("".join(lines[start - 1:node.end_lineno])))
            found |= hit
    missing = sorted(set(names) - found)
    if missing:
        raise LookupError(f"solutions/{lesson}.py defines no {', '.join(missing)} at its top level")
    return "\n".join(parts)


def solution_value(lesson: str, name: str):
    """The value a top-level ``name = <literal>`` of ``solutions/<lesson>.py`` assigns (its solution markers
    removed): an answer that is data, such as lesson 05's Rust source."""
    (node,) = ast.parse(solution(lesson, name)).body
    return ast.literal_eval(node.value)


_PRELUDE = "import math\nimport torch\nimport triton\nimport triton.language as tl\n"


@dataclass(frozen=True)
class Entry:
    """One answer in the zoo.

    ``source``: the cells defining the exercise's objects (:data:`OBJECTS`), after the lesson's imports (``math``,
    ``torch``, ``triton``, ``triton.language as tl``), and ``namespace`` the notebook's other names (a value such
    as ``TILES``, the lesson's ``evaluate``). ``wrong``: the checks must fail
    it. ``fault``: words every failure message must contain, the fault class (``"out of bounds"``,
    ``"not written"``; ``"a|b"``: either). ``visible``: the visible check must fail it too, because the lesson's
    text promises a case that shows the fault. ``where``: the modes (``"interpreter"``, ``"gpu"``) in which it is
    wrong; in the others it must pass. ``why``: what makes it plausible and what is wrong, in a line.
    """

    exercise: str
    name: str
    source: str
    wrong: bool = True
    fault: str = ""
    visible: bool = True
    where: tuple[str, ...] = ("interpreter", "gpu")
    why: str = ""
    namespace: tuple[tuple[str, object], ...] = ()

    @property
    def id(self) -> str:
        return f"{self.exercise}/{self.name}"

    def wrong_here(self, mode: str = MODE) -> bool:
        return self.wrong and mode in self.where


def editor(exercise: str, base: str, **common):
    """``make(name, *pairs, **kw)``: the entry of ``exercise`` named ``name`` whose source is ``base`` (most often the
    lesson's solution) with the (old, new) ``pairs`` edited in (:func:`edit`), or ``source=`` where the answer is
    written out whole; ``common`` (a ``namespace``) goes to every entry, ``exercise=`` sends one to another exercise."""

    def make(name: str, *pairs: str, source: str | None = None, **kw) -> Entry:
        return Entry(kw.pop("exercise", exercise), name, source or edit(base, *pairs), **{**common, **kw})

    return make


def entries(lesson: str | None = None) -> list[Entry]:
    """Every entry of one lesson's zoo (or of all of them), in the modules' order."""
    out = []
    for name in lesson_ids() if lesson is None else (lesson,):  # every lesson has a zoo: l<lesson id>.py
        out += importlib.import_module(f"{__name__}.l{name}").ENTRIES
    return out


def build(entry: Entry) -> tuple:
    """The objects the entry's check cell passes: kernels rebuilt from the source as the grader rebuilds them
    (for this mode), functions from executing the source, values from ``namespace``."""
    ex = get(entry.exercise)
    ns = types.ModuleType("__main__").__dict__
    ns.update({"math": math, "torch": torch, "triton": triton, **dict(entry.namespace)})
    if "function" in ex.args:
        exec(compile(entry.source, f"<zoo {entry.id}>", "exec"), ns)
    out = []
    for kind, name in zip(ex.args, OBJECTS[entry.exercise]):
        if kind == "kernel":
            ks = provenance.from_cells([_PRELUDE, entry.source], name, twins=ex.twins)
            engine.check_kernel_source(ex, ks.text)
            out.append(provenance.load(ks, interpret=INTERPRET))
        else:
            out.append(ns[name])
    return tuple(out)


def grade_entry(entry: Entry) -> dict:
    """Grade the entry with the visible and (where the exercise has one) the hidden check, in this process and
    mode."""
    ex = get(entry.exercise)
    row = {"exercise": entry.exercise, "name": entry.name, "wrong": entry.wrong, "wrong_here": entry.wrong_here(),
           "fault": entry.fault, "visible_must_fail": entry.visible, "why": entry.why}
    t0 = time.time()
    try:
        objects = build(entry)
    except Exception as e:  # noqa: BLE001 (refused at provenance: reported as a failure of both checks)
        msg = f"{type(e).__name__}: {e}"
        row.update(visible={"passed": False, "message": msg}, hidden={"passed": False, "message": msg})
    else:
        row["hidden"] = None
        for hidden in (False, True) if has_hidden(ex) else (False,):
            out = engine.grade_local(ex, objects, hidden)
            row["hidden" if hidden else "visible"] = {"passed": out.passed, "message": out.message,
                                                     "perf": out.perf}
            if ex.toolchain and out.not_graded:  # its toolchain is missing here: nothing was graded
                row["skipped"] = out.not_graded[0]
    row["seconds"] = round(time.time() - t0, 2)
    row["problems"] = judge(entry, row)
    row["ok"] = not row["problems"]
    return row


def share_threads(jobs: int) -> None:
    """A worker process's share of the CPUs this process may use, as torch's threads: the float64 references run on
    the CPU, and ``jobs`` workers each taking every core's threads ran far slower than one at a time."""
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(max(1, cpus // max(1, jobs)))


def grade_ids(ids: list[str]) -> list[dict]:
    """:func:`grade_entry` for each entry id (``exercise/name``), in order: a worker process's share."""
    by_id = {e.id: e for e in entries()}
    return [grade_entry(by_id[i]) for i in ids]


def compile_entry(entry: Entry, folder: str) -> str | None:
    """Compile every launch of the entry's visible and hidden checks for sm_90 (:func:`kernels.checks.dry_run.dry_run`,
    in a process whose Triton compiles); the error, or ``None``. What a notebook's check does first under the
    interpreter, and what a GPU does before it runs anything."""
    from kernels.checks.dry_run import dry_run

    ex = get(entry.exercise)
    kernels, values = [], []
    for kind, name in zip(ex.args, OBJECTS[entry.exercise]):
        if kind == "kernel":
            ks = provenance.from_cells([_PRELUDE, entry.source], name, twins=ex.twins)
            kernels.append({"entry": ks.entry, "text": ks.text})
            values.append(None)
        else:
            kernels.append(None)
            values.append(dict(entry.namespace).get(name))
    try:
        for hidden in (False, True) if has_hidden(ex) else (False,):
            dry_run(entry.exercise, hidden, kernels, values, folder)
    except Exception as e:  # noqa: BLE001 (a compile error of any kind is the answer)
        return f"{type(e).__name__}: {e}"
    return None


def has_hidden(ex) -> bool:
    """Whether the exercise has a hidden check cell (the speed exercises have only the visible one)."""
    return bool(ex.hidden) or ex.points[1] > 0


def judge(entry: Entry, row: dict) -> list[str]:
    """What is wrong with the checks' verdicts on ``entry`` (empty: they said what they must)."""
    faults = [f.strip().lower() for f in entry.fault.split("|") if f.strip()]
    if row.get("skipped"):
        return []

    def named(message: str) -> bool:
        return not faults or any(f in message.lower() for f in faults)

    problems = []
    only_visible = row["hidden"] is None
    for which in ("visible",) if only_visible else ("visible", "hidden"):
        got = row[which]
        must_fail = entry.wrong_here() and (which == "hidden" or entry.visible or only_visible)
        if must_fail and got["passed"]:
            problems.append(f"the {which} check passed it")
        elif must_fail and not named(got["message"]):
            problems.append(f"the {which} check's message does not name the fault ({entry.fault!r}): "
                            f"{got['message'][:600]!r}")
        elif not entry.wrong_here() and not got["passed"]:
            problems.append(f"the {which} check failed it: {got['message'][:600]!r}")
    return problems
