"""``make grade-demo`` inside ``make test``: the demo class's ``ci`` part (every kind of fault, every grader path;
``select`` in grader/democlass.py) gets its expected scores."""

import json

import pytest


@pytest.mark.slow
def test_demo_class(tmp_path, capsys):
    from grader.demo import run_demo

    code = run_demo(tmp_path / "demo", slots=2, selection="ci")
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "demo" / "grade-demo.json").read_text())
    assert code == 0, out[-6000:]
    assert not summary["mismatches"] and not summary["leftover_processes"]
    if summary["nbgrader"]:
        nbg = summary["nbgrader"]
        assert not nbg["autograde_failures"] and not nbg["feedback_failures"] and not nbg["gradebook_differs"]
        assert nbg["feedback_html"] > 0


def test_a_class_of_lms_students_alone_is_written(tmp_path):
    """``grader demo --students alice lucy``: both hand in through the LMS download, so the folder of notebooks is
    empty, and writing it must not fail for want of the folder."""
    from grader import democlass

    klass = [st for st in democlass.term_students({democlass.TERM_LESSON: 8.0}) if st.lms]
    assert klass
    folder = tmp_path / "incoming"
    democlass.write_class(folder, {}, klass)
    assert folder.is_dir() and not any(folder.iterdir())


def test_a_term_student_brings_the_term_scenario_along():
    """alice and lucy hand in through the LMS zip, which the term scenario writes only with dave: choosing any of
    them grades all three, not nothing."""
    from grader.demo import course_lessons, demo_class

    real = course_lessons(["00_setup"])
    for chosen in (["alice"], ["lucy", "solution"], ["dave"]):
        names = {s.name for s in demo_class(real, students=chosen, term=True)}
        assert {"alice", "lucy", "dave"} <= names, (chosen, names)
    assert {s.name for s in demo_class(real, students=["solution"], term=True)} == {"solution"}
