"""The instructor's steps over an nbgrader course folder: build, collect, autograde, feedback, export.

The course folder is ``grader/`` (``grader/demo/course`` for the demo class), laid out as nbgrader expects:
``source/`` (instructor notebooks), ``release/`` (student notebooks), ``submitted/<student>/<lesson>/``,
``autograded/``, ``feedback/``, ``gradebook.db``, plus ``reports/`` (the grader's notes, per-submission results
and summary). Every step also works with plain nbgrader commands run in that folder; these add the defensive
collect, parallel sandboxed grading, the progress bar and the summary table.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import re
import subprocess
import sys
import time

from .collect import Submission, collect_folder, read_notebook
from .layout import ROOT as _ROOT
from .lms import roster_path
from .repair import restore_metadata

__all__ = ["COURSE", "api", "build_course", "collect", "collect_lms", "collect_zip", "remove_student",
           "autograde", "feedback", "export", "gradebook_scores", "record", "recorded", "submission_digest",
           "how_graded", "to_grade", "not_graded", "class_results", "skipped_line", "lesson_digest"]

COURSE = _ROOT / "grader"
CONFIG = COURSE / "nbgrader_config.py"


def api(root: pathlib.Path):
    """An ``NbGraderAPI`` on course folder ``root`` with the course configuration."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    config = Config()
    config.merge(PyFileConfigLoader(CONFIG.name, path=str(CONFIG.parent)).load_config())
    config.CourseDirectory.root = str(root.resolve())
    config.CourseDirectory.db_url = f"sqlite:///{(root / 'gradebook.db').resolve()}"
    config.Application.log_level = "WARN"
    return NbGraderAPI(config=config)


def build_course(root: pathlib.Path, sources: dict[str, dict]) -> dict[str, dict]:
    """A course folder of its own from instructor notebooks (lesson -> nbformat dict); returns the releases.

    Uses ``grader.course._nbgrader`` (``nbgrader generate_assignment``) when nbgrader is installed; otherwise
    the grader's own release transform, so grading also works where nbgrader is not installed.
    """
    from .percent import release

    root.mkdir(parents=True, exist_ok=True)
    (root / "nbgrader_config.py").write_text(
        f"c = get_config()  # noqa: F821\nload_subconfig({str(CONFIG)!r})  # noqa: F821\n")
    for lesson, nb in sources.items():
        d = root / "source" / lesson
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{lesson}.ipynb").write_text(json.dumps(nb, indent=1))
    try:
        import nbgrader  # noqa: F401
    except ImportError:
        return {lesson: release(nb) for lesson, nb in sources.items()}
    env = dict(os.environ, PATH=os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ["PATH"]]),
               PYTHONPATH=os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "grader.course._nbgrader", "--root", str(root), "--config", str(CONFIG),
           "--db", f"sqlite:///{(root / 'gradebook.db').resolve()}", *sources]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"nbgrader generate_assignment failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    paths = json.loads(proc.stdout.strip().splitlines()[-1])
    return {lesson: json.loads(pathlib.Path(p).read_text()) for lesson, p in paths.items()}


def _lesson_paths(folder: pathlib.Path) -> list[pathlib.Path]:
    """The lessons' notebooks ``folder/<lesson>/<lesson>.ipynb``, by lesson id."""
    return [p for p in sorted(folder.glob("*/*.ipynb")) if p.stem == p.parent.name]


def _lessons_in(folder: pathlib.Path) -> dict[str, dict]:
    """lesson id -> its notebook ``folder/<lesson>/<lesson>.ipynb``."""
    return {p.stem: json.loads(p.read_text()) for p in _lesson_paths(folder)}


def lesson_names(root: pathlib.Path) -> list[str]:
    """The course's lesson ids (its source notebooks), without reading them."""
    return [p.stem for p in _lesson_paths(root / "source")]


def sources_of(root: pathlib.Path) -> dict[str, dict]:
    return _lessons_in(root / "source")


def releases_of(root: pathlib.Path) -> dict[str, dict]:
    return _lessons_in(root / "release")


def _notes_path(root: pathlib.Path) -> pathlib.Path:
    return root / "reports" / "notes.json"


STAMP = "%Y-%m-%d %H:%M:%S UTC"  # timestamp.txt, as nbgrader writes and parses it


def _stamp(t: float) -> str:
    return time.strftime(STAMP, time.gmtime(t))


def _read_stamp(d: pathlib.Path) -> float | None:
    """The hand-in time recorded in ``d/timestamp.txt`` (epoch seconds), or None."""
    import calendar

    try:
        text = (d / "timestamp.txt").read_text().strip()
        return float(calendar.timegm(time.strptime(text, STAMP)))
    except (OSError, ValueError):
        return None


