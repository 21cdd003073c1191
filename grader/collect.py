"""Collecting submissions: a folder of notebooks per student, read defensively and matched to lessons.

Nothing a student submits may abort a batch. A notebook that is not JSON, or not a notebook, is recorded as an
explicit 0 with the reason; a newer nbformat is read as 4.5 when its cells are recognisable; a lesson notebook
under another name is found by its graded cell ids and restored; extra files are listed and ignored; a missing
lesson is an explicit 0 ("not submitted"). Graded cells are never taken from the submission: the grader uses the
instructor's (see :mod:`grader.notebook`), so edited, deleted or metadata-stripped test cells change nothing.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import re
import uuid
from dataclasses import dataclass, field

from .lms import strip_copy

__all__ = ["Submission", "read_notebook", "collect_student", "collect_folder", "grade_ids", "flag_solutions",
           "other_versions"]

_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass
class Submission:
    student: str
    lesson: str
    notebook: dict | None
    notes: list[str] = field(default_factory=list)
    path: str = ""
    timestamp: float | None = None  # when it was handed in (the file's or the archive entry's date), epoch seconds
    status: str = ""  # what collect did with it: new, replaced, unchanged, kept, ...


def grade_ids(nb: dict) -> set[str]:
    out = set()
    for c in nb.get("cells", []) if isinstance(nb, dict) else []:
        md = c.get("metadata") if isinstance(c, dict) else None
        nbg = md.get("nbgrader") if isinstance(md, dict) else None
        if isinstance(nbg, dict) and isinstance(nbg.get("grade_id"), str):
            out.add(nbg["grade_id"])
    return out


def _text(src) -> str | None:
    if isinstance(src, str):
        return src
    if isinstance(src, list) and all(isinstance(s, str) for s in src):
        return "".join(src)
    return None


def read_notebook(path: pathlib.Path, *, max_bytes: int = 50 << 20) -> tuple[dict | None, list[str]]:
    """A normalised nbformat-4.5 dict (no outputs, valid unique ids), or None with the reason."""
    notes: list[str] = []
    try:
        size = path.stat().st_size
        if size > 8 * max_bytes:
            return None, [f"{path.name} is {size / 2**20:.0f} MiB, over the {8 * max_bytes / 2**20:.0f} MiB limit"]
        raw = json.loads(path.read_bytes().decode("utf-8", "replace"))
        if size > max_bytes:  # stored outputs (plots, long prints) are cleared below: only the code must fit
            bare = sum(len(json.dumps(c.get("source", ""))) for c in raw.get("cells", []) if isinstance(c, dict)) \
                if isinstance(raw, dict) and isinstance(raw.get("cells"), list) else size
            if bare > max_bytes:
                return None, [f"{path.name} holds {bare / 2**20:.0f} MiB of code and text, over the "
                              f"{max_bytes / 2**20:.0f} MiB limit"]
            notes.append(f"{path.name} is {size / 2**20:.0f} MiB with its stored outputs; they were cleared "
                         "before grading")
    except (OSError, ValueError) as e:
        return None, [f"{path.name} is not a readable notebook (malformed JSON: {str(e)[:120]})"]
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
        return None, [f"{path.name} is JSON but not a notebook (no list of cells)"]
    major, minor = raw.get("nbformat"), raw.get("nbformat_minor")
    if not isinstance(major, int) or major < 4:
        return None, [f"{path.name} has nbformat {major!r}; version 4 or newer is needed"]
    if major > 4 or (isinstance(minor, int) and minor > 5):
        notes.append(f"{path.name} declares nbformat {major}.{minor}, newer than 4.5: read as 4.5")
    cells, seen = [], set()
    dropped = 0
    for c in raw["cells"]:
        if not isinstance(c, dict) or c.get("cell_type") not in ("code", "markdown", "raw"):
            dropped += 1
            continue
        src = _text(c.get("source", ""))
        if src is None:
            dropped += 1
            continue
        md = c.get("metadata") if isinstance(c.get("metadata"), dict) else {}
        cid = c.get("id")
        if not (isinstance(cid, str) and _ID.match(cid)) or cid in seen:
            cid = uuid.uuid4().hex[:12]
        seen.add(cid)
        cell = {"cell_type": c["cell_type"], "id": cid, "metadata": md, "source": src}
        if c["cell_type"] == "code":
            cell.update(outputs=[], execution_count=None)
        cells.append(cell)
    if dropped:
        notes.append(f"{path.name}: {dropped} unreadable cell(s) ignored")
    meta = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
    nb = {"cells": cells, "metadata": {k: v for k, v in meta.items() if k in ("kernelspec", "language_info")},
          "nbformat": 4, "nbformat_minor": 5}
    return nb, notes


def collect_student(student: str, folder: pathlib.Path, lessons: dict[str, dict]) -> dict[str, Submission]:
    """Match one student's notebooks (``folder/*.ipynb``, also one level down) to ``lessons`` (id -> source)."""
    found = sorted(p for p in list(folder.glob("*.ipynb")) + list(folder.glob("*/*.ipynb"))
                   if ".ipynb_checkpoints" not in p.parts)
    files = [p for p in found if not p.is_symlink() and p.is_file()]
    refused = [p.name for p in found if p not in files]  # a link could point at anything
    out: dict[str, Submission] = {}
    unmatched: list[pathlib.Path] = []
    # A lesson's name with copy marks (``00_setup (1).ipynb``, ``00_setup-2.ipynb``) is a later save of the same
    # notebook: of all the files named after a lesson, the newest by its date is graded, the others are noted.
    named: dict[str, list[tuple[pathlib.Path, int]]] = {}
    for p in files:
        base, copy = strip_copy(p.stem)
        if base in lessons:
            named.setdefault(base, []).append((p, copy))
    newest = {lesson: max(cands, key=lambda pc: (_mtime(pc[0]) or 0.0, pc[1], pc[0].stem == lesson))[0]
              for lesson, cands in named.items()}
    for p in files:
        lesson = strip_copy(p.stem)[0]
        if lesson in named and newest[lesson] != p:
            continue
        if lesson in newest and lesson not in out:
            nb, notes = read_notebook(p)
            older = sorted(q.name for q, _ in named[lesson] if q != p)
            if older:
                notes = notes + [f"graded {p.name}, the newest of {len(older) + 1} copies; older, not graded: "
                                 f"{', '.join(older)}"]
            elif p.stem != lesson:
                notes = notes + [f"found {lesson} under the name {p.name}"]
            wrong, owner = _other_lesson(nb, lesson, lessons) if nb is not None else ("", None)
            if wrong:
                if owner is not None and owner not in named:  # lesson 01 saved as 00_setup.ipynb: it is 01's
                    wrong += f"; collected as {owner}"
                    unmatched.append(p)
                nb, notes = None, notes + [wrong]
            flag = flag_solutions(nb, lessons[lesson]) if nb is not None else ""
            if flag:
                notes = notes + [flag]
            out[lesson] = Submission(student, lesson, nb, notes, str(p), _mtime(p))
        else:
            unmatched.append(p)
    extras = []
    for p in unmatched:
        nb, notes = read_notebook(p)
        ids = grade_ids(nb) if nb else set()
        best, overlap = None, 0.0
        for lesson, src in lessons.items():
            want = grade_ids(src)
            share = len(ids & want) / max(len(want), 1)
            if lesson not in out and share > overlap:
                best, overlap = lesson, share
        if best is not None and overlap >= 0.5:
            flag = flag_solutions(nb, lessons[best])
            notes = notes + [flag] if flag else notes
            out[best] = Submission(student, best, nb, notes + [f"found {best} under the name {p.name}"], str(p),
                                   _mtime(p))
        else:
            extras.append(p)
    for lesson in lessons:
        if lesson not in out:
            out[lesson] = Submission(student, lesson, None, ["not submitted"])
    extras = [p.name for p in extras if not _other_version(p, out, lessons)]
    if extras:
        for s in out.values():
            s.notes.append(f"ignored extra file(s): {', '.join(extras)} (not a notebook of this course's lessons, "
                           f"which are {', '.join(sorted(lessons))})")
            break
    _not_notebooks(folder, out)
    for name in refused:
        sub = out.get(pathlib.Path(name).stem) or next(iter(out.values()), None)
        if sub is not None:
            sub.notes.append(f"refused {name}: a link or not a plain file")
    return out


