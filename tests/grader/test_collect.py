"""Collecting never aborts: every odd submission is restored or an explicit 0 with its reason."""

import json

from grader.collect import collect_student, other_versions, read_notebook


def test_odd_submissions(tmp_path, fixture_source):
    lesson = "90_grader_fixture"
    good = json.dumps(fixture_source)
    d = tmp_path / "alice"
    d.mkdir()
    (d / f"{lesson} (copy).ipynb").write_text(good)
    (d / "notes.ipynb").write_text('{"cells": []}')
    subs = collect_student("alice", d, {lesson: fixture_source, "00_setup": {"cells": []}})
    assert subs[lesson].notebook is not None
    assert any("under the name" in n for n in subs[lesson].notes)
    assert any("ignored extra" in n for s in subs.values() for n in s.notes)
    assert subs["00_setup"].notebook is None and subs["00_setup"].notes == ["not submitted"]


def test_read_notebook_variants(tmp_path, fixture_source):
    p = tmp_path / "x.ipynb"
    p.write_text('{"cells": [ oops')
    nb, notes = read_notebook(p)
    assert nb is None and "malformed JSON" in notes[0]
    p.write_text(json.dumps(dict(fixture_source, nbformat=5, nbformat_minor=1)))
    nb, notes = read_notebook(p)
    assert nb["nbformat"] == 4 and "newer than 4.5" in notes[0]
    p.write_text(json.dumps({"nbformat": 3, "worksheets": []}))
    nb, notes = read_notebook(p)
    assert nb is None and "no list of cells" in notes[0]
    broken = dict(fixture_source, cells=fixture_source["cells"] + [{"cell_type": "weird"}, 5])
    p.write_text(json.dumps(broken))
    nb, notes = read_notebook(p)
    assert len(nb["cells"]) == len(fixture_source["cells"]) and "2 unreadable cell(s)" in notes[0]


def test_zip_collect(tmp_path, fixture_source):
    import zipfile

    from grader import workflow

    root = tmp_path / "course"
    (root / "source" / "90_grader_fixture").mkdir(parents=True)
    (root / "source" / "90_grader_fixture" / "90_grader_fixture.ipynb").write_text(json.dumps(fixture_source))
    archive = tmp_path / "lms.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("submissions/alice_90_grader_fixture.ipynb", json.dumps(fixture_source))
        z.writestr("submissions/bob_90_grader_fixture.ipynb", "not json")
        z.writestr("../evil_90_grader_fixture.ipynb", "{}")
    got = workflow.collect_zip(root, archive)
    assert set(got) == {"alice", "bob"}
    assert (root / "submitted" / "alice" / "90_grader_fixture" / "90_grader_fixture.ipynb").exists()
    assert not (root / "submitted" / "bob" / "90_grader_fixture" / "90_grader_fixture.ipynb").exists()
    assert "malformed JSON" in got["bob"]["90_grader_fixture"].notes[0]


_EMPTY = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _v(nb: dict, n: int) -> dict:
    out = json.loads(json.dumps(nb))
    out["cells"][0]["source"] = f"# version {n}"
    return out


def _version(path) -> int:
    return int(json.loads(path.read_text())["cells"][0]["source"].split()[-1])


def _course(tmp_path, fixture_source):
    root = tmp_path / "course"
    for lesson in ("90_grader_fixture", "00_setup"):
        (root / "source" / lesson).mkdir(parents=True)
        src = fixture_source if lesson == "90_grader_fixture" else _EMPTY
        (root / "source" / lesson / f"{lesson}.ipynb").write_text(json.dumps(src))
    return root


def _batch(folder, files: dict, when: float | None):
    """Write ``files`` (path -> notebook or text) under ``folder``, each modified at ``when`` (None: now)."""
    import os

    for rel, nb in files.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(nb if isinstance(nb, str) else json.dumps(nb))
        if when is not None:
            os.utime(p, (when, when))
    return folder


def _class(tmp_path, fixture_source, students, *, roster=None, when=None):
    """A course with the fixture lesson of each of ``students`` handed in (``tmp_path/in``, modified at ``when``)
    and collected."""
    from grader import workflow

    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    _batch(tmp_path / "in", {f"{who}/{fx}.ipynb": fixture_source for who in students}, when)
    workflow.collect(root, tmp_path / "in", lessons=[fx], roster=roster)
    return root


def _alice_and_dave(tmp_path, fixture_source):
    """A course whose roster (``tmp_path/roster.csv``, kept by collect) names alice and dave, each with the fixture
    lesson collected, handed in 2025-12-01 10:00 UTC (``tmp_path/in``): the class the removal tests start from."""
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,name\nalice,Alice A\ndave,Dave D\n")
    return _class(tmp_path, fixture_source, ("alice", "dave"), roster=roster, when=1764583200)