def default_course(root: pathlib.Path) -> bool:
    """Whether ``root`` is grader/, the course every command (and every ``make grade-*`` target) works on unless
    given ``--course``."""
    return pathlib.Path(root).resolve() == (_ROOT / "grader").resolve()


def grader_command(root: pathlib.Path, command: str) -> str:
    """``python -m grader COMMAND`` as it reaches the course ``root``: with its ``--course`` unless it is grader/."""
    return f"python -m grader {command}" if default_course(root) else f"python -m grader --course {root} {command}"


def backup_dir(root: pathlib.Path) -> pathlib.Path:
    """Where collect keeps every notebook it replaces: ``backups/<student>/<lesson>/<hand-in time>.ipynb``."""
    return root / "backups"


#: The largest unreadable hand-in kept as it came (larger ones are named in the notes only).
UNREADABLE_KEPT_BYTES = 256 << 20


def _keep_unreadable(root: pathlib.Path, sub, when: float) -> pathlib.Path | None:
    """A file handed in that collect could not use (malformed JSON, not a notebook, another lesson's, over the
    size limit) is never dropped: its bytes go to ``backups/unreadable/<student>/<lesson>/`` for the instructor
    to look at. None when there was no file (nothing handed in) or it is too large to keep."""
    src = pathlib.Path(sub.path) if sub.path else None
    if src is None or not src.is_file() or src.is_symlink() or src.stat().st_size > UNREADABLE_KEPT_BYTES:
        return None
    label = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when))
    # the same file again (a second collect of one batch) is the copy already kept
    return _kept(root, pathlib.Path("unreadable", sub.student, sub.lesson), label, f"-{src.name}",
                 src.read_bytes(), same_ok=True)


def _keep_backup(root: pathlib.Path, student: str, lesson: str, d: pathlib.Path) -> pathlib.Path:
    when = _read_stamp(d)
    label = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when)) if when is not None else "undated"
    path = _kept(root, pathlib.Path(student, lesson), label, ".ipynb", (d / f"{lesson}.ipynb").read_bytes())
    if (d / "timestamp.txt").exists():
        path.with_suffix(".timestamp.txt").write_bytes((d / "timestamp.txt").read_bytes())
    return path


def _kept(root: pathlib.Path, where: pathlib.Path, label: str, suffix: str, data: bytes, *,
          same_ok: bool = False) -> pathlib.Path:
    """``data`` written under ``backups/<where>/`` as ``<label><suffix>``, else as the first free
    ``<label>-<n><suffix>``: nothing kept is ever overwritten. With ``same_ok``, a file there holding the same
    bytes is returned instead of a new copy."""
    dest = backup_dir(root) / where
    dest.mkdir(parents=True, exist_ok=True)
    os.chmod(backup_dir(root), 0o700)
    n, path = 0, dest / f"{label}{suffix}"
    while path.exists():
        if same_ok and path.read_bytes() == data:
            return path
        n += 1
        path = dest / f"{label}-{n}{suffix}"
    path.write_bytes(data)
    return path


def _skip(name: str, reason: str):
    from .lms import Skipped

    return Skipped(name, reason)


def _same(path: pathlib.Path, nb: dict) -> bool:
    try:
        return json.loads(path.read_text()) == json.loads(json.dumps(nb))
    except (OSError, ValueError):
        return False