def _other_version(p: pathlib.Path, out: dict[str, Submission], lessons: dict[str, dict]) -> bool:
    """A file left over whose name starts with a lesson's id (``00_setup_final.ipynb``, ``00_setup copy.ipynb``)
    may be the version the student meant: it is not graded (a scratch copy would be), but said on that lesson's
    submission, which collect prints and the report carries. False for any other file."""
    stem = strip_copy(p.stem)[0]
    lesson = max((x for x in lessons if stem.startswith(x) and stem != x), key=len, default=None)
    if lesson is None:
        return False
    sub = out[lesson]
    when = _mtime(p)
    if sub.path:
        graded = pathlib.Path(sub.path).name
        later = when is not None and sub.timestamp is not None and when > sub.timestamp
        again = _AGAIN if later else (f" and collect it alone (FOLDER/{sub.student}/{lesson}.ipynb) with "
                                      "--replace-newer: an earlier copy never replaces a collected one otherwise")
        sub.notes.append(f"also handed in {p.name}, saved {'later' if later else 'earlier'} than the graded {graded}: "
                         f"if that is the one meant, rename it {lesson}.ipynb{again}")
    else:
        sub.notes.append(f"handed in {p.name}, not graded: collect grades {lesson}.ipynb (or a notebook with its "
                         f"cells); if that is the one meant, rename it {lesson}.ipynb{_AGAIN}")
    return True


_AGAIN = " and collect again"


