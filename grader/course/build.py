"""Lesson sources to student notebooks, and the rules every lesson source follows.

A lesson is ``solutions/<id>.py`` (jupytext percent format). Every cell header carries nbgrader's metadata, e.g.
``# %% nbgrader={"grade": false, "grade_id": "add_kernel", "locked": false, "schema_version": 3,
"solution": true}``; the ``grade_id`` doubles as the notebook cell id, so ids are stable. A cell whose whole body
is ``# include: <lesson> <grade_id>`` is built with the body of that cell of ``solutions/<lesson>.py``
(:func:`source_text`): a notebook that repeats an earlier lesson's code keeps one copy of it in ``solutions/``.
"""

from __future__ import annotations

import difflib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable

from kernels import catalog

from ..layout import COURSE, GRADER, README, ROOT, SOLUTIONS

__all__ = [
    "ROOT",
    "SOLUTIONS",
    "COURSE",
    "GRADER",
    "KERNELSPEC",
    "CourseError",
    "OutOfSync",
    "lesson_ids",
    "source_text",
    "solution_notebook",
    "student_notebook",
    "graded_cells",
    "build",
]


KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}

_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_JUPYTEXT_KEYS = ("lines_to_next_cell", "lines_to_end_of_cell_marker", "cell_marker", "title", "region_name")
_BEGIN_SOLUTION, _END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
_BEGIN_HIDDEN, _END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
_INCLUDE = re.compile(r"# include: (?P<lesson>[A-Za-z0-9_-]+) (?P<cell>[A-Za-z0-9_-]+)")
_MARKDOWN = "# %% [markdown]"
_NBGRADER = re.compile(r"\bnbgrader=(\{[^{}]*\})")


class CourseError(ValueError):
    """A lesson source breaks one of the course's rules; the message names the lesson and the cell."""


class OutOfSync(AssertionError):
    """``course/`` differs from what ``solutions/`` builds; run ``make course``."""


def lesson_ids(lessons: Iterable[str] | str | None = None) -> list[str]:
    """Resolve lesson ids (``"00_setup"``, or the number ``"00"``) against the catalog (:mod:`kernels.catalog`);
    ``None``: every lesson. Each must have its source in ``solutions/``."""
    try:
        ids = catalog.lesson_ids(lessons)
    except catalog.UnknownLesson as e:
        raise CourseError(str(e)) from None
    missing = [f"solutions/{i}.py" for i in ids if not (SOLUTIONS / f"{i}.py").is_file()]
    if missing:
        raise CourseError(f"the catalog lists lessons without a source: {', '.join(missing)}")
    return ids


def _unlisted() -> list[str]:
    """Lesson sources in ``solutions/`` that the catalog does not list."""
    known = set(catalog.lesson_ids())
    return sorted(f"solutions/{p.name}" for p in SOLUTIONS.glob("[0-9][0-9]_*.py") if p.stem not in known)


def _fail(lesson: str, cell, why: str):
    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "?") if cell is not None else "-"
    first = cell.source.strip().splitlines()[0][:60] if cell is not None and cell.source.strip() else ""
    raise CourseError(f"{lesson}: cell {gid!r} ({first!r}): {why}")


def _check_test_cell(lesson: str, cell) -> None:
    """A graded cell follows the grader's graded-cell grammar (:func:`grader.notebook.parse_checks`), laid out as
    the course lays it out: one call a line, ids of this lesson, ``hidden=True`` calls inside the hidden block."""
    from grader.notebook import NotebookError, parse_checks

    lines = cell.source.splitlines()
    try:
        calls = parse_checks(cell.source)
    except NotebookError as e:
        _fail(lesson, cell, f"a graded cell holds only one-line check(...) calls (and comments); {e}")
    inside, block = False, {}
    for n, ln in enumerate(lines, 1):
        if ln.strip() == _BEGIN_HIDDEN:
            inside = True
        elif ln.strip() == _END_HIDDEN:
            inside = False
        block[n] = inside
    if inside:
        _fail(lesson, cell, f"{_BEGIN_HIDDEN} without {_END_HIDDEN}")
    shown = [ln for n, ln in enumerate(lines, 1) if not block[n] and ln.strip() not in ("", _END_HIDDEN)]
    if _BEGIN_HIDDEN in cell.source and not shown:
        _fail(lesson, cell, "a cell of hidden tests only is empty in the student's copy: say above the hidden block, "
                            "in a comment, what runs there")
    for call in calls:
        if call.end_line != call.line or lines[call.line - 1].strip().split("(", 1)[0] != "check":
            _fail(lesson, cell, "a graded cell holds only one-line check(...) calls (and comments); found "
                                f"{chr(10).join(lines[call.line - 1:call.end_line]).strip()!r}")
        if not call.exercise.startswith(lesson + "."):
            _fail(lesson, cell, f"check id {call.exercise!r} must start with the lesson id {lesson + '.'!r}")
        if call.hidden != block[call.line]:
            _fail(lesson, cell, "hidden=True checks go inside the hidden-tests block, visible ones outside it")


