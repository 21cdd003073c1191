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