def collect(root: pathlib.Path, folder: pathlib.Path, lessons: list[str] | None = None, *,
            roster: pathlib.Path | None = None, skipped: list | None = None, replace_newer: bool = False) -> dict:
    """``folder/<student>/*.ipynb`` -> ``root/submitted/<student>/<lesson>/<lesson>.ipynb``, read defensively.

    ``lessons``: the lessons being collected (default: every lesson someone in ``folder`` submitted). Collect
    never deletes and never replaces a collected notebook except with a newer version of it (by the hand-in time:
    the file's date, or the archive entry's): what it replaces is kept under ``backups/``. Each submission's
    ``status`` says what happened: ``new``, ``replaced`` (the older one backed up), ``unchanged`` (the same
    notebook again), ``kept`` (an older or unreadable version, or nothing, in this batch: the collected one
    stays), ``missing`` (nothing collected: graded as an explicit 0, the reason kept in ``reports/notes.json``).
    A student or lesson not in this batch is left as it is. With a roster (given, or kept from an earlier
    collect), a folder whose name is not on it is not collected; it is added to ``skipped`` with the reason, and
    a student on it with nothing collected for a lesson being collected is ``missing``. ``replace_newer``: this
    batch's notebooks replace collected ones even where those were handed in later (the one a student meant was
    an earlier copy); the replaced one is kept under ``backups/`` all the same.
    """
    sources = sources_of(root)
    if not sources:
        raise ValueError(f"no lessons in {root / 'source'}: build them first (make course)")
    if not pathlib.Path(folder).is_dir():
        raise ValueError(f"{folder} is not a folder of submissions (<student>/<lesson>.ipynb)")
    collected = collect_folder(folder, sources)
    if not collected:  # nothing to collect is a mistake to name, not an empty batch
        loose = sorted(q.name for q in pathlib.Path(folder).glob("*.ipynb"))
        raise ValueError(f"{folder} has no student folders" + (
            f", only notebooks ({', '.join(loose[:3])}{', ...' if len(loose) > 3 else ''}): collect takes one folder "
            "per student (FOLDER/<student>/<lesson>.ipynb); an LMS download goes with --lms" if loose else
            ": collect takes one folder per student (FOLDER/<student>/<lesson>.ipynb)"))
    releases = releases_of(root)
    known = load_roster(root, roster)
    if known is not None:
        for name in list(collected):
            sid = known.find(name)
            if sid is None:
                del collected[name]
                if skipped is not None:
                    skipped.append(_skip(f"{name}/", f"{name} is not on the roster {roster_path(root).name}"))
            elif sid != name:
                if sid in collected:
                    del collected[name]
                    if skipped is not None:
                        skipped.append(_skip(f"{name}/", f"refused: another folder is also student {sid}"))
                    continue
                collected[sid] = collected.pop(name)
                for sub in collected[sid].values():
                    sub.student = sid
    removed = removed_students(root)
    for name in [n for n in collected if n in removed]:
        del collected[name]
        if skipped is not None:
            back = grader_command(root, f"readmit {name}")
            skipped.append(_skip(f"{name}/", f"{name} was removed from the course {removed[name]} (remove-student): "
                                             f"not collected; `{back}` takes them back"))
    if lessons is None:
        lessons = sorted({lesson for subs in collected.values() for lesson, sub in subs.items()
                          if sub.notebook is not None or sub.notes != ["not submitted"]})
    if known is not None:  # a student on the roster with nothing handed in: an explicit 0, not a silent gap
        for sid in known.names:
            if sid in removed:  # still on the roster, but removed: no folder, no 0, until readmit
                continue
            absent = {lesson: Submission(sid, lesson, None, ["not submitted"]) for lesson in lessons
                      if not (root / "submitted" / sid / lesson / f"{lesson}.ipynb").exists()}
            if sid not in collected and absent:
                collected[sid] = absent
    _notes_path(root).parent.mkdir(parents=True, exist_ok=True)
    notes = json.loads(_notes_path(root).read_text()) if _notes_path(root).exists() else {}
    for student, subs in collected.items():
        for lesson, sub in subs.items():
            if lesson not in lessons:
                sub.status = "not collected"
                continue
            d = root / "submitted" / student / lesson
            d.mkdir(parents=True, exist_ok=True)
            target = d / f"{lesson}.ipynb"
            had = target.exists()
            when = sub.timestamp if sub.timestamp is not None else time.time()
            mine = notes.setdefault(student, {})
            if sub.notebook is None:
                raw = _keep_unreadable(root, sub, when)
                if raw is not None:
                    sub.notes = list(sub.notes) + [f"the file handed in is kept as {raw.relative_to(root)}"]
                if had:
                    why = "; ".join(sub.notes) or "not submitted"
                    sub.status = f"kept (the one collected {_stamp(_read_stamp(d) or 0)}; this batch: {why})"
                else:
                    sub.status = "missing"
                    if not mine.get(lesson) or sub.notes != ["not submitted"]:
                        mine[lesson] = sub.notes
                continue
            sub.notes = list(sub.notes) + restore_metadata(sub.notebook, releases.get(lesson))
            if had and _same(target, sub.notebook):
                sub.status = "unchanged"
                mine[lesson] = sub.notes  # this batch's, of the same notebook (another version beside it, say)
                continue
            before = _read_stamp(d) if had else None
            older = had and before is not None and when <= before  # than the one collected
            if older and not replace_newer:
                sub.status = (f"kept (the one collected is newer: {_stamp(before)}; this one {_stamp(when)}; "
                              "collect --replace-newer takes it in its place)")
                continue
            if had:
                kept = _keep_backup(root, student, lesson, d)
                sub.status = f"replaced (the {'newer' if older else 'older'} one kept as {kept.relative_to(root)})"
            else:
                sub.status = "new"
            tmp = d / f".{lesson}.ipynb.part"
            tmp.write_text(json.dumps(sub.notebook, indent=1))
            os.replace(tmp, target)
            (d / "timestamp.txt").write_text(_stamp(when))
            mine[lesson] = sub.notes
    _notes_path(root).write_text(json.dumps(notes, indent=1))
    for d in (root / "submitted", root / "reports"):
        if d.exists():
            os.chmod(d, 0o700)
    return collected