def test_collect_never_loses_work(tmp_path, fixture_source):
    """A later batch holding fewer notebooks, an older copy, an unreadable copy or the same notebook again
    changes nothing collected; a newer version replaces it and the older one is kept as a backup."""
    from grader import workflow

    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    first = _v(fixture_source, 1)
    _batch(tmp_path / "b1", {f"dave/{fx}.ipynb": first, "dave/00_setup.ipynb": _EMPTY,
                             f"erin/{fx}.ipynb": first}, 1_700_000_000)
    got = workflow.collect(root, tmp_path / "b1")
    assert got["dave"][fx].status == "new" and got["erin"][fx].status == "new"
    kept = root / "submitted" / "dave" / fx / f"{fx}.ipynb"
    stamp = (kept.parent / "timestamp.txt").read_text()
    assert stamp == "2023-11-14 22:13:20 UTC"  # the file's date, not the collection time

    # batch 2: dave hands in only 00_setup; erin an older copy of the fixture, then an unreadable one
    _batch(tmp_path / "b2", {"dave/00_setup.ipynb": _EMPTY,
                             f"erin/{fx}.ipynb": _v(fixture_source, 0)}, 1_600_000_000)
    got = workflow.collect(root, tmp_path / "b2")
    assert got["dave"]["00_setup"].status == "unchanged"
    assert got["erin"][fx].status.startswith("kept (the one collected is newer")
    assert _version(kept) == 1 and (kept.parent / "timestamp.txt").exists()
    _batch(tmp_path / "b3", {f"erin/{fx}.ipynb": "{ oops"}, 1_800_000_000)
    got = workflow.collect(root, tmp_path / "b3", lessons=[fx])
    assert got["erin"][fx].status.startswith("kept (the one collected") and "malformed JSON" in got["erin"][fx].status
    assert (root / "submitted" / "erin" / fx / f"{fx}.ipynb").exists()
    subs = {(s.student, s.lesson): s for s in workflow.submissions(root)}
    assert subs[("dave", fx)].notebook is not None and subs[("erin", fx)].notebook is not None

    # batch 4: a newer version replaces dave's fixture; the older one is kept under backups/
    _batch(tmp_path / "b4", {f"dave/{fx}.ipynb": _v(fixture_source, 2)}, 1_700_000_100)
    got = workflow.collect(root, tmp_path / "b4")
    assert got["dave"][fx].status.startswith("replaced")
    assert _version(kept) == 2
    backups = list((root / "backups" / "dave" / fx).glob("*.ipynb"))
    assert len(backups) == 1 and _version(backups[0]) == 1
    assert (root / "submitted" / "dave" / "00_setup" / "00_setup.ipynb").exists()


def test_collect_refuses_links(tmp_path, fixture_source):
    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    secret = tmp_path / "secret.ipynb"
    secret.write_text(json.dumps(fixture_source))
    (tmp_path / "in" / "mallory").mkdir(parents=True)
    (tmp_path / "in" / "mallory" / f"{fx}.ipynb").symlink_to(secret)
    (tmp_path / "in" / "linked").symlink_to(tmp_path / "in" / "mallory")
    from grader import workflow

    got = workflow.collect(root, tmp_path / "in", lessons=[fx])
    assert set(got) == {"mallory"} and got["mallory"][fx].notebook is None
    assert any("refused" in n for n in got["mallory"][fx].notes)


def _zip(path, files: dict):
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        for name, (data, date) in files.items():
            info = zipfile.ZipInfo(name, date_time=date)
            z.writestr(info, data if isinstance(data, str) else json.dumps(data))
    return path


def test_lms_names():
    from grader.lms import parse

    lessons = ["00_setup", "01_memory_hierarchy", "90_grader_fixture"]
    assert parse("smithalice_1001_55501_00_setup.ipynb", lessons)[:4] == ("canvas", "00_setup", "smithalice", 0)
    assert parse("smithalice_LATE_1001_55502_00_setup-1.ipynb", lessons)[:4] == ("canvas", "00_setup", "smithalice", 1)
    got = parse("Alice Smith_1001_assignsubmission_file_/01_memory_hierarchy (2).ipynb", lessons)
    assert got[:4] == ("moodle", "01_memory_hierarchy", "Alice Smith", 2) and "1001" in got[4]
    got = parse("Lesson 0_asmith_attempt_2026-12-01-10-00-00_00_setup.ipynb", lessons)
    assert got[:3] == ("blackboard", "00_setup", "asmith")
    got = parse("submission_777/00_setup.ipynb", lessons, gradescope={"777": ["S1", "a@x.edu", "Alice"]})
    assert got[:3] == ("gradescope", "00_setup", "S1")
    regexp = r".*?(?P<student_id>[A-Za-z0-9.-]+)_(?P<file_id>\d\d_[a-z0-9_]+\.ipynb)$"
    assert parse("eve_00_setup (1).ipynb", lessons, named_regexp=regexp)[:4] == ("nbgrader", "00_setup", "eve", 1)
    assert "no lesson id" in parse("alice_homework.ipynb", lessons, named_regexp=regexp)
    why = parse("alice_00_setup_final.ipynb", lessons, named_regexp=regexp)  # a renamed copy: said, not guessed
    assert "holds 00_setup but does not end with it" in why and "rename it to end in 00_setup.ipynb" in why
    assert "not a notebook" in parse("alice_00_setup.txt", lessons)


def test_canvas_zip_with_roster(tmp_path, fixture_source):
    """Canvas names with resubmission copies: the newest (by the archive's dates) wins, a roster maps ids to
    students and refuses unknown ones, every skipped file is listed with its reason."""
    from grader import workflow

    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    roster = tmp_path / "roster.csv"
    roster.write_text("Student,ID,SIS Login ID,Name\nSmith Alice,1001,alice,Alice Smith\n"
                      "Jones Eve,1002,eve,Eve Jones\n")
    archive = _zip(tmp_path / "canvas.zip", {
        f"smithalice_1001_55501_{fx}.ipynb": (_v(fixture_source, 1), (2026, 12, 1, 10, 0, 0)),
        f"smithalice_1001_55502_{fx}-1.ipynb": (_v(fixture_source, 2), (2026, 12, 1, 11, 0, 0)),
        f"joneseve_1002_55503_{fx}-2.ipynb": (_v(fixture_source, 3), (2026, 12, 1, 9, 0, 0)),
        f"joneseve_1002_55504_{fx}-1.ipynb": (_v(fixture_source, 4), (2026, 12, 1, 12, 0, 0)),
        f"phantom_9999_55505_{fx}.ipynb": (_v(fixture_source, 5), (2026, 12, 1, 10, 0, 0)),
        "smithalice_1001_55506_notes.txt": ("hello", (2026, 12, 1, 10, 0, 0)),
    })
    got, skipped = workflow.collect_lms(root, archive, roster=roster)
    assert set(got) == {"alice", "eve"}
    sub = root / "submitted"
    assert _version(sub / "alice" / fx / f"{fx}.ipynb") == 2
    assert _version(sub / "eve" / fx / f"{fx}.ipynb") == 4  # the newest upload, not the highest copy number
    assert (sub / "eve" / fx / "timestamp.txt").read_text() == "2026-12-01 12:00:00 UTC"
    why = {s.name: s.reason for s in skipped}
    assert "not on the roster" in why[f"phantom_9999_55505_{fx}.ipynb"]
    assert "not a notebook" in why["smithalice_1001_55506_notes.txt"]
    assert "is newer" in why[f"smithalice_1001_55501_{fx}.ipynb"]
    assert "is newer" in why[f"joneseve_1002_55503_{fx}-2.ipynb"]
    assert len(why) == 4
    assert workflow.roster_path(root).exists()  # kept: a later collect refuses unknown students too
    (tmp_path / "more" / "mallory").mkdir(parents=True)
    (tmp_path / "more" / "mallory" / f"{fx}.ipynb").write_text(json.dumps(fixture_source))
    skipped = []
    assert workflow.collect(root, tmp_path / "more", skipped=skipped) == {}
    assert "not on the roster" in skipped[0].reason


