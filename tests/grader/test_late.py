"""Deadlines: nbgrader's due dates and extensions, the course's per-day penalty."""

import datetime
import json

import pytest


def test_penalty_per_started_day():
    from grader.late import penalty

    assert penalty(10, 0, 10) == 0
    assert penalty(10, 1, 10) == pytest.approx(1)  # a second late is a started day
    assert penalty(10, 86400, 10) == pytest.approx(1)
    assert penalty(10, 86401, 10) == pytest.approx(2)
    assert penalty(10, 3600, 10, grace_hours=2) == 0
    assert penalty(10, 86400 * 30, 10) == 10


def test_due_dates_and_extensions(tmp_path):
    from nbgrader.api import Gradebook

    from grader.late import parse_date, set_due

    assert parse_date("2026-12-01 23:59") == datetime.datetime(2026, 12, 1, 23, 59)
    assert parse_date("2026-12-01T23:59+01:00") == datetime.datetime(2026, 12, 1, 22, 59)
    with pytest.raises(ValueError, match="not a date"):
        parse_date("next friday")
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with pytest.raises(ValueError, match="no due date"):
        set_due(db, "00_setup", parse_date("2026-12-02 00:00"), student="alice")
    set_due(db, "00_setup", parse_date("2026-12-01 00:00"))
    set_due(db, "00_setup", parse_date("2026-12-03 00:00"), student="alice")
    with Gradebook(db) as gb:
        assert gb.find_assignment("00_setup").duedate == datetime.datetime(2026, 12, 1)
        assert gb.find_submission("00_setup", "alice").duedate == datetime.datetime(2026, 12, 3)


def test_due_messages(tmp_path, capsys):
    """A lesson id the course does not have is refused (it would become a phantom assignment in the gradebook),
    and an extension that is not one says so instead of claiming a new date."""
    from grader.cli import main
    from grader.late import parse_date, set_due

    course = tmp_path / "course"
    (course / "source" / "00_setup").mkdir(parents=True)
    (course / "source" / "00_setup" / "00_setup.ipynb").write_text("{}")
    assert main(["--course", str(course), "due", "00_stup", "2026-12-01 23:59"]) == 2
    err = capsys.readouterr().err
    assert "no lesson '00_stup'" in err and "the course's lessons are 00_setup" in err
    assert not (course / "gradebook.db").exists()
    assert main(["--course", str(course), "due", "00_setup", "2026-12-01 23:59"]) == 0
    assert "00_setup is due 2026-12-01 23:59 UTC" in capsys.readouterr().out
    db = f"sqlite:///{course / 'gradebook.db'}"
    msg = set_due(db, "00_setup", parse_date("2026-12-03 23:59"), student="bob")
    assert msg == "bob: 00_setup due 2026-12-03 23:59 UTC (an extension of 2 days)"
    msg = set_due(db, "00_setup", parse_date("2026-11-20 12:00"), student="bob")
    assert msg.startswith("bob: no extension: 00_setup due 2026-12-01 23:59 UTC")


def test_late_lines(tmp_path, capsys):
    """Autograde's table shows the points before any late penalty; the lines below it say what the gradebook
    takes off and what is left."""
    from nbgrader.api import Gradebook

    from grader.classbook import late_lines
    from grader.cli import main
    from grader.grade import CellResult, NotebookResult
    from grader.late import parse_date, set_due

    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    set_due(db, "00_setup", parse_date("2026-12-01 23:59"))
    with Gradebook(db) as gb:
        gb.add_notebook("00_setup", "00_setup")
        for student, when in (("dave", "2026-12-02 12:00"), ("erin", "2026-12-01 10:00")):
            gb.add_student(student)
            gb.add_submission("00_setup", student, timestamp=parse_date(when))
        gb.find_submission_notebook("00_setup", "00_setup", "dave").late_submission_penalty = 0.8
        gb.db.commit()
    results = [NotebookResult(s, "00_setup", [CellResult("a", 4, 4), CellResult("b", 4, 4)]) for s in ("dave", "erin")]
    assert late_lines(tmp_path, results) == ["dave/00_setup: handed in late, 0.8 off: 7.2/8 in the gradebook"]
    for r in results:  # the term's report says it too
        path = tmp_path / "reports" / "results" / r.student / f"{r.lesson}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(r.as_dict(), default=str))
    assert main(["--course", str(tmp_path), "report"]) == 0
    assert "  late: dave/00_setup: handed in late, 0.8 off" in capsys.readouterr().out


