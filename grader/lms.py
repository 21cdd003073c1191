"""LMS downloads: which student and which lesson each file of a Canvas, Moodle, Blackboard or Gradescope export is.

An LMS names each handed-in file after the student and the assignment, each in its own way:

========== ==========================================================================================
Canvas     ``<name>[_LATE]_<user id>_<submission id>_<file>`` (``smithalice_1001_55501_00_setup.ipynb``)
Moodle     ``<Full Name>_<id>_assignsubmission_file_<file>``, or the same as a folder holding ``<file>``
Blackboard ``<assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<file>`` (a ``.txt`` receipt beside it)
Gradescope ``submission_<id>/<file>``, the students in ``submission_metadata.yml``
nbgrader   the course's ``FileNameCollectorPlugin.named_regexp`` (``<student>_<lesson>.ipynb``)
========== ==========================================================================================

The lesson is read from the end of the name (``<file>`` ends in ``<lesson>.ipynb``, after any copy marks); a copy
mark (``00_setup-1.ipynb`` from Canvas, ``00_setup (1).ipynb`` from a browser) is a resubmission: of the files
for one student and lesson, the newest by the archive's own date wins (then the higher copy number). A roster
(a CSV exported from the LMS) maps the LMS's ids to the course's student ids; with a roster an id not on it is
refused. Every file that is not taken is listed with its reason; nothing is skipped silently.
"""

from __future__ import annotations

import calendar
import csv
import dataclasses
import os
import pathlib
import re
import stat
import zipfile

__all__ = ["Entry", "Skipped", "Roster", "read_roster", "parse", "entries", "select", "unpack", "strip_copy"]

_STUDENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_COPY = re.compile(r"^(?P<base>.*?)(?:-(?P<dash>\d{1,3})| \((?P<paren>\d{1,3})\))$")
_CANVAS = re.compile(r"^(?P<name>[A-Za-z0-9-]+?)(?P<late>_LATE)?_(?P<uid>\d+)_(?P<sub>\d+)_(?P<file>.+)$")
_MOODLE = re.compile(r"^(?P<name>.+?)_(?P<uid>\d+)_assignsubmission_(?:file|onlinetext)_(?P<file>.*)$")
_BLACKBOARD = re.compile(r"^(?P<assignment>.+?)_(?P<user>[A-Za-z0-9._-]+?)_attempt_"
                         r"(?P<date>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)_?(?P<file>.*)$")
_GRADESCOPE = re.compile(r"^submission_(?P<sid>\d+)$")
FORMATS = ("canvas", "moodle", "blackboard", "gradescope", "nbgrader")


@dataclasses.dataclass
class Entry:
    """One file of the download that names a student and a lesson."""

    name: str  # its path in the download
    student: str  # the course's student id (after the roster)
    lesson: str | None  # None: not in the name (collect finds it by the notebook's cells)
    when: float  # the archive entry's or file's date (epoch seconds, UTC)
    copy: int  # 0 for the first upload, N for a copy mark -N or (N)
    lms: str  # which naming it followed
    read: object = dataclasses.field(repr=False, default=None)  # () -> bytes
    unpacked: str = ""  # the name unpack gave a file with no lesson in its name


@dataclasses.dataclass
class Skipped:
    name: str
    reason: str


class Roster:
    """Course student ids, with the LMS ids, logins, e-mail addresses and names that stand for them.

    The CSV has a header row; the first of the columns ``student_id``, ``SIS Login ID`` (Canvas), ``login``,
    ``username``, ``student`` holds the id the gradebook uses, ``name`` (or Canvas's ``Student``) the student's
    name; every other non-empty cell of a row (an LMS user id, an e-mail address, a Gradescope sid, the name) is
    another key for the same student.
    """

    _ID_COLUMNS = ("student_id", "sis login id", "sis_login_id", "login", "username", "student")

    def __init__(self, rows: list[dict[str, str]], source: str = "roster"):
        self.source = source
        self.names: dict[str, str] = {}
        self.keys: dict[str, str] = {}
        for n, row in enumerate(rows, start=2):
            row = {(k or "").strip().lower(): (v or "").strip() for k, v in row.items()}
            col = next((c for c in self._ID_COLUMNS if row.get(c)), None)
            if col is None:
                raise ValueError(f"{source} line {n}: no student id (a column named student_id, SIS Login ID, login, "
                                 "username or student)")
            sid = row[col]
            if not _STUDENT.match(sid):
                raise ValueError(f"{source} line {n}: {sid!r} cannot be a student id (letters, digits, . _ -)")
            if sid in self.names:
                raise ValueError(f"{source} line {n}: student {sid} is listed twice")
            self.names[sid] = row.get("name", "") or (row.get("student", "") if col != "student" else "") or " ".join(
                x for x in (row.get("first name", ""), row.get("last name", "")) if x)
            for k, v in row.items():
                if not v or k in ("name", "first name", "last name", "section"):
                    continue
                key = v.lower()
                if self.keys.get(key, sid) != sid:
                    raise ValueError(f"{source} line {n}: {v!r} stands for both {self.keys[key]} and {sid}")
                self.keys[key] = sid
            if self.names[sid]:
                self.keys.setdefault(_squash(self.names[sid]), sid)

    def find(self, *keys: str) -> str | None:
        for k in keys:
            if k and (k.lower() in self.keys or _squash(k) in self.keys):
                return self.keys.get(k.lower()) or self.keys[_squash(k)]
        return None


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def roster_path(root: pathlib.Path) -> pathlib.Path:
    """The course's roster (``collect --roster`` keeps a copy here; later collects and exports use it)."""
    return root / "roster.csv"