def test_wrong_notebook_and_remove_student(tmp_path, fixture_source):
    """A notebook named after one lesson that is another gets a one-line reason; remove-student moves a
    student's folders to backups/ and forgets them."""
    from grader import workflow

    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    other = json.loads(json.dumps(fixture_source))
    for i, cell in enumerate(other["cells"]):
        cell.setdefault("metadata", {}).setdefault("nbgrader", {})["grade_id"] = f"other-{i}"
    (root / "source" / "00_setup" / "00_setup.ipynb").write_text(json.dumps(other))
    (tmp_path / "in" / "dave").mkdir(parents=True)
    (tmp_path / "in" / "dave" / "00_setup.ipynb").write_text(json.dumps(fixture_source))
    got = workflow.collect(root, tmp_path / "in", lessons=["00_setup"])
    assert got["dave"]["00_setup"].notebook is None
    notes = got["dave"]["00_setup"].notes
    note = next(n for n in notes if n.startswith("not the 00_setup notebook:"))
    assert f"it is {fx}'s" in note
    kept = root / notes[-1].rsplit(" kept as ", 1)[1]  # the file handed in is never dropped
    assert kept.read_bytes() == (tmp_path / "in" / "dave" / "00_setup.ipynb").read_bytes()
    from nbgrader.api import Gradebook

    from grader.late import parse_date, set_due

    db = f"sqlite:///{root / 'gradebook.db'}"
    set_due(db, "00_setup", parse_date("2026-12-01 00:00"))
    set_due(db, "00_setup", parse_date("2026-12-02 00:00"), student="dave")  # dave in the gradebook, with a submission
    done = workflow.remove_student(root, "dave")
    assert not (root / "submitted" / "dave").exists() and any("moved" in d for d in done)
    assert list((root / "backups" / "removed").glob("dave-*/submitted/00_setup"))
    assert any("gradebook" in d for d in done)
    with Gradebook(db) as gb:
        assert [s.id for s in gb.students] == []
    assert workflow.remove_student(root, "dave") == []  # again: nothing to do


def test_collect_command(tmp_path, fixture_source, capsys):
    """What an instructor sees: a line per notebook with what collect did, every skipped file with its reason,
    a clear error for a course with no lessons built."""
    from grader.cli import main

    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    archive = _zip(tmp_path / "lms.zip", {f"alice_{fx}.ipynb": (fixture_source, (2026, 12, 1, 10, 0, 0)),
                                          f"alice_{fx} (1).ipynb": (_v(fixture_source, 1), (2026, 12, 1, 11, 0, 0)),
                                          "readme.txt": ("hi", (2026, 12, 1, 10, 0, 0))})
    assert main(["--course", str(root), "collect", str(archive)]) == 0
    out = capsys.readouterr().out
    assert f"alice {fx}" in " ".join(out.split()) and "new" in out
    assert "skipped readme.txt: not a notebook" in out and f"skipped alice_{fx}.ipynb: an earlier upload" in out
    assert main(["--course", str(tmp_path / "nothing"), "collect", str(archive)]) == 2
    assert "make course" in capsys.readouterr().err


def test_an_instructors_slips_get_a_message_and_change_nothing(tmp_path, fixture_source, capsys):
    """What an instructor types wrong: a flat or empty folder, one notebook or a broken zip for collect, a lesson
    by a name the course lacks, autograde before anything was collected, feedback before anything was graded, an
    extension for a mistyped student, an export from a folder with no course. Each says what is wrong (exit 2);
    none writes a roster, a student, a seed, a CSV, or grades nothing silently."""
    from grader.cli import main

    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / f"{fx}.ipynb").write_text(json.dumps(fixture_source))
    (tmp_path / "empty").mkdir()
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"PK not really")
    roster = tmp_path / "roster.csv"
    roster.write_text("student,name\nalice,Alice A\n")

    def fails(args, *words):
        assert main(["--course", str(root), *args]) == 2, args
        err = capsys.readouterr().err
        assert all(w in err for w in words), err

    fails(["collect", str(flat)], "no student folders", f"{fx}.ipynb", "one folder per student")
    fails(["collect", str(tmp_path / "empty")], "no student folders")
    fails(["collect", str(flat / f"{fx}.ipynb")], "is one notebook", "FOLDER/<student>/<lesson>.ipynb")
    fails(["collect", str(broken), "--roster", str(roster)], "not a zip file")
    fails(["collect", str(flat), "--roster", str(tmp_path / "nosuch.csv")], "the roster", "nosuch.csv")
    assert not (root / "roster.csv").exists() and not (root / "submitted").exists()
    fails(["autograde", "--lessons", "01"], "no lesson '01'", "00_setup, 90_grader_fixture")
    # the Makefile's targets work on grader/ only: with --course the hint is the command on that course
    fails(["autograde"], "nothing collected in", f"python -m grader --course {root} collect")
    fails(["feedback"], "nothing graded in", f"python -m grader --course {root} autograde")
    assert not (root / "reports").exists() and not (root / "feedback").exists()
    fails(["due", "00_setup", "2026-12-01 00:00", "--student", "ghost"], "'ghost' is not a student of this course")
    assert main(["--course", str(root), "due", "90", "2026-12-01 00:00"]) == 0  # a lesson by its number
    assert f"{fx} is due 2026-12-01 00:00" in capsys.readouterr().out
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        assert [s.id for s in gb.students] == []
    out = tmp_path / "grades.csv"
    assert main(["--course", str(tmp_path / "nocourse"), "export", "--to", str(out)]) == 2
    assert "nothing graded in" in capsys.readouterr().err and not out.exists()