def load_roster(root: pathlib.Path, given: pathlib.Path | None = None):
    """The roster given now (kept in the course folder for later) or the one kept before, or None."""
    from .lms import kept_roster, read_roster

    if given is not None:
        roster = read_roster(given)
        roster_path(root).parent.mkdir(parents=True, exist_ok=True)
        if pathlib.Path(given).resolve() != roster_path(root).resolve():
            if roster_path(root).exists():
                backup = backup_dir(root) / "roster" / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.csv"
                backup.parent.mkdir(parents=True, exist_ok=True)
                backup.write_bytes(roster_path(root).read_bytes())
            roster_path(root).write_bytes(pathlib.Path(given).read_bytes())
        return roster
    return kept_roster(root)


def _named_regexp() -> str:
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader(CONFIG.name, path=str(CONFIG.parent)).load_config().FileNameCollectorPlugin.named_regexp


def collect_lms(root: pathlib.Path, source: pathlib.Path, *, roster: pathlib.Path | None = None,
                lessons: list[str] | None = None, max_bytes: int = 2 << 30,
                replace_newer: bool = False) -> tuple[dict, list]:
    """An LMS download (a zip, or the folder it unpacks to) -> :func:`collect`; see :mod:`grader.lms`.

    Returns (what :func:`collect` returns, the skipped files as :class:`grader.lms.Skipped`). Resubmissions:
    the newest of a student's files for one lesson, by the archive's dates; it goes through :func:`collect`,
    so it replaces a collected notebook only if it is newer than that one (or, with ``replace_newer``, always).
    """
    import tempfile

    from . import lms

    names = sorted(sources_of(root))
    if not names:
        raise ValueError(f"no lessons in {root / 'source'}: build them first (make course)")
    found, skipped = lms.entries(source, names, roster=load_roster(root, roster), named_regexp=_named_regexp(),
                                 max_bytes=max_bytes)
    chosen, older = lms.select(found)
    with tempfile.TemporaryDirectory(prefix="grader-lms-") as tmp:
        lms.unpack(chosen, pathlib.Path(tmp))
        refused: list = []  # whole students collect refused (removed ones), named by their unpacked folder
        collected = collect(root, pathlib.Path(tmp), lessons, skipped=refused,
                            replace_newer=replace_newer) if chosen else {}
    for s in refused:  # name the download's own files, as every other skipped file is named
        files = [e.name for e in chosen if f"{e.student}/" == s.name]
        skipped += [lms.Skipped(name, s.reason) for name in files or [s.name]]
    for subs in collected.values():
        for sub in subs.values():
            picked = next((e for e in chosen if (e.student, e.lesson) == (sub.student, sub.lesson)), None)
            if picked is not None:
                sub.path = picked.name
    for e in (e for e in chosen if e.lesson is None):  # did its cells make it some lesson's notebook?
        subs = collected.get(e.student, {})
        if not any(f"under the name {e.unpacked}" in n for s in subs.values() for n in s.notes):
            skipped.append(lms.Skipped(e.name, "no lesson id in the name, and its cells are no (other) lesson's"))
    return collected, skipped + older


def collect_zip(root: pathlib.Path, archive: pathlib.Path, *, max_bytes: int = 2 << 30) -> dict:
    """An LMS download -> :func:`collect` (:func:`collect_lms` without the list of skipped files)."""
    return collect_lms(root, archive, max_bytes=max_bytes)[0]


