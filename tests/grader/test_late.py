"""Deadlines: nbgrader's due dates and extensions, the course's per-day penalty."""

import datetime

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