def test_a_mistyped_student_or_a_folder_to_export_to_gets_a_message(tmp_path, fixture_source, capsys):
    """Regrading one student by a name nothing was collected for says so and names who was collected, instead
    of grading nothing and exiting 0; an export to a folder, or into a folder that does not exist, says what to
    give instead of a traceback. Neither draws a seed nor writes a file."""
    from grader.cli import main

    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    _batch(tmp_path / "incoming", {f"alice/{fx}.ipynb": fixture_source, f"bob/{fx}.ipynb": fixture_source}, 1.8e9)
    assert main(["--course", str(root), "collect", str(tmp_path / "incoming")]) == 0
    capsys.readouterr()

    def fails(args, *words):
        assert main(["--course", str(root), *args]) == 2, args
        err = capsys.readouterr().err
        assert all(w in err for w in words), err

    fails(["autograde", "--students", "alcie"], "'alcie'", "alice, bob")
    fails(["autograde", "--students", "bob", "alcie", "--lessons", "90"], "'alcie'", "alice, bob")
    assert not (root / "reports" / "seed.json").exists()
    folder = tmp_path / "exports"
    folder.mkdir()
    fails(["export", "--to", str(folder)], "is a folder", str(folder / "grades.csv"))
    fails(["export", "--to", str(tmp_path / "nosuch" / "grades.csv")], "does not exist", str(tmp_path / "nosuch"))
    assert list(folder.iterdir()) == [] and not (tmp_path / "nosuch").exists()


def test_slots_and_timeouts_must_be_above_zero(tmp_path, fixture_source, capsys):
    """``--slots 0`` once drew the term's seed and then stopped on an executor's "max_workers must be greater
    than 0"; a negative ``--timeout`` was taken as given. Both are refused before the course is read."""
    import pytest

    from grader.cli import main

    root = _course(tmp_path, fixture_source)
    for args in (["--slots", "0"], ["--timeout", "-1"], ["--workers", "0", "--cluster", "local"],
                 ["--slots-per-worker", "0", "--cluster", "local"]):
        with pytest.raises(SystemExit) as e:
            main(["--course", str(root), "autograde", *args])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {args[0]}: {args[1]} is not above 0" in err, err
    assert not (root / "reports").exists()


def test_lms_file_without_a_lesson_name(tmp_path, fixture_source):
    """A Canvas upload named anything (``..._mylab.ipynb``) is found by its cells; one that is no lesson's is
    listed as skipped with its reason."""
    from grader import workflow

    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    archive = _zip(tmp_path / "canvas.zip", {
        "smithbob_1004_55510_mylab.ipynb": (fixture_source, (2026, 12, 1, 10, 0, 0)),
        "smithbob_1004_55511_scratch.ipynb": (_EMPTY, (2026, 12, 1, 10, 0, 0)),
    })
    got, skipped = workflow.collect_lms(root, archive)
    assert got["smithbob"][fx].notebook is not None and got["smithbob"][fx].status == "new"
    assert any("under the name" in n for n in got["smithbob"][fx].notes)
    why = {s.name: s.reason for s in skipped}
    scratch = "smithbob_1004_55511_scratch.ipynb"
    assert list(why) == [scratch] and "no lesson id" in why[scratch]


def test_folder_grades_the_newest_copy(tmp_path, fixture_source):
    """A student's folder holding ``L.ipynb`` and a later save ``L (1).ipynb`` (a browser's copy mark) has the
    newer one graded, whichever name it has, and the other named as not graded."""
    import os

    lesson = "90_grader_fixture"
    d = tmp_path / "carol"
    d.mkdir()
    old, new = d / f"{lesson}.ipynb", d / f"{lesson} (1).ipynb"
    old.write_text(json.dumps(_v(fixture_source, 1)))
    new.write_text(json.dumps(_v(fixture_source, 2)))
    os.utime(old, (1_700_000_000, 1_700_000_000))
    os.utime(new, (1_700_036_000, 1_700_036_000))
    sub = collect_student("carol", d, {lesson: fixture_source})[lesson]
    assert sub.path == str(new) and sub.timestamp == 1_700_036_000
    assert any(f"older, not graded: {old.name}" in n for n in sub.notes)
    assert not any("ignored extra" in n for n in sub.notes)
    os.utime(old, (1_700_072_000, 1_700_072_000))  # the plain name saved last: it is the one graded
    sub = collect_student("carol", d, {lesson: fixture_source})[lesson]
    assert sub.path == str(old) and any(f"older, not graded: {new.name}" in n for n in sub.notes)


def test_roster_student_who_handed_in_nothing(tmp_path, fixture_source):
    """A student on the roster with no file in the download is listed as missing and graded as an explicit 0
    ("not submitted"); one whose notebook an earlier batch collected is left as it is."""
    from grader import workflow

    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    roster = tmp_path / "roster.csv"
    roster.write_text("Student,ID,SIS Login ID\nSmith Alice,1001,alice\nFox Frank,1006,frank\n")
    archive = _zip(tmp_path / "canvas.zip", {
        f"smithalice_1001_55501_{fx}.ipynb": (_v(fixture_source, 1), (2026, 12, 1, 10, 0, 0))})
    got, _ = workflow.collect_lms(root, archive, roster=roster)
    assert got["alice"][fx].status == "new" and got["frank"][fx].status == "missing"
    assert "00_setup" not in got["frank"]  # only the lessons being collected
    subs = {(s.student, s.lesson): s for s in workflow.submissions(root)}
    assert subs[("frank", fx)].notebook is None and subs[("frank", fx)].notes == ["not submitted"]
    (tmp_path / "b2" / "frank").mkdir(parents=True)
    (tmp_path / "b2" / "frank" / f"{fx}.ipynb").write_text(json.dumps(_v(fixture_source, 2)))
    got = workflow.collect(root, tmp_path / "b2")
    assert got["frank"][fx].status == "new" and "alice" not in got  # alice's collected notebook: not touched