def remove_student(root: pathlib.Path, student: str) -> list[str]:
    """Take a student out of the course: out of the gradebook, and their folders moved (never deleted) to
    ``backups/removed/<student>-<time>/``. Returns what was done, one line each."""
    from nbgrader.api import Gradebook, MissingEntry

    from .lms import kept_roster

    roster = kept_roster(root)  # read first: one that cannot be read stops removal before it moves anything
    done = []
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest, n = backup_dir(root) / "removed" / f"{student}-{stamp}", 0
    while dest.exists():  # removed, readmitted, collected and removed again within the second
        n += 1
        dest = backup_dir(root) / "removed" / f"{student}-{stamp}-{n}"
    for part in ("submitted", "autograded", "feedback", "reports/results"):
        d = root / part / student
        if d.is_dir() and not d.is_symlink():
            (dest / part).parent.mkdir(parents=True, exist_ok=True)
            os.replace(d, dest / part)
            done.append(f"moved {d.relative_to(root)} to {(dest / part).relative_to(root)}")
    if _notes_path(root).exists():
        notes = json.loads(_notes_path(root).read_text())
        if student in notes:
            dest.mkdir(parents=True, exist_ok=True)
            (dest / "notes.json").write_text(json.dumps(notes.pop(student), indent=1))
            _notes_path(root).write_text(json.dumps(notes, indent=1))
    if (root / "gradebook.db").exists():
        with Gradebook(f"sqlite:///{(root / 'gradebook.db').resolve()}") as gb:
            try:
                gb.remove_student(student)
                done.append("removed from the gradebook (its scores are gone from exports)")
            except MissingEntry:
                pass
    if roster is not None and student in roster.names:  # in the course even before anything was collected
        done.append(f"still on the roster {roster_path(root)}: take them out of it too, or the class CSV keeps a row "
                    "of zeros for them")
    if done:  # a later batch still holding their notebooks must not bring them back unasked
        removed = removed_students(root)
        removed[student] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        _save_removed(root, removed)
        back = grader_command(root, f"readmit {student}")
        done.append(f"collect skips them from now on (`{back}` takes them back)")
    if (backup_dir(root)).exists():
        os.chmod(backup_dir(root), 0o700)
    return done


def _removed_path(root: pathlib.Path) -> pathlib.Path:
    return backup_dir(root) / "removed" / "students.json"


def _save_removed(root: pathlib.Path, removed: dict[str, str]) -> None:
    _removed_path(root).parent.mkdir(parents=True, exist_ok=True)
    _removed_path(root).write_text(json.dumps(removed, indent=1, sort_keys=True))


def removed_students(root: pathlib.Path) -> dict[str, str]:
    """Who ``remove-student`` took out of the course (id -> when), whom collect skips."""
    path = _removed_path(root)
    return json.loads(path.read_text()) if path.is_file() else {}


def _removed_dirs(root: pathlib.Path, student: str) -> list[pathlib.Path]:
    """The folders :func:`remove_student` moved ``student``'s work to, oldest first: ``<student>-<time>`` exactly,
    never another student's whose id starts with this one's (``ann-lee-<time>`` is not ``ann``'s)."""
    folder = backup_dir(root) / "removed"
    name = re.compile(re.escape(student) + r"-(\d{8}T\d{6}Z)(?:-(\d+))?")
    found = [(m.group(1), int(m.group(2) or 0), d) for d in (folder.iterdir() if folder.is_dir() else [])
             if d.is_dir() and (m := name.fullmatch(d.name))]
    return [d for _, _, d in sorted(found)]


def readmit(root: pathlib.Path, student: str) -> list[str]:
    """Undo :func:`remove_student`'s hold on collect: the next collect takes ``student``'s notebooks again.
    Their earlier work stays where removal put it; returns what was done and where that work is."""
    removed = removed_students(root)
    if removed.pop(student, None) is None:
        return []
    from .lms import kept_roster

    roster = kept_roster(root)  # read first: a roster that cannot be read stops readmit before it changes anything
    _save_removed(root, removed)
    kept = []  # the removals that took notebooks away (one that took only empty "missing" folders is no help)
    for d in _removed_dirs(root, student):
        lessons = [f"{nb.parent.name} handed in {_stamp(when)}" if (when := _read_stamp(nb.parent)) is not None
                   else nb.parent.name for nb in sorted((d / "submitted").glob("*/*.ipynb"))
                   if nb.stem == nb.parent.name]
        if lessons:
            kept.append((d.relative_to(root), lessons))
    back = ("collect takes their notebooks again" if roster is None or student in roster.names else
            f"collect takes their notebooks again once they are on the roster: add their row back to "
            f"{roster_path(root)} (until then collect refuses them as not on the roster)")
    return [back] + [
        f"their earlier work ({', '.join(lessons)}) is kept in {d}/ (to grade it again, move the lesson folders of "
        f"its submitted/ to submitted/{student}/, in place of any empty one there)" for d, lessons in kept]