def _not_notebooks(folder: pathlib.Path, out: dict[str, Submission]) -> None:
    """A lesson with nothing to grade whose name starts a file that is not a notebook (``00_setup.html``,
    ``00_setup.py``, ``00_setup.ipynb.txt``, as a download or an export renames it): the student handed the work
    in, in a form collect cannot grade; said on that lesson's submission instead of a bare "not submitted"."""
    found = [p for p in list(folder.glob("*")) + list(folder.glob("*/*"))
             if p.suffix != ".ipynb" and not p.name.startswith(".") and ".ipynb_checkpoints" not in p.parts
             and not p.is_symlink() and p.is_file()]
    for p in sorted(found):
        lesson = max((x for x in out if p.name.startswith(x) and out[x].notebook is None and not out[x].path),
                     key=len, default=None)
        if lesson is not None:
            out[lesson].notes.append(f"handed in {p.name}, not a notebook: collect grades {lesson}.ipynb; if the "
                                     f"work is in it, save it from JupyterLab as {lesson}.ipynb{_AGAIN}")


def other_versions(sub: Submission) -> list[str]:
    """The notes of ``sub`` naming a file that may be the version the student meant (see ``_other_version``)."""
    return [n for n in sub.notes if n.endswith(_AGAIN)]


_BLOCK = re.compile(r"^[ \t]*### BEGIN SOLUTION[ \t]*\n(.*?)^[ \t]*### END SOLUTION", re.M | re.S)


def _squeeze(code: str) -> str:
    return "\n".join(ln.strip() for ln in code.splitlines() if ln.strip() and not ln.strip().startswith("#"))


def flag_solutions(nb: dict, source: dict) -> str:
    """Why ``nb`` looks like the instructor's notebook ("" if it does not): it carries the source's solution
    markers, or at least half of the source's solution blocks verbatim (comments and indentation aside)."""
    text = "\n".join(_text(c.get("source", "")) or "" for c in nb.get("cells", []))
    if "### BEGIN SOLUTION" in text or "### BEGIN HIDDEN TESTS" in text:
        return "flagged: this is the instructor's source notebook (it carries the solution markers)"
    blocks = [b for b in (_squeeze(m.group(1)) for c in source.get("cells", [])
                          for m in _BLOCK.finditer(_text(c.get("source", "")) or "")) if len(b) >= 40]
    if not blocks:
        return ""
    mine = _squeeze(text)
    same = sum(1 for b in blocks if b in mine)
    if same * 2 >= len(blocks):
        return (f"flagged: carries the instructor's solution code ({same} of {len(blocks)} solution blocks "
                "verbatim)")
    return ""


def _other_lesson(nb: dict, lesson: str, lessons: dict[str, dict]) -> tuple[str, str | None]:
    """Why a notebook named after ``lesson`` is not that lesson's notebook ("" if it may be), and the lesson it is
    (None if none clearly): one whose cells make up most of it, and it at least half of that lesson's cells (the
    share by which collect places a notebook of any name)."""
    ids, want = grade_ids(nb), grade_ids(lessons[lesson])
    if not ids or not want:
        return "", None
    unknown = ids - want
    if len(ids & want) >= 0.5 * min(len(want), len(ids)) or len(unknown) < len(ids) / 2:
        return "", None
    best = max((x for x in lessons if x != lesson), key=lambda x: len(ids & grade_ids(lessons[x])), default=None)
    mine = len(ids & grade_ids(lessons[best])) if best else 0
    which = f"; it is {best}'s" if mine > len(ids) / 2 else ""
    owner = best if which and mine >= 0.5 * max(len(grade_ids(lessons[best])), 1) else None
    return (f"not the {lesson} notebook: {len(unknown)} of its {len(ids)} graded or locked cells are unknown{which}",
            owner)


def _mtime(p: pathlib.Path) -> float | None:
    """When ``p`` was handed in: the time nbgrader's exchange recorded beside it (``<lesson>/<lesson>.ipynb`` with
    ``timestamp.txt``, as ``nbgrader collect`` leaves them), else the file's date."""
    stamp = p.parent / "timestamp.txt"
    if p.parent.name == p.stem and stamp.is_file() and not stamp.is_symlink():
        try:
            when = _parse_stamp(stamp.read_text()[:100])
        except (OSError, UnicodeDecodeError):
            when = None
        if when is not None:
            return when
    try:
        return p.lstat().st_mtime
    except OSError:
        return None


def _parse_stamp(text: str) -> float | None:
    """``2026-12-05 06:38:34.870618 UTC`` (nbgrader's format; no zone: UTC) -> epoch seconds, or None."""
    t = text.strip().replace(" UTC", "+00:00").replace("Z", "+00:00")
    try:
        when = datetime.datetime.fromisoformat(t)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def collect_folder(folder: pathlib.Path, lessons: dict[str, dict]) -> dict[str, dict[str, Submission]]:
    """``folder/<student>/...ipynb`` -> student -> lesson -> :class:`Submission`."""
    return {d.name: collect_student(d.name, d, lessons) for d in sorted(folder.iterdir())
            if d.is_dir() and not d.is_symlink()}