def test_not_submitted_zero_is_recorded_quietly(tmp_path):
    """The explicit 0 for a notebook never handed in goes into the gradebook without SQLAlchemy's warnings about
    nbgrader's half-made rows on the instructor's screen."""
    import warnings

    from nbgrader.api import Gradebook

    from grader import workflow
    from grader.grade import CellResult, NotebookResult
    from grader.late import set_due

    db = f"sqlite:///{(tmp_path / 'gradebook.db').resolve()}"
    set_due(db, "00_setup", None)
    with Gradebook(db) as gb:
        gb.add_notebook("00_setup", "00_setup")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        workflow._record_zero(tmp_path, NotebookResult("frank", "00_setup", [CellResult("a", 2, 0)]), "not submitted")
    assert not [w for w in seen if "SAWarning" in type(w.message).__name__], [str(w.message) for w in seen]
    with Gradebook(db) as gb:
        assert gb.find_submission("00_setup", "frank").score == 0


def test_exchange_submission_time(tmp_path, fixture_source):
    """``nbgrader collect``'s layout (``<student>/<lesson>/<lesson>.ipynb`` beside its ``timestamp.txt``): the hand-in
    time is the one the exchange recorded, not the date the student last saved the file."""
    import os

    lesson = "90_grader_fixture"
    d = tmp_path / "hana" / lesson
    d.mkdir(parents=True)
    nb = d / f"{lesson}.ipynb"
    nb.write_text(json.dumps(fixture_source))
    os.utime(nb, (1_700_000_000, 1_700_000_000))  # saved before the deadline, submitted after it
    (d / "timestamp.txt").write_text("2023-11-14 23:13:20.500000 UTC")
    sub = collect_student("hana", tmp_path / "hana", {lesson: fixture_source})[lesson]
    assert sub.timestamp == 1_700_003_600.5
    (d / "timestamp.txt").write_text("yesterday")  # unreadable: the file's date
    assert collect_student("hana", tmp_path / "hana", {lesson: fixture_source})[lesson].timestamp == 1_700_000_000


def test_another_version_under_a_longer_name_is_named_not_graded(tmp_path, fixture_source, capsys):
    """``L.ipynb`` and a renamed later save ``L_final.ipynb``: the exact name is graded (the other may be a scratch
    copy), and collect says, for that student and lesson, that the other exists and was saved later; the note
    goes with the submission to the report. An unrelated extra file is only listed, as before."""
    import os

    from grader import workflow
    from grader.cli import main

    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    d = tmp_path / "in" / "alice"
    d.mkdir(parents=True)
    graded, final, scratch = d / f"{fx}.ipynb", d / f"{fx}_final.ipynb", d / "scratch.ipynb"
    graded.write_text(json.dumps(_v(fixture_source, 1)))
    final.write_text(json.dumps(_v(fixture_source, 2)))
    scratch.write_text(json.dumps(_EMPTY))
    os.utime(graded, (1_700_000_000, 1_700_000_000))
    os.utime(final, (1_700_036_000, 1_700_036_000))
    assert main(["--course", str(root), "collect", str(tmp_path / "in")]) == 0
    out = capsys.readouterr().out
    note = (f"also handed in {final.name}, saved later than the graded {graded.name}: if that is the one meant, "
            f"rename it {fx}.ipynb and collect again")
    assert f"alice/{fx}: {note}" in out and "CHECK: 1 notebook(s)" in out
    assert _version(root / "submitted" / "alice" / fx / f"{fx}.ipynb") == 1
    sub = next(s for s in workflow.submissions(root) if (s.student, s.lesson) == ("alice", fx))
    assert note in sub.notes
    extra = [n for s in workflow.submissions(root) for n in s.notes if n.startswith("ignored extra")]
    assert extra == ["ignored extra file(s): scratch.ipynb (not a notebook of this course's lessons, which are "
                     f"00_setup, {fx})"]


def test_an_earlier_copy_meant_is_taken_as_the_note_says(tmp_path, fixture_source, capsys):
    """``L_final.ipynb`` saved *before* the graded ``L.ipynb``: the note says how to take it (renamed, alone, with
    ``--replace-newer``), since renaming it and collecting again leaves the newer one collected; doing what it
    says grades the earlier copy, with its own hand-in time, and keeps the one it replaces under backups/."""
    import os

    from grader import workflow
    from grader.cli import main

    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    d = tmp_path / "in" / "alice"
    d.mkdir(parents=True)
    graded, final = d / f"{fx}.ipynb", d / f"{fx}_final.ipynb"
    graded.write_text(json.dumps(_v(fixture_source, 2)))
    final.write_text(json.dumps(_v(fixture_source, 1)))
    os.utime(graded, (1_700_036_000, 1_700_036_000))
    os.utime(final, (1_700_000_000, 1_700_000_000))
    assert main(["--course", str(root), "collect", str(tmp_path / "in")]) == 0
    out = capsys.readouterr().out
    assert (f"also handed in {final.name}, saved earlier than the graded {graded.name}: if that is the one meant, "
            f"rename it {fx}.ipynb and collect it alone (FOLDER/alice/{fx}.ipynb) with --replace-newer" in out)
    target = root / "submitted" / "alice" / fx / f"{fx}.ipynb"
    assert _version(target) == 2
    again = tmp_path / "again" / "alice"
    again.mkdir(parents=True)
    os.replace(final, again / f"{fx}.ipynb")  # renamed: its date stays the earlier one
    assert main(["--course", str(root), "collect", str(tmp_path / "again")]) == 0  # as before: kept, and says why
    assert "collect --replace-newer takes it in its place" in capsys.readouterr().out
    assert _version(target) == 2
    assert main(["--course", str(root), "collect", str(tmp_path / "again"), "--replace-newer"]) == 0
    assert "replaced (the newer one kept as backups/alice/" in capsys.readouterr().out
    assert _version(target) == 1
    kept = list((root / "backups" / "alice" / fx).glob("*.ipynb"))
    assert len(kept) == 1 and _version(kept[0]) == 2  # nothing lost: the newer copy is under backups/
    assert (target.parent / "timestamp.txt").read_text() == workflow._stamp(1_700_000_000)  # its own hand-in time