def _validate(lesson: str, nb) -> None:
    seen: set[str] = set()
    first_code = True
    widgets = graded = 0
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if not isinstance(meta, dict):
            _fail(lesson, cell, "every cell header needs nbgrader metadata (with a grade_id)")
        if meta.get("schema_version") != 3:
            _fail(lesson, cell, "nbgrader schema_version must be 3")
        for key in ("grade", "locked", "solution"):
            if not isinstance(meta.get(key), bool):
                _fail(lesson, cell, f"nbgrader metadata needs {key!r}: true or false")
        gid = meta.get("grade_id")
        if not isinstance(gid, str) or not _ID.match(gid):
            _fail(lesson, cell, "grade_id must be 1-64 letters, digits, '_' or '-'")
        if gid in seen:
            _fail(lesson, cell, f"duplicate grade_id {gid!r}")
        seen.add(gid)
        if meta.get("task", False):
            _fail(lesson, cell, "task cells are graded by hand; every exercise here is graded by a check")
        src = cell.source
        has_solution = _BEGIN_SOLUTION in src or _END_SOLUTION in src
        has_hidden = _BEGIN_HIDDEN in src or _END_HIDDEN in src
        if cell.cell_type == "markdown":
            if meta["solution"] or meta["grade"]:
                _fail(lesson, cell, "written answers cannot be autograded: make the exercise a function or kernel")
            if not meta["locked"]:
                _fail(lesson, cell, "markdown cells are locked (\"locked\": true)")
        elif cell.cell_type == "code":
            if first_code:
                first_code = False
                if not src.lstrip().startswith("import kernels") or "kernels.describe()" not in src:
                    _fail(lesson, cell, "the first code cell starts with `import kernels` and prints "
                                        "kernels.describe()")
            if meta["solution"]:
                if meta["grade"]:
                    _fail(lesson, cell, "a solution cell is not graded itself; grade it from a check cell")
                if src.count(_BEGIN_SOLUTION) < 1 or src.count(_BEGIN_SOLUTION) != src.count(_END_SOLUTION):
                    _fail(lesson, cell, f"a solution cell wraps its answer in {_BEGIN_SOLUTION} / {_END_SOLUTION}")
            elif has_solution:
                _fail(lesson, cell, "solution delimiters outside a solution cell (\"solution\": true)")
            if meta["grade"]:
                graded += 1
                if not meta["locked"]:
                    _fail(lesson, cell, "graded cells are locked")
                if not isinstance(meta.get("points"), (int, float)) or meta["points"] <= 0:
                    _fail(lesson, cell, "graded cells carry points > 0")
                _check_test_cell(lesson, cell)
            elif has_hidden:
                _fail(lesson, cell, "hidden-test delimiters outside a graded cell")
            if "widget" in cell.metadata.get("tags", []):
                widgets += 1
                if not meta["locked"]:
                    _fail(lesson, cell, "widget cells are locked")
        else:
            _fail(lesson, cell, f"unsupported cell type {cell.cell_type!r}")
    if first_code:
        _fail(lesson, None, "no code cells")
    if not graded:
        _fail(lesson, None, "no graded check cells")
    if not widgets:
        _fail(lesson, None, "no cell tagged 'widget'")


def _percent_cells(text: str) -> list[tuple[str, list[str]]]:
    """(header line, body lines) of each cell of a percent-format text; the header of what precedes the first
    cell (jupytext's YAML block) is ``""``."""
    cells: list[tuple[str, list[str]]] = [("", [])]
    for line in text.splitlines(keepends=True):
        if line.startswith("# %%"):
            cells.append((line, []))
        else:
            cells[-1][1].append(line)
    return cells


def _grade_id(header: str) -> str | None:
    m = _NBGRADER.search(header)
    return json.loads(m.group(1)).get("grade_id") if m else None


def _included(where: str, body: list[str]) -> tuple[str, str] | None:
    """The (lesson, grade_id) a cell's body includes, or None when it is a cell of its own."""
    said = [ln.strip() for ln in body if ln.strip()]
    if not any(_INCLUDE.fullmatch(ln) for ln in said):
        return None
    if len(said) != 1:
        raise CourseError(f"{where}: an include is the cell's whole body, the one line `# include: <lesson> "
                          "<grade_id>`")
    m = _INCLUDE.fullmatch(said[0])
    return m["lesson"], m["cell"]