def test_a_score_set_by_hand_reaches_the_csv_and_the_report(tmp_path, capsys):
    """An instructor's score in the gradebook (formgrader, or ``manual_score``) takes the place of the grader's in
    the class CSV and the term's report, and the late penalty comes off it."""
    import csv

    from nbgrader.api import Gradebook

    from grader import classbook
    from grader.cli import main
    from grader.grade import CellResult, NotebookResult
    from grader.late import parse_date, set_due

    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    set_due(db, "00_setup", parse_date("2026-12-01 23:59"))
    with Gradebook(db) as gb:
        gb.add_notebook("00_setup", "00_setup")
        for gid in ("a", "b"):
            gb.add_grade_cell(gid, "00_setup", "00_setup", max_score=4, cell_type="code")
        for student, when in (("carol", "2026-12-02 12:00"), ("erin", "2026-12-01 10:00")):
            gb.add_student(student)
            gb.add_submission("00_setup", student, timestamp=parse_date(when))
        gb.find_grade("a", "00_setup", "00_setup", "carol").manual_score = 3
        gb.find_submission_notebook("00_setup", "00_setup", "carol").late_submission_penalty = 0.5
        gb.db.commit()
    for s, a in (("carol", 0), ("erin", 4)):
        r = NotebookResult(s, "00_setup", [CellResult("a", 4, a), CellResult("b", 4, 4)])
        path = tmp_path / "reports" / "results" / s / "00_setup.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(r.as_dict(), default=str))
    assert classbook.overrides(tmp_path) == {("carol", "00_setup"): {"a": 3.0}}
    rows = {r["student"]: r for r in csv.DictReader(classbook.write_csv(tmp_path, tmp_path / "g.csv").open())}
    assert rows["carol"]["00_setup"] == "6.5" and rows["carol"]["00_setup:a"] == "3"
    assert rows["carol"]["00_setup late penalty"] == "0.5" and rows["erin"]["00_setup"] == "8"
    assert main(["--course", str(tmp_path), "report"]) == 0
    out = capsys.readouterr().out
    assert "by hand: carol/00_setup: a 0 -> 3 (set in the gradebook): 6.5/8 in the gradebook" in out
    assert "late: carol/00_setup: handed in late, 0.5 off: 6.5/8" in out


def test_an_extension_granted_after_grading_takes_off_the_penalty(tmp_path):
    """``due`` recomputes the penalties of work already graded: an extension (or a later class deadline) set after
    autograde takes effect without a regrade, and an earlier deadline adds one."""
    from nbgrader.api import Gradebook

    from grader.late import configured_plugin, parse_date, set_due

    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.PerDayPenalty.percent_per_day = 25.0\n")
    plugin = configured_plugin(tmp_path)
    assert plugin.percent_per_day == 25.0
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    set_due(db, "00_setup", parse_date("2026-12-01 23:59"))
    with Gradebook(db) as gb:
        gb.add_notebook("00_setup", "00_setup")
        gb.add_grade_cell("a", "00_setup", "00_setup", max_score=8, cell_type="code")
        for student in ("bob", "erin"):
            gb.add_student(student)
            gb.add_submission("00_setup", student, timestamp=parse_date("2026-12-03 10:00"))
            gb.find_grade("a", "00_setup", "00_setup", student).auto_score = 8
        for student in ("bob", "erin"):  # as autograde left them: two started days late, 50% off
            gb.find_submission_notebook("00_setup", "00_setup", student).late_submission_penalty = 4.0
        gb.db.commit()
    msg = set_due(db, "00_setup", parse_date("2026-12-03 23:59"), student="bob", plugin=plugin)
    assert msg.splitlines()[1:] == ["  bob: late penalty 4 -> 0"]
    msg = set_due(db, "00_setup", parse_date("2026-12-02 23:59"), plugin=plugin)  # the class's moved a day later
    assert msg.splitlines()[1:] == ["  erin: late penalty 4 -> 2"]
    with Gradebook(db) as gb:
        pens = {s: gb.find_submission_notebook("00_setup", "00_setup", s).late_submission_penalty
                for s in ("bob", "erin")}
    assert pens == {"bob": None, "erin": 2.0}