def test_collect_summary_names_what_it_left_and_kept(tmp_path, fixture_source, capsys):
    """The summary line says which lessons' notebooks of the batch ``--lessons`` left out, and mentions backups/
    only once it holds earlier versions (not only a removed student's folders)."""
    from grader import workflow
    from grader.cli import main

    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    for student in ("alice", "dave"):
        d = tmp_path / "in" / student
        d.mkdir(parents=True)
        (d / f"{fx}.ipynb").write_text(json.dumps(_v(fixture_source, 1)))
        (d / "00_setup.ipynb").write_text(json.dumps(_v(fixture_source, 1)))
    workflow.collect(root, tmp_path / "in", lessons=[fx])
    workflow.remove_student(root, "dave")
    capsys.readouterr()
    assert main(["--course", str(root), "collect", str(tmp_path / "in"), "--lessons", fx]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("collected: ") and "earlier versions" not in last, last
    assert "not collected, as --lessons asked: the batch's notebooks of 00_setup" in last, last


def test_grader_runs_from_the_venv_without_activating_it(tmp_path, fixture_source):
    """``.venv/bin/python -m grader`` with the environment not activated (its scripts not on PATH) still makes a
    gradebook: nbgrader runs ``alembic`` by name."""
    import os
    import subprocess
    import sys

    from grader.layout import ROOT

    root = _course(tmp_path, fixture_source)
    _batch(tmp_path / "in", {"alice/90_grader_fixture.ipynb": _v(fixture_source, 1)}, 1_700_000_000)
    scripts = os.path.dirname(sys.executable)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != scripts)
    for args in (["collect", str(tmp_path / "in")], ["export", "--nbgrader", "--to", str(tmp_path / "grades.csv")]):
        res = subprocess.run([sys.executable, "-m", "grader", "--course", str(root), *args], cwd=ROOT,
                             capture_output=True, text=True, timeout=120, env=dict(os.environ, PATH=path or os.defpath))
        assert res.returncode == 0, (args, res.stderr[-2000:])
    assert (root / "gradebook.db").is_file()


def test_a_lesson_saved_under_another_lessons_name_is_collected_as_its_own(tmp_path, fixture_source):
    """Lesson 90's notebook saved as ``00_setup.ipynb`` (a learner's Save As slip) is 90's submission when no file
    is named for 90; 00_setup is then missing, with a note saying where its name went. With a file named for 90
    as well, nothing moves: 00_setup's file is only flagged."""
    fx = "90_grader_fixture"
    other = json.loads(json.dumps(fixture_source))
    for i, cell in enumerate(other["cells"]):
        cell.setdefault("metadata", {}).setdefault("nbgrader", {})["grade_id"] = f"other-{i}"
    lessons = {fx: fixture_source, "00_setup": other}
    d = tmp_path / "erin"
    d.mkdir()
    (d / "00_setup.ipynb").write_text(json.dumps(fixture_source))
    subs = collect_student("erin", d, lessons)
    assert subs[fx].notebook is not None and subs[fx].path.endswith("00_setup.ipynb")
    assert any("found 90_grader_fixture under the name 00_setup.ipynb" in n for n in subs[fx].notes)
    assert subs["00_setup"].notebook is None
    assert subs["00_setup"].notes[-1].endswith(f"it is {fx}'s; collected as {fx}")
    (d / f"{fx}.ipynb").write_text(json.dumps(fixture_source))
    subs = collect_student("erin", d, lessons)
    assert subs[fx].path.endswith(f"{fx}.ipynb") and subs["00_setup"].notebook is None
    assert subs["00_setup"].notes[-1].endswith(f"it is {fx}'s"), subs["00_setup"].notes


