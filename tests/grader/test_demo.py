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