def kept_roster(root: pathlib.Path) -> Roster | None:
    """The roster kept in the course folder, or None."""
    return read_roster(roster_path(root)) if roster_path(root).exists() else None


def read_roster(path: pathlib.Path) -> Roster:
    text = pathlib.Path(path).read_text(encoding="utf-8-sig")
    return Roster(list(csv.DictReader(text.splitlines())), source=str(path))


def strip_copy(stem: str) -> tuple[str, int]:
    """``00_setup-1 (2)`` -> (``00_setup``, 2): copy marks removed, the last one's number kept."""
    copy = 0
    while True:
        m = _COPY.match(stem)
        if not m:
            return stem, copy
        copy = max(copy, int(m["dash"] or m["paren"]))
        stem = m["base"]


def _lesson_at_end(text: str, lessons: list[str]) -> tuple[str | None, str, int]:
    """The lesson whose id ends ``text`` (an ``.ipynb`` name after copy marks): (lesson, what is before, copy)."""
    if not text.endswith(".ipynb"):
        return None, text, 0
    stem, copy = strip_copy(text[: -len(".ipynb")])
    for lesson in sorted(lessons, key=len, reverse=True):
        if stem == lesson or stem.endswith("_" + lesson) or stem.endswith("/" + lesson):
            return lesson, stem[: len(stem) - len(lesson)].rstrip("_/"), copy
    return None, stem, copy


def parse(path: str, lessons: list[str], *, named_regexp: str | None = None,
          gradescope: dict[str, list[str]] | None = None) -> tuple[str, str, str, int, list[str]] | str:
    """(format, lesson, LMS name, copy, keys for the roster) for one file of a download, or why it is skipped.

    A notebook whose name names a student but no lesson (``smithalice_1001_55501_lab.ipynb``) comes back with
    lesson None: collect then finds its lesson by its cells, as for a folder."""
    p = pathlib.PurePosixPath(path)
    base = p.name
    lesson, _, copy = _lesson_at_end(base, lessons)
    if not base.endswith(".ipynb"):
        return "not a notebook (.ipynb)"
    for part in reversed(p.parts[:-1]):
        m = _GRADESCOPE.match(part)
        if m:
            people = (gradescope or {}).get(m["sid"])
            if not people:
                return f"Gradescope submission {m['sid']} is not in submission_metadata.yml"
            return "gradescope", lesson, people[0], copy, people
    for part in reversed(p.parts[:-1]):
        m = _MOODLE.match(part)
        if m:
            return "moodle", lesson, m["name"], copy, [m["uid"], m["name"]]
    m = _MOODLE.match(base)
    if m:
        return "moodle", lesson, m["name"], copy, [m["uid"], m["name"]]
    m = _BLACKBOARD.match(base)
    if m:
        return "blackboard", lesson, m["user"], copy, [m["user"]]
    m = _CANVAS.match(base)
    if m and _lesson_at_end(m["file"], lessons)[0] == lesson:
        return "canvas", lesson, m["name"], copy, [m["uid"], m["name"]]
    if lesson is None:
        inside = [les for les in lessons if les in base]
        if inside:  # a renamed copy (alice_00_setup_final.ipynb): said, not guessed
            return (f"the name holds {inside[0]} but does not end with it: a renamed copy is not graded; if it is "
                    f"the one meant, rename it to end in {inside[0]}.ipynb and collect again")
        return f"no lesson id at the end of the name (expected one of {', '.join(lessons)})"
    if named_regexp:
        m = re.match(named_regexp, strip_copy(base[: -len(".ipynb")])[0] + ".ipynb")
        if m and "student_id" in m.groupdict():
            return "nbgrader", lesson, m["student_id"], copy, [m["student_id"]]
    return f"the name follows no LMS's naming ({', '.join(FORMATS)})"


def _gradescope_metadata(text: str) -> dict[str, list[str]]:
    """submission id -> [sid, email, name] of its first submitter, from ``submission_metadata.yml``."""
    out: dict[str, list[str]] = {}
    for block in re.split(r"^(?=submission_\d+:)", text, flags=re.M):
        m = re.match(r"submission_(\d+):", block)
        if not m:
            continue
        keys = []
        for field in ("sid", "email", "name"):
            f = re.search(rf"^\s*-?\s*:{field}:\s*['\"]?(.*?)['\"]?\s*$", block, re.M)
            if f and f.group(1):
                keys.append(f.group(1))
        out[m.group(1)] = keys
    return out