def submissions(root: pathlib.Path, lessons: list[str] | None = None,
                students: list[str] | None = None) -> list[Submission]:
    """What ``collect`` left in ``root/submitted``, with its notes."""
    notes = json.loads(_notes_path(root).read_text()) if _notes_path(root).exists() else {}
    out = []
    for sdir in sorted((root / "submitted").iterdir()) if (root / "submitted").exists() else []:
        if not sdir.is_dir() or (students and sdir.name not in students):
            continue
        for ldir in sorted(sdir.iterdir()):
            if not ldir.is_dir() or (lessons and ldir.name not in lessons):
                continue
            path = ldir / f"{ldir.name}.ipynb"
            n = notes.get(sdir.name, {}).get(ldir.name, [])
            if path.exists():
                nb, more = read_notebook(path)
                out.append(Submission(sdir.name, ldir.name, nb, n + [m for m in more if m not in n], str(path)))
            else:
                out.append(Submission(sdir.name, ldir.name, None, n or ["not submitted"]))
    return out


@contextlib.contextmanager
def _quiet():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        yield buf


#: what the last :func:`autograde` in this process did: its seed (and where it came from), what it changed, and
#: the submissions it left as an earlier run recorded them (``skipped``: (student, lesson) pairs)
last_run: dict = {}


def autograde(root: pathlib.Path, *, lessons=None, students=None, slots: int = 2, settings=None,
              progress: bool = True, speed_policy: str = "zero", new_seed: bool = False, redo: bool = False):
    """Grade the collected submissions in the sandbox (in parallel), then record them with nbgrader autograde.

    Only those :func:`to_grade` picks: new or changed since an earlier run recorded them (``redo``: every one).
    ``speed_policy``: what a speed requirement is worth where no GPU can time it (:mod:`grader.policy`). The
    master seed is the term's (``reports/seed.json``; ``settings.seed`` or ``new_seed`` replace it, and then
    every submission is graded again), so that a regrade is reproducible; what a regrade changed is in
    :data:`last_run` and ``reports/history.jsonl``. Returns this run's results (:func:`class_results` adds the
    recorded ones of what it skipped), nbgrader's failures, and the sandbox's first uid (None when nothing was
    graded)."""
    from kernels.device import MODE

    from . import classbook
    from .grade import Grader, Settings
    from .run import grade_class

    sources, releases = sources_of(root), releases_of(root)
    subs = [s for s in submissions(root, lessons, students) if s.lesson in sources]
    settings = settings or Settings()
    settings.seed, seed_line = classbook.term_seed(root, settings.seed, new=new_seed)
    graded_as = how_graded(settings.seed, MODE, speed_policy)
    todo, skipped = to_grade(root, subs, graded_as, redo=redo)
    settings.hide = [*settings.hide, str(root.resolve())]
    settings.warm_lessons = tuple(sorted({s.lesson for s in todo}))
    grader = Grader(settings) if todo else None
    results = (grade_class(grader, todo, sources, releases, slots=slots, progress=progress,
                           speed_policy=speed_policy) if todo else [])
    last_run.clear()
    last_run.update(seed=settings.seed, seed_line=seed_line, speed_policy=speed_policy,
                    changes=classbook.record_changes(root, results, settings.seed),
                    skipped=[(s.student, s.lesson) for s in skipped])
    failures = record(root, todo, results, graded_as=graded_as)
    return results, failures, grader.sandbox.uid_base if grader else None


def how_graded(seed: int, mode: str, speed_policy: str) -> dict:
    """What a recorded result's score depends on besides the notebook: the master seed, the mode (``gpu`` or
    ``interpreter``) and, in the interpreter, the speed policy. A result recorded otherwise is graded again."""
    return {"seed": seed, "mode": mode, "speed_policy": None if mode == "gpu" else speed_policy}


def to_grade(root: pathlib.Path, subs: list[Submission], graded_as: dict, *,
             redo: bool = False) -> tuple[list[Submission], list[Submission]]:
    """Which of ``subs`` a run grades, and which it leaves as an earlier run recorded them: a submission is
    skipped when this version of it (:func:`recorded`) was graded ``graded_as`` (:func:`how_graded`) and
    recorded; ``redo`` grades every one. Grading on one machine and on a cluster both choose here."""
    digests = {lesson: lesson_digest(root, lesson) for lesson in {s.lesson for s in subs}} if not redo else {}
    done = [not redo and recorded(root, s, graded_as, digest=digests[s.lesson]) for s in subs]
    return [s for s, d in zip(subs, done) if not d], [s for s, d in zip(subs, done) if d]


def not_graded(root: pathlib.Path) -> list[Submission]:
    """The collected submissions whose version no run has graded and recorded: collected (again) since the last
    autograde, or never graded. Feedback, the class CSV and the report show what was recorded before for them."""
    sources = sources_of(root)
    return [s for s in submissions(root) if s.lesson in sources and not recorded(root, s)]