def source_text(path: pathlib.Path) -> str:
    """The lesson source ``path`` as the build reads it: each cell whose body is ``# include: <lesson> <grade_id>``
    gets the body of that cell of ``<lesson>.py`` beside it (the same kind of cell, itself no include), so that code
    one notebook repeats from another is written once. Refused with :class:`CourseError` when the lesson or the
    cell is not there, when that cell is an include itself or of the other kind, or when the include line is not
    alone in its cell."""
    out = []
    for header, body in _percent_cells(path.read_text()):
        where = f"{path.stem}: cell {_grade_id(header)!r}"
        target = _included(where, body)
        out.append(header)
        if target is None:
            out += body
            continue
        lesson, gid = target
        other = path.parent / f"{lesson}.py"
        if not other.is_file():
            raise CourseError(f"{where} includes cell {gid!r} of lesson {lesson!r}, but there is no "
                              f"{other.parent.name}/{other.name}")
        found = [(h, b) for h, b in _percent_cells(other.read_text()) if h and _grade_id(h) == gid]
        if not found:
            raise CourseError(f"{where} includes cell {gid!r} of lesson {lesson!r}, which has no such cell")
        their_header, their_body = found[0]
        if _included(f"{lesson}: cell {gid!r}", their_body) is not None:
            raise CourseError(f"{where} includes cell {gid!r} of lesson {lesson!r}, itself an include: include the "
                              "cell it includes")
        if their_header.startswith(_MARKDOWN) != header.startswith(_MARKDOWN):
            raise CourseError(f"{where} includes cell {gid!r} of lesson {lesson!r}, a cell of the other kind "
                              "(markdown and code)")
        start = next(i for i, ln in enumerate(body) if ln.strip())
        text = "".join(their_body).strip("\n") + "\n"
        out += [*body[:start], text, *body[start + 1:]]
    return "".join(out)