def _zip_entries(archive: pathlib.Path, max_bytes: int):
    z = zipfile.ZipFile(archive)
    total = sum(i.file_size for i in z.infolist())
    if total > max_bytes:
        raise ValueError(f"{archive} expands to {total / 2**30:.1f} GiB, over the {max_bytes / 2**30:.0f} GiB limit")
    for info in z.infolist():
        if info.is_dir():
            continue
        name = pathlib.PurePosixPath(info.filename)
        mode = info.external_attr >> 16
        if name.is_absolute() or ".." in name.parts or "\\" in info.filename:
            yield info.filename, None, "an absolute path or one that climbs out of the archive"
        elif stat.S_ISLNK(mode):
            yield info.filename, None, "a symbolic link"
        else:
            when = calendar.timegm((*info.date_time, 0, 0, 0))  # zip dates carry no zone: read as UTC
            yield info.filename, (when, lambda i=info: z.read(i)), ""


def _folder_entries(folder: pathlib.Path):
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_symlink():
            yield rel, None, "a symbolic link"
        elif p.is_file():
            yield rel, (p.stat().st_mtime, p.read_bytes), ""


def entries(source: pathlib.Path, lessons: list[str], *, roster: Roster | None = None,
            named_regexp: str | None = None, max_bytes: int = 2 << 30) -> tuple[list[Entry], list[Skipped]]:
    """Every file of a download (a zip or an unpacked folder): the entries that name a student and a lesson,
    and the files skipped, each with its reason."""
    source = pathlib.Path(source)
    raw = list(_zip_entries(source, max_bytes) if source.is_file() else _folder_entries(source))
    gradescope = {}
    for name, got, _ in raw:
        if pathlib.PurePosixPath(name).name == "submission_metadata.yml" and got:
            gradescope.update(_gradescope_metadata(got[1]().decode("utf-8", "replace")))
    out, skipped = [], []
    for name, got, why in raw:
        base = pathlib.PurePosixPath(name).name
        if why:
            skipped.append(Skipped(name, f"refused: {why}"))
            continue
        if base == "submission_metadata.yml" or "__MACOSX" in name or base.startswith("."):
            continue
        found = parse(name, lessons, named_regexp=named_regexp, gradescope=gradescope)
        if isinstance(found, str):
            skipped.append(Skipped(name, found))
            continue
        lms, lesson, who, copy, keys = found
        if roster is not None:
            student = roster.find(*keys)
            if student is None:
                skipped.append(Skipped(name, f"{lms}: {who} ({', '.join(keys)}) is not on the roster "
                                             f"{pathlib.Path(roster.source).name}"))
                continue
        else:
            student = who if lms != "moodle" else _squash(who)
            if not _STUDENT.match(student):
                skipped.append(Skipped(name, f"{lms}: {who!r} cannot be a student id; give a roster (--roster)"))
                continue
        when, read = got
        out.append(Entry(name, student, lesson, when, copy, lms, read))
    return out, skipped


def select(found: list[Entry]) -> tuple[list[Entry], list[Skipped]]:
    """One entry per student and lesson: the newest (archive date, then copy number); the others skipped.
    Entries with no lesson in their name are all kept (collect matches them by their cells)."""
    groups: dict[tuple[str, str], list[Entry]] = {}
    keep, skipped = [e for e in found if e.lesson is None], []
    for e in found:
        if e.lesson is not None:
            groups.setdefault((e.student, e.lesson), []).append(e)
    for (student, lesson), group in sorted(groups.items()):
        group.sort(key=lambda e: (e.when, e.copy))
        best = group[-1]
        rivals = [e for e in group[:-1] if (e.when, e.copy) == (best.when, best.copy)]
        if rivals:
            for e in group:
                skipped.append(Skipped(e.name, f"refused: {len(rivals) + 1} files for {student}/{lesson} with the "
                                               "same date and copy number; which is the newest is unknown"))
            continue
        keep.append(best)
        for e in group[:-1]:
            skipped.append(Skipped(e.name, f"an earlier upload of {student}/{lesson}: {best.name} is newer"))
    return keep, skipped


def unpack(chosen: list[Entry], folder: pathlib.Path) -> None:
    """``folder/<student>/<lesson>.ipynb`` for each chosen entry, dated as the archive dates it."""
    for e in chosen:
        d = folder / e.student
        d.mkdir(parents=True, exist_ok=True)
        if e.lesson is None:  # named after the file, one level down, so that no lesson's name is taken
            d = d / "unnamed"
            d.mkdir(exist_ok=True)
            stem, n = re.sub(r"[^A-Za-z0-9._ ()-]", "_", pathlib.PurePosixPath(e.name).stem)[:80], 0
            path = d / f"{stem}.ipynb"
            while path.exists():
                n += 1
                path = d / f"{stem}-{n}.ipynb"
            e.unpacked = path.name
        else:
            path = d / f"{e.lesson}.ipynb"
        path.write_bytes(e.read())
        os.utime(path, (e.when, e.when))
