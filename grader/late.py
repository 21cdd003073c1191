"""Deadlines: nbgrader's own mechanisms, with the course's late penalty.

A lesson's due date is the gradebook's ``Assignment.duedate`` (``python -m grader due LESSON DATE``, or
``nbgrader db assignment add LESSON --duedate=...``); a student's extension is the gradebook's
``SubmittedAssignment.extension`` (``python -m grader due LESSON DATE --student ID`` sets the extension that
moves that student's deadline to DATE). ``nbgrader autograde`` compares each submission's ``timestamp.txt`` (the
hand-in time collect recorded: the file's or the archive entry's date) with it, and its ``AssignLatePenalties``
step asks the plugin configured in ``nbgrader_config.py`` for the penalty: :class:`PerDayPenalty`, a share of
the score for every day or part of a day late. The gradebook keeps both: ``raw_score`` and
``late_submission_penalty`` (the CSV's ``score`` is the one less the other).
"""

from __future__ import annotations

import datetime
import math

from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Float

__all__ = ["PerDayPenalty", "penalty", "parse_date", "set_due", "configured_plugin"]


def penalty(score: float, seconds_late: float, percent_per_day: float, grace_hours: float = 0.0) -> float:
    """Points taken off ``score``: ``percent_per_day`` of it per started day late, after the grace period."""
    late = seconds_late - grace_hours * 3600
    if late <= 0:
        return 0.0
    days = math.ceil(late / 86400 - 1e-9)
    return min(score, score * days * percent_per_day / 100)


class PerDayPenalty(LateSubmissionPlugin):
    """nbgrader's late-submission plugin for the course: ``percent_per_day`` of the score per started day late."""

    percent_per_day = Float(10.0, help="share of the score (percent) taken off per started day late").tag(config=True)
    grace_hours = Float(0.0, help="hours after the due date that are not yet late").tag(config=True)

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float) -> float | None:
        return penalty(score, total_seconds_late, self.percent_per_day, self.grace_hours)


def parse_date(text: str) -> datetime.datetime:
    """``2026-12-01 23:59`` (UTC unless a zone is given, ``+01:00`` or ``Z``) -> a naive UTC datetime, as nbgrader
    stores them."""
    t = text.strip().replace(" UTC", "+00:00").replace("Z", "+00:00")
    try:
        when = datetime.datetime.fromisoformat(t)
    except ValueError:
        raise ValueError(f"{text!r} is not a date: write it as 2026-12-01 23:59 (UTC) or "
                         "2026-12-01T23:59+01:00") from None
    if when.tzinfo is not None:
        when = when.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return when


def configured_plugin(root) -> PerDayPenalty:
    """The course's late-penalty plugin, configured as ``nbgrader_config.py`` in ``root`` configures it."""
    import pathlib

    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    cfg = Config()
    if (pathlib.Path(root) / "nbgrader_config.py").is_file():
        cfg = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    return PerDayPenalty(config=cfg)


def _reassess(gb, lesson: str, student: str | None, plugin: PerDayPenalty) -> list[str]:
    """Late penalties of the lesson's graded submissions (one student's, with ``student``) recomputed against the
    deadlines as they are now, as ``nbgrader autograde`` computes them: a due date or an extension set after grading
    takes effect without a regrade. What changed, a line each."""
    gb.db.expire_all()  # total_seconds_late is computed from the dates just written
    out = []
    for sub in gb.find_assignment(lesson).submissions:
        if (student is not None and sub.student.id != student) or sub.timestamp is None:
            continue
        for nb in sub.notebooks:
            before = float(nb.late_submission_penalty or 0.0)
            now = plugin.late_submission_penalty(sub.student.id, nb.score, sub.total_seconds_late or 0.0) or 0.0
            if abs(now - before) > 1e-9:
                nb.late_submission_penalty = now or None
                out.append(f"{sub.student.id}: late penalty {before:g} -> {now:g}")
    gb.db.commit()
    return out


def set_due(db_url: str, lesson: str, when: datetime.datetime | None, student: str | None = None,
            plugin: PerDayPenalty | None = None, known: set[str] | None = None) -> str:
    """Record a lesson's due date (or, with ``student``, the extension that moves that student's to ``when``); with
    ``plugin`` (:func:`configured_plugin`), recompute the late penalties of work already graded. ``known``: the
    course's students (collected, on the roster or in the gradebook); an extension for anyone else is refused
    (a mistyped id would otherwise become a student of the course)."""
    if student is not None and known is not None and student not in known:
        near = sorted(k for k in known if k.lower().startswith(student[:2].lower()))
        raise ValueError(f"{student!r} is not a student of this course (not collected, not on the roster, not in the "
                         "gradebook)" + (f"; did you mean {', '.join(near[:5])}?" if near else ""))
    msg = _set_due(db_url, lesson, when, student)
    if plugin is None:
        return msg
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        changed = _reassess(gb, lesson, student, plugin)
    return "\n".join([msg] + [f"  {line}" for line in changed])


def _set_due(db_url: str, lesson: str, when: datetime.datetime | None, student: str | None = None) -> str:
    from nbgrader.api import Gradebook

    from .layout import scripts_on_path

    scripts_on_path()  # a new gradebook runs nbgrader's migrations (alembic) by name
    with Gradebook(db_url) as gb:
        assignment = gb.update_or_create_assignment(lesson)
        if student is None:
            assignment.duedate = when
            gb.db.commit()
            return f"{lesson} is due {when:%Y-%m-%d %H:%M} UTC" if when else f"{lesson} has no due date"
        if assignment.duedate is None:
            raise ValueError(f"{lesson} has no due date; set it first (python -m grader due {lesson} DATE)")
        gb.update_or_create_student(student)
        sub = gb.update_or_create_submission(lesson, student)
        sub.extension = (when - assignment.duedate) if when and when > assignment.duedate else None
        gb.db.commit()
        if sub.extension is None:
            return (f"{student}: no extension: {lesson} due {assignment.duedate:%Y-%m-%d %H:%M} UTC as for the class "
                    "(an extension's date must be after the class's)")
        return f"{student}: {lesson} due {when:%Y-%m-%d %H:%M} UTC (an extension of {_span(sub.extension)})"


def _span(delta: datetime.timedelta) -> str:
    """``2 days 3 h 30 min``: a duration as an instructor writes it."""
    minutes = int(delta.total_seconds()) // 60
    days, rest = divmod(minutes, 24 * 60)
    parts = [f"{days} day{'s' if days != 1 else ''}"] if days else []
    parts += [f"{rest // 60} h"] if rest // 60 else []
    parts += [f"{rest % 60} min"] if rest % 60 else []
    return " ".join(parts) or "under a minute"