def class_results(root: pathlib.Path, results: list, skipped: list[tuple[str, str]],
                  earlier: dict | None = None) -> list:
    """This run's ``results`` with the recorded results of the submissions it ``skipped`` ((student, lesson)
    pairs): every submission the run covered, for the table, the report and the late-penalty lines. A skipped
    one also carries what a later collect of the same notebook noted (another version beside it, say).
    ``earlier``: the recorded results (:func:`classbook.load_results`), where the caller has them already."""
    from .classbook import load_results

    if earlier is None:
        earlier = load_results(root) if skipped else {}
    notes = json.loads(_notes_path(root).read_text()) if skipped and _notes_path(root).exists() else {}
    ran = {(r.student, r.lesson) for r in results}
    rows = list(results)
    for k in skipped:
        if k in earlier and k not in ran:
            r = earlier[k]
            r.notes = [n for n in notes.get(k[0], {}).get(k[1], []) if n not in r.notes] + r.notes
            rows.append(r)
    return sorted(rows, key=lambda r: (r.student, r.lesson))


def skipped_line(n: int) -> str:
    """What a run says of the submissions :func:`to_grade` left as they were."""
    return (f"{n} submission(s) not graded again: an earlier run graded and recorded them as they are now, with "
            "the same seed, mode and speed policy, against the lesson as it is now (--redo grades them again)")


def submission_digest(sub: Submission) -> str:
    """The sha256 of the collected notebook file (``"none"`` when nothing was submitted): which version a result
    grades, so a re-run can tell a graded submission from one collected again since."""
    import hashlib

    if sub.notebook is None or not sub.path or not pathlib.Path(sub.path).exists():
        return "none"
    return hashlib.sha256(pathlib.Path(sub.path).read_bytes()).hexdigest()


def lesson_digest(root: pathlib.Path, lesson: str) -> str:
    """The sha256 of what a lesson's grading depends on besides the notebook: its source in the course folder
    (graded cells, points, hidden tests) and its checks' module in the package (cases, tolerances, rules). A
    result recorded under another digest is graded again: the instructor changed the lesson since."""
    import hashlib

    h = hashlib.sha256()
    checks = _ROOT / "kernels" / "checks" / "lessons" / f"l{lesson}.py"
    for path in (root / "source" / lesson / f"{lesson}.ipynb", checks):
        h.update(path.name.encode() + b"\0")
        h.update(path.read_bytes() if path.is_file() else b"(none)")
    return h.hexdigest()


def record(root: pathlib.Path, subs: list[Submission], results: list, a=None, *,
           graded_as: dict | None = None) -> list[tuple[str, str, str]]:
    """This process alone writes the records: each result (in ``subs``' order) to ``reports/results``, then
    ``nbgrader autograde`` (handed each result by :func:`nbexec.autograde_with`) or an explicit 0 for a
    notebook that was not submitted. ``a``: an :func:`api` to reuse; ``graded_as``: how the results were graded
    (:func:`how_graded`), kept beside each. Returns nbgrader's failures as (student, lesson, log)."""
    from . import nbexec

    out = nbexec.results_dir(root)
    paths = {}
    digests = {lesson: lesson_digest(root, lesson) for lesson in {r.lesson for r in results}}
    for sub, r in zip(subs, results):
        p = out / r.student / f"{r.lesson}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        paths[(r.student, r.lesson)] = p
        p.write_text(json.dumps(dict(r.as_dict(), submission_sha256=submission_digest(sub), graded_as=graded_as,
                                     lesson_sha256=digests[r.lesson]), indent=1, default=str))
    failures = []
    a = a or api(root)
    for sub, r in zip(subs, results):
        ok = True
        if sub.notebook is None:
            _record_zero(root, r, "; ".join(sub.notes) or "not submitted")
        else:
            with _quiet() as log:
                res = nbexec.autograde_with(a, r)
            if not res.get("success"):
                ok = False
                failures.append((r.student, r.lesson, (res.get("error") or "") + log.getvalue()[-2000:]))
        p = paths[(r.student, r.lesson)]
        p.write_text(json.dumps(dict(json.loads(p.read_text()), recorded=ok), indent=1))
    return failures