def test_make_grade_collect_without_submissions_says_what_to_give():
    """``make grade-collect`` with no SUBMISSIONS= names the variable, not the Python command's missing
    ``source`` argument."""
    import subprocess

    from grader.layout import ROOT

    r = subprocess.run(["make", "-o", ".venv/.installed", "grade-collect"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0 and "SUBMISSIONS=dir" in r.stderr and "SUBMISSIONS=lms.zip" in r.stderr, r.stderr
    assert "grader collect" not in r.stdout


def test_not_a_notebook_is_named_on_its_lesson(tmp_path, fixture_source):
    """A lesson handed in as an export (``.html``, ``.py``, a renamed ``.ipynb.txt``) is said on that lesson, not
    left as a bare "not submitted"; a file named after no lesson, or one beside the lesson's notebook, is not."""
    lesson = "90_grader_fixture"
    lessons = {lesson: fixture_source, "00_setup": {"cells": []}, "01_memory": {"cells": []}}
    d = tmp_path / "alice"
    (d / "sub").mkdir(parents=True)
    (d / f"{lesson}.ipynb").write_text(json.dumps(fixture_source))
    (d / f"{lesson}.html").write_text("<html></html>")
    (d / "00_setup.ipynb.txt").write_text("{}")
    (d / "sub" / "01_memory.py").write_text("x = 1")
    (d / "notes.txt").write_text("scratch")
    (d / ".00_setup.swp").write_text("")
    subs = collect_student("alice", d, lessons)
    assert subs[lesson].notebook is not None and not any("not a notebook" in n for n in subs[lesson].notes)
    for name, handed in (("00_setup", "00_setup.ipynb.txt"), ("01_memory", "01_memory.py")):
        (note,) = [n for n in subs[name].notes if "not a notebook" in n]
        assert note.startswith(f"handed in {handed}, not a notebook: collect grades {name}.ipynb")
        assert note in other_versions(subs[name])
    assert not any("notes.txt" in n or "swp" in n for s in subs.values() for n in s.notes)


def test_removed_student_stays_out_until_readmitted(tmp_path, fixture_source, capsys):
    """A removed student's notebooks in a later batch (a folder or an LMS download) are skipped with the reason,
    not collected back into the course; ``readmit`` takes them back and says where their earlier work is."""
    from grader import workflow
    from grader.cli import main

    fx = "90_grader_fixture"
    root = _class(tmp_path, fixture_source, ("dave", "erin"))
    assert any("collect skips them" in d for d in workflow.remove_student(root, "dave"))
    assert list(workflow.removed_students(root)) == ["dave"]
    assert main(["--course", str(root), "collect", str(tmp_path / "in"), "--lessons", fx]) == 0
    out = capsys.readouterr().out
    assert "skipped dave/: dave was removed from the course" in out and "readmit dave" in out
    assert not (root / "submitted" / "dave").exists() and (root / "submitted" / "erin" / fx / f"{fx}.ipynb").exists()
    archive = _zip(tmp_path / "lms.zip", {f"dave_{fx}.ipynb": (_v(fixture_source, 2), (2026, 12, 1, 10, 0, 0))})
    assert main(["--course", str(root), "collect", str(archive), "--lessons", fx]) == 0
    assert "dave was removed from the course" in capsys.readouterr().out
    assert not (root / "submitted" / "dave").exists()
    assert main(["--course", str(root), "readmit", "dave", "frank"]) == 1  # frank: nothing to readmit
    out = capsys.readouterr().out
    assert (f"dave: collect takes their notebooks again; their earlier work ({fx} handed in " in out
            and ") is kept in backups/removed/dave-" in out)
    assert "frank: was not removed" in out
    assert workflow.removed_students(root) == {}
    workflow.collect(root, tmp_path / "in", lessons=[fx])
    assert (root / "submitted" / "dave" / fx / f"{fx}.ipynb").exists()


def test_removed_student_on_the_roster_is_not_filled_in(tmp_path, fixture_source):
    """A removed student left on the kept roster is not made ``missing`` by a later collect: that would create
    their folders again and autograde would put them back in the gradebook with 0s. After ``readmit`` they are
    ``missing`` again like anyone on the roster who handed in nothing."""
    from grader import workflow

    fx = "90_grader_fixture"
    root = _alice_and_dave(tmp_path, fixture_source)
    assert workflow.remove_student(root, "dave")
    (tmp_path / "later" / "alice").mkdir(parents=True)
    (tmp_path / "later" / "alice" / f"{fx}.ipynb").write_text(json.dumps(_v(fixture_source, 2)))
    for batch in ("in", "later"):  # with the removed student's folder in the batch, and without
        skipped = []
        got = workflow.collect(root, tmp_path / batch, lessons=[fx], skipped=skipped)
        assert "dave" not in got and not (root / "submitted" / "dave").exists()
        assert [s.name for s in skipped] == (["dave/"] if batch == "in" else [])
    assert not any(s.student == "dave" for s in workflow.submissions(root))
    workflow.readmit(root, "dave")
    got = workflow.collect(root, tmp_path / "later", lessons=[fx])
    assert got["dave"][fx].status == "missing"


def test_removed_student_in_a_download_is_named_by_its_files(tmp_path, fixture_source):
    """A removed student's files in an LMS download are printed under their names in the download, like every
    other file collect skips, not under the temporary folder collect unpacks them to."""
    from grader import workflow

    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    (tmp_path / "in" / "dave").mkdir(parents=True)
    (tmp_path / "in" / "dave" / f"{fx}.ipynb").write_text(json.dumps(fixture_source))
    workflow.collect(root, tmp_path / "in", lessons=[fx])
    workflow.remove_student(root, "dave")
    archive = _zip(tmp_path / "lms.zip", {f"dave_{fx}.ipynb": (_v(fixture_source, 2), (2026, 12, 1, 10, 0, 0)),
                                         f"erin_{fx}.ipynb": (_v(fixture_source, 2), (2026, 12, 1, 10, 0, 0))})
    got, skipped = workflow.collect_lms(root, archive, lessons=[fx])
    assert set(got) == {"erin"}
    (why,) = [s for s in skipped if "removed" in s.reason]
    assert why.name == f"dave_{fx}.ipynb" and "readmit dave" in why.reason


def test_readmit_names_only_the_students_own_work(tmp_path, fixture_source):
    """``readmit ann`` points at ann's removed work, never at ann-lee's (whose id starts with hers); a student
    removed again within the same second gets a folder of their own instead of a crash."""
    from grader import workflow

    fx = "90_grader_fixture"
    root = _class(tmp_path, fixture_source, ("ann", "ann-lee"))
    assert workflow.remove_student(root, "ann-lee") and workflow.remove_student(root, "ann")
    for _ in range(2):  # back, collected, out again: twice in one second
        workflow.readmit(root, "ann")
        workflow.collect(root, tmp_path / "in", lessons=[fx])
        assert workflow.remove_student(root, "ann")
    done = workflow.readmit(root, "ann")
    kept = [line for line in done if "earlier work" in line]
    assert len(kept) == 3 and not any("ann-lee" in line for line in kept)
    assert len(list((root / "backups" / "removed").glob("ann-2*/submitted"))) == 3


def test_readmit_says_when_the_student_is_off_the_roster(tmp_path, fixture_source, capsys):
    """The guide has a removed student taken out of the roster; ``readmit`` then says that collect refuses them
    until they are back on it, rather than that the next collect collects them."""
    from grader import workflow
    from grader.cli import main

    fx = "90_grader_fixture"
    root = _alice_and_dave(tmp_path, fixture_source)
    workflow.remove_student(root, "dave")
    (root / "roster.csv").write_text("student_id,name\nalice,Alice A\n")
    assert main(["--course", str(root), "readmit", "dave"]) == 0
    out = capsys.readouterr().out
    assert "once they are on the roster: add their row back to" in out and str(root / "roster.csv") in out
    (root / "roster.csv").write_text("student_id,name\nalice,Alice A\ndave,Dave D\n")
    workflow.collect(root, tmp_path / "in", lessons=[fx])
    assert (root / "submitted" / "dave" / fx / f"{fx}.ipynb").exists()
    workflow.remove_student(root, "dave")
    assert workflow.readmit(root, "dave")[0] == "collect takes their notebooks again"


def test_remove_a_roster_student_before_anything_is_collected(tmp_path, fixture_source):
    """A student who withdraws before the first batch is on the kept roster only: remove-student takes them out
    (not "not in this course"), so that collect does not give them a 0 for every lesson, and reminds the
    instructor of the roster."""
    from grader import workflow

    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    (root / "roster.csv").write_text("student_id,name\nalice,Alice A\nwill,Will W\n")
    done = workflow.remove_student(root, "will")
    assert any("still on the roster" in d for d in done) and "will" in workflow.removed_students(root)
    (tmp_path / "in" / "alice").mkdir(parents=True)
    (tmp_path / "in" / "alice" / f"{fx}.ipynb").write_text(json.dumps(fixture_source))
    got = workflow.collect(root, tmp_path / "in", lessons=[fx])
    assert set(got) == {"alice"} and not (root / "submitted" / "will").exists()
    assert workflow.remove_student(root, "nobody") == []


def test_readmit_names_the_removals_that_hold_work(tmp_path, fixture_source):
    """A student removed twice, the second time with only an empty ``missing`` folder (readmitted, then a batch
    without them): readmit points at the removal that holds their notebook, with the lesson and its hand-in
    time, not at the empty one."""
    from grader import workflow

    fx = "90_grader_fixture"
    root = _alice_and_dave(tmp_path, fixture_source)
    workflow.remove_student(root, "dave")
    workflow.readmit(root, "dave")
    (tmp_path / "later" / "alice").mkdir(parents=True)
    (tmp_path / "later" / "alice" / f"{fx}.ipynb").write_text(json.dumps(fixture_source))
    assert workflow.collect(root, tmp_path / "later", lessons=[fx])["dave"][fx].status == "missing"
    workflow.remove_student(root, "dave")
    assert len(list((root / "backups" / "removed").glob("dave-*"))) == 2
    (first, *_), = [sorted((root / "backups" / "removed").glob("dave-*"))]
    kept = [line for line in workflow.readmit(root, "dave") if "earlier work" in line]
    assert kept == [f"their earlier work ({fx} handed in 2025-12-01 10:00:00 UTC) is kept in "
                    f"backups/removed/{first.name}/ (to grade it again, move the lesson folders of its submitted/ "
                    "to submitted/dave/, in place of any empty one there)"]


def test_remove_student_by_a_roster_key_names_the_id(tmp_path, fixture_source, capsys):
    """``remove-student 1004`` (the LMS's user id, another key of the roster) does nothing, and says whose id to
    give instead."""
    from grader import workflow
    from grader.cli import main

    root = _course(tmp_path, fixture_source)
    (root / "roster.csv").write_text("Student,ID,SIS Login ID\nDoe Dave,1004,dave\n")
    assert main(["--course", str(root), "remove-student", "1004", "zed"]) == 1  # neither is a student here
    out = capsys.readouterr().out
    assert f"1004: not in this course (nothing to do); on the roster 1004 is dave: python -m grader --course {root} " \
           "remove-student dave" in out
    assert "zed: not in this course (nothing to do)\n" in out and workflow.removed_students(root) == {}


def test_hints_name_the_make_target_only_for_grader(tmp_path, fixture_source, capsys, monkeypatch):
    """A class of its own (``--course``) is told the command with its --course, since ``make grade-*`` works on
    grader/ only; grader/ itself is told the make target."""
    from grader import workflow
    from grader.cli import _how, _note_not_graded
    from grader.layout import GRADER

    assert _how(GRADER, "make grade-autograde", "autograde") == "make grade-autograde"
    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    (tmp_path / "in" / "alice").mkdir(parents=True)
    (tmp_path / "in" / "alice" / f"{fx}.ipynb").write_text(json.dumps(fixture_source))
    workflow.collect(root, tmp_path / "in", lessons=[fx])
    _note_not_graded(root)  # what feedback, export and report add on stderr
    err = capsys.readouterr().err
    assert f"(alice/{fx}): this shows their earlier result, or none; python -m grader --course {root} autograde " \
           "grades them" in err
    monkeypatch.setattr(workflow, "default_course", lambda root: True)  # the same notebooks as grader/'s own
    _note_not_graded(root)
    assert "or none; make grade-autograde grades them" in capsys.readouterr().err


def test_readmit_hint_reaches_the_course(tmp_path, fixture_source):
    """In a class of its own, remove-student and collect tell the readmit command with that class's --course
    (``python -m grader readmit`` alone would look in grader/ and find no one removed)."""
    from grader import workflow

    fx = "90_grader_fixture"
    root = _course(tmp_path, fixture_source)
    (tmp_path / "in" / "dave").mkdir(parents=True)
    (tmp_path / "in" / "dave" / f"{fx}.ipynb").write_text(json.dumps(fixture_source))
    workflow.collect(root, tmp_path / "in", lessons=[fx])
    command = f"`python -m grader --course {root} readmit dave`"
    assert any(command in line for line in workflow.remove_student(root, "dave"))
    skipped = []
    workflow.collect(root, tmp_path / "in", lessons=[fx], skipped=skipped)
    assert [s.name for s in skipped] == ["dave/"] and command in skipped[0].reason
    assert workflow.grader_command(workflow._ROOT / "grader", "readmit dave") == "python -m grader readmit dave"