def solution_notebook(lesson: str, *, validate: bool = True, source: pathlib.Path | None = None):
    """The instructor notebook of ``lesson``, read from ``solutions/<lesson>.py`` (or ``source``), normalised
    (fixed kernelspec, cell id = grade_id, no outputs) and validated against the course's rules."""
    import jupytext
    import nbformat

    if source is None:
        (lesson,) = lesson_ids([lesson])
        source = SOLUTIONS / f"{lesson}.py"
    nb = jupytext.reads(source_text(source), fmt="py:percent")
    nb.nbformat, nb.nbformat_minor = 4, 5
    nb.metadata = nbformat.from_dict({"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}})
    for cell in nb.cells:
        for key in _JUPYTEXT_KEYS:
            cell.metadata.pop(key, None)
        cell.source = cell.source.strip("\n")
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if isinstance(gid, str) and _ID.match(gid):
            cell.id = gid
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    if validate:
        _validate(lesson, nb)
    return nb


def student_notebook(lesson: str, course: pathlib.Path = COURSE):
    """The committed student notebook ``course/<lesson>.ipynb``."""
    import nbformat

    return nbformat.read(course / f"{lesson}.ipynb", as_version=4)


def graded_cells(nb) -> list[str]:
    """The grade_ids of the notebook's autograded check cells, in order."""
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")]


def _release(ids: list[str], grader: pathlib.Path, course: pathlib.Path, *, config: pathlib.Path | None,
             db: str | None, quiet: bool) -> dict[str, pathlib.Path]:
    import nbformat

    for lesson in ids:
        path = grader / "source" / lesson / f"{lesson}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(solution_notebook(lesson), path)
    cmd = [sys.executable, "-m", "grader.course._nbgrader", "--root", str(grader)]
    if config is not None and config.exists():
        cmd += ["--config", str(config)]
    if db:
        cmd += ["--db", db]
    # nbgrader runs the `alembic` script of its environment: put that environment's bin/ on PATH.
    path = os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")])
    pypath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PATH=path, PYTHONPATH=pypath)
    proc = subprocess.run(cmd + ids, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise CourseError(f"nbgrader generate_assignment failed:\n{proc.stdout}\n{proc.stderr}")
    released = json.loads(proc.stdout.strip().splitlines()[-1])
    course.mkdir(parents=True, exist_ok=True)
    out = {}
    for lesson in ids:
        dst = course / f"{lesson}.ipynb"
        shutil.copyfile(released[lesson], dst)
        out[lesson] = dst
        if not quiet:
            print(f"{lesson}: solutions/{lesson}.py -> {dst.relative_to(course.parent)}")
    return out


def _diff(lesson: str, want: pathlib.Path, have: pathlib.Path) -> str:
    if not have.exists():
        return f"{lesson}: course/{have.name} is missing"
    a, b = have.read_text().splitlines(), want.read_text().splitlines()
    if a == b:
        return ""
    lines = list(difflib.unified_diff(a, b, f"course/{have.name} (committed)", f"{have.name} (built)", lineterm=""))
    more = f"\n... {len(lines) - 40} more diff lines" if len(lines) > 40 else ""
    return "\n".join(lines[:40]) + more


_TABLE = "<!-- the lesson table: written by the course build from kernels/catalog.py -->"
_TABLE_END = "<!-- end of the lesson table -->"


def _points(lesson: str) -> float:
    nb = solution_notebook(lesson, validate=False)
    return sum(c.metadata.get("nbgrader", {}).get("points", 0) for c in nb.cells
               if c.metadata.get("nbgrader", {}).get("grade"))


def _lesson_tables(readme: pathlib.Path, course: pathlib.Path) -> dict[pathlib.Path, str]:
    """``README.md`` and ``course/README.md`` with their lesson tables made from the catalog (files that are
    missing or have no table markers are left out)."""
    rows = {
        readme: ["| # | notebook | you write | widget |", "| --- | --- | --- | --- |"]
        + [f"| {les.number} | `course/{les.id}.ipynb` | {les.summary} | {', '.join(les.widgets.values())} |"
           for les in catalog.LESSONS],
        course / "README.md": ["| notebook | what you build | graded |", "| --- | --- | --- |"]
        + [f"| `{les.id}.ipynb` | {les.outline} | {_points(les.id):g} points |" for les in catalog.LESSONS],
    }
    out = {}
    for path, lines in rows.items():
        text = path.read_text() if path.is_file() else ""
        if _TABLE not in text or _TABLE_END not in text:
            continue
        head, rest = text.split(_TABLE, 1)
        out[path] = head + _TABLE + "\n" + "\n".join(lines) + "\n" + _TABLE_END + rest.split(_TABLE_END, 1)[1]
    return out


def build(lessons: Iterable[str] | str | None = None, check: bool = False, *, grader: pathlib.Path = GRADER,
          course: pathlib.Path = COURSE, readme: pathlib.Path = README, quiet: bool = False
          ) -> dict[str, pathlib.Path]:
    """Build the student notebooks of ``lessons`` (default: all) from ``solutions/``; return their paths.

    Writes ``<grader>/source/<id>/<id>.ipynb``, runs ``nbgrader generate_assignment`` in the nbgrader course
    folder ``grader`` (with its ``nbgrader_config.py`` if present) and copies ``release/<id>/<id>.ipynb`` to
    ``course/<id>.ipynb``. When building every lesson, notebooks in ``course/`` without a source are removed and
    the lesson tables of ``readme`` and ``course/README.md`` are written from the catalog.

    ``check=True`` changes nothing: it builds into a temporary folder with the same nbgrader configuration and
    raises :class:`OutOfSync` (with a diff) if ``course/`` is not exactly what ``solutions/`` builds.
    """
    ids = lesson_ids(lessons)
    if unlisted := _unlisted():
        raise CourseError(f"{', '.join(unlisted)}: not in the lesson catalog (add an entry to kernels/catalog.py)")
    config = grader / "nbgrader_config.py"
    stale = sorted(p for p in course.glob("[0-9][0-9]_*.ipynb") if p.stem not in ids) if lessons is None else []
    if not check:
        built = _release(ids, grader, course, config=config, db=None, quiet=quiet)
        for path, text in (_lesson_tables(readme, course) if lessons is None else {}).items():
            if path.read_text() != text:
                path.write_text(text)
                if not quiet:
                    print(f"{path.name}: the lesson table, from kernels/catalog.py")
        for p in stale:
            p.unlink()
            if not quiet:
                print(f"removed {p.relative_to(course.parent)} (no solutions/{p.stem}.py)")
        return built
    with tempfile.TemporaryDirectory(prefix="course-check-") as tmp:
        tmp = pathlib.Path(tmp)
        built = _release(ids, tmp / "grader", tmp / "course", config=config,
                         db=f"sqlite:///{tmp / 'grader' / 'gradebook.db'}", quiet=True)
        problems = [d for lesson, p in built.items() if (d := _diff(lesson, p, course / p.name))]
    problems += [f"course/{p.name} has no solutions/{p.stem}.py" for p in stale]
    tables = _lesson_tables(readme, course) if lessons is None else {}
    problems += [f"{path}: the lesson table differs from kernels/catalog.py's" for path, text in tables.items()
                 if path.read_text() != text]
    if problems:
        raise OutOfSync("course/ is out of sync with solutions/ (run `make course`):\n" + "\n".join(problems))
    return {lesson: course / f"{lesson}.ipynb" for lesson in ids}