def recorded(root: pathlib.Path, sub: Submission, graded_as: dict | None = None, *, digest: str | None = None) -> bool:
    """Whether this version of the submission (its sha256) was graded and recorded in the gradebook by an earlier
    run; with ``graded_as`` (:func:`how_graded`), graded that way too, and against the lesson as it is now
    (:func:`lesson_digest`; ``digest``: that digest, where the caller computed it once for many submissions)."""
    from . import nbexec

    p = nbexec.results_dir(root) / sub.student / f"{sub.lesson}.json"
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError):
        return False
    return (bool(d.get("recorded")) and d.get("submission_sha256") == submission_digest(sub)
            and (graded_as is None or (d.get("graded_as") == graded_as
                                       and d.get("lesson_sha256") == (digest or lesson_digest(root, sub.lesson)))))


def _record_zero(root: pathlib.Path, result, reason: str) -> None:
    """An explicit 0 in the gradebook for a notebook that could not be graded, with the reason as a comment."""
    import warnings

    from nbgrader.api import Gradebook
    from sqlalchemy.exc import SAWarning

    with Gradebook(f"sqlite:///{(root / 'gradebook.db').resolve()}") as gb, warnings.catch_warnings():
        # nbgrader's add_submission flushes half-made rows and SQLAlchemy warns; the records come out right
        warnings.simplefilter("ignore", SAWarning)
        gb.update_or_create_student(result.student)
        gb.update_or_create_submission(result.lesson, result.student)
        nb = gb.find_submission_notebook(result.lesson, result.lesson, result.student)
        for grade in nb.grades:
            grade.auto_score = 0
            grade.needs_manual_grade = False
        for comment in nb.comments:
            comment.auto_comment = reason
        gb.db.commit()


def feedback(root: pathlib.Path) -> list[tuple[str, str, str]]:
    """``nbgrader generate_feedback`` for every autograded submission: HTML under ``feedback/``."""
    a = api(root)
    failures = []
    for student_dir in sorted((root / "autograded").iterdir()) if (root / "autograded").exists() else []:
        for ldir in sorted(student_dir.iterdir()):
            with _quiet() as log:
                res = a.generate_feedback(ldir.name, student_dir.name, force=True)
            if not res.get("success"):
                why = "\n".join(x for x in (res.get("error"), res.get("log"), log.getvalue()) if x)
                failures.append((student_dir.name, ldir.name, why[-2000:] or "no reason given"))
    _feedback_without_notebook(root)
    return failures


def _feedback_without_notebook(root: pathlib.Path) -> list[pathlib.Path]:
    """A feedback page for each submission with no gradable notebook (unreadable, another lesson's, missing),
    which nbgrader has nothing to render for: the lesson, 0 points, and why, in words the student can act on."""
    import html

    from .notebook import split

    sources = sources_of(root)
    written = []
    for sub in submissions(root):
        if sub.notebook is not None or sub.lesson not in sources:
            continue
        points = sum(g.points for g in split(sources[sub.lesson])[1])
        reasons = sub.notes or ["not submitted"]
        page = root / "feedback" / sub.student / sub.lesson / f"{sub.lesson}.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        items = "".join(f"<li>{html.escape(r)}</li>" for r in reasons)
        page.write_text(
            f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(sub.lesson)}: feedback</title>"
            f"</head><body><h1>{html.escape(sub.lesson)}: 0 of {points:g} points</h1>"
            f"<p>Student: {html.escape(sub.student)}. Nothing in this submission could be graded:</p><ul>{items}</ul>"
            f"<p>Hand in <code>{html.escape(sub.lesson)}.ipynb</code>, the notebook of this lesson saved from "
            "JupyterLab, before the due date; ask your instructor if it was handed in and this page says "
            "otherwise.</p></body></html>\n")
        written.append(page)
    return written


def export_class(root: pathlib.Path, path: pathlib.Path) -> pathlib.Path:
    """The class CSV (:func:`grader.classbook.write_csv`): a row per student, per-cell columns, roster names."""
    from .classbook import write_csv

    return write_csv(root, path)


def export(root: pathlib.Path, path: pathlib.Path) -> pathlib.Path:
    """``nbgrader export``: one CSV row per student and lesson."""
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin

    with Gradebook(f"sqlite:///{(root / 'gradebook.db').resolve()}") as gb, _quiet():
        CsvExportPlugin(to=str(path)).export(gb)
    return path


def gradebook_scores(root: pathlib.Path) -> dict[tuple[str, str], float]:
    """(student, lesson) -> the score recorded in the gradebook."""
    from nbgrader.api import Gradebook

    out = {}
    with Gradebook(f"sqlite:///{(root / 'gradebook.db').resolve()}") as gb:
        for a in gb.assignments:
            for s in gb.students:
                try:
                    sub = gb.find_submission(a.name, s.id)
                except Exception:
                    continue
                out[(s.id, a.name)] = float(sub.score)
    return out
