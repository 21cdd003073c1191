"""``python -m grader autograde`` again after a second collect: only what is new or changed is graded, the reports
still cover the whole class, ``--redo`` grades everything (grader/workflow.py: to_grade)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import time

LESSON = "00_setup"


def _build(root: pathlib.Path) -> tuple[pathlib.Path, dict]:
    """A course folder with lesson 00 and two students' untouched notebooks collected (their stubs fail fast)."""
    from grader import democlass, workflow
    from grader.demo import course_lessons

    src, rel = course_lessons([LESSON])[LESSON]
    workflow.build_course(root, {LESSON: src})
    (root / "release" / LESSON / f"{LESSON}.ipynb").write_text(json.dumps(rel, indent=1))
    klass = [democlass.DemoStudent(name, "untouched", {LESSON: "release"}, {}) for name in ("alice", "bob")]
    democlass.write_class(root.parent / "incoming", {LESSON: (src, rel)}, klass)
    workflow.collect(root, root.parent / "incoming")
    return root, rel


def _autograde(root: pathlib.Path, capsys, *more: str) -> tuple[int, dict]:
    """The command's count of notebooks graded, and the summary it wrote."""
    from grader.cli import main

    assert main(["--course", str(root), "autograde", "--slots", "2", *more]) == 0
    out = capsys.readouterr().out
    graded = int(re.search(r"^graded (\d+) notebook\(s\)", out, re.M)[1])
    return graded, dict(json.loads((root / "reports" / "summary.json").read_text()), out=out)


def test_a_second_batch_grades_only_what_changed(tmp_path, capsys):
    from grader import classbook, workflow
    from kernels.device import MODE

    root, rel = _build(tmp_path / "course")
    graded, summary = _autograde(root, capsys)
    assert graded == 2
    # bob hands in again, later: his notebook is replaced; alice hands in hers unchanged, with another version
    # under a longer name, which is not graded but noted
    batch = tmp_path / "incoming-2"
    (batch / "bob").mkdir(parents=True)
    (batch / "alice").mkdir()
    again = json.loads(json.dumps(rel))
    again["cells"][0]["source"] = "".join(again["cells"][0]["source"]) + "\n\n(my second try)"
    later = (time.time() + 3600, time.time() + 3600)
    for path in (batch / "bob" / f"{LESSON}.ipynb", batch / "alice" / f"{LESSON}_final.ipynb"):
        path.write_text(json.dumps(again, indent=1))
        os.utime(path, later)
    shutil.copy(root / "submitted" / "alice" / LESSON / f"{LESSON}.ipynb", batch / "alice")
    got = workflow.collect(root, batch)
    assert got["bob"][LESSON].status.startswith("replaced") and got["alice"][LESSON].status == "unchanged"

    graded, summary = _autograde(root, capsys)
    assert graded == 1
    assert summary["graded"] == ["bob/00_setup"]
    assert summary["already_recorded"] == ["alice/00_setup"]
    assert "1 submission(s) not graded again" in summary["out"] and "--redo" in summary["out"]
    # the table, the report and the class CSV still list the whole class
    assert [(r["student"], r["lesson"]) for r in summary["results"]] == [("alice", LESSON), ("bob", LESSON)]
    assert re.search(r"^alice\s", summary["out"], re.M) and re.search(r"^bob\s", summary["out"], re.M)
    alice = summary["results"][0]
    assert any(n.startswith(f"also handed in {LESSON}_final.ipynb, saved later") for n in alice["notes"])
    # and the command says so, as collect did, though it did not grade alice's notebook again
    assert "CHECK: 1 notebook(s) named after a lesson" in summary["out"]
    assert f"  alice/{LESSON}: also handed in {LESSON}_final.ipynb, saved later" in summary["out"]
    from grader.cli import main

    assert main(["--course", str(root), "report"]) == 0
    report = capsys.readouterr().out
    assert re.search(r"^bob\s", report, re.M) and f"  alice/{LESSON}: also handed in {LESSON}_final" in report
    assert set(classbook.load_results(root)) == {("alice", LESSON), ("bob", LESSON)}
    assert {(s, lsn) for s, lsn in workflow.gradebook_scores(root)} == {("alice", LESSON), ("bob", LESSON)}

    # another seed (or mode, or speed policy) grades every notebook again, as --redo does
    subs = workflow.submissions(root)
    seed = json.loads((root / "reports" / "seed.json").read_text())["seed"]
    assert len(workflow.to_grade(root, subs, workflow.how_graded(seed, MODE, "zero"))[0]) == 0
    assert len(workflow.to_grade(root, subs, workflow.how_graded(seed + 1, MODE, "zero"))[0]) == 2
    assert len(workflow.to_grade(root, subs, workflow.how_graded(seed, MODE, "award"))[0]) == (MODE != "gpu") * 2
    # so does a change to the lesson since (its points, its hidden tests: the course folder's source notebook)
    source = root / "source" / LESSON / f"{LESSON}.ipynb"
    kept = source.read_text()
    nb = json.loads(kept)
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade"))
    cell["metadata"]["nbgrader"]["points"] += 1
    source.write_text(json.dumps(nb, indent=1))
    assert len(workflow.to_grade(root, subs, workflow.how_graded(seed, MODE, "zero"))[0]) == 2
    source.write_text(kept)
    assert len(workflow.to_grade(root, subs, workflow.how_graded(seed, MODE, "zero"))[0]) == 0
    graded, summary = _autograde(root, capsys, "--redo")
    assert graded == 2 and summary["already_recorded"] == []
    # one student graded again: the table and the report still cover the whole class, the other as recorded
    graded, summary = _autograde(root, capsys, "--students", "bob", "--redo")
    assert graded == 1 and summary["graded"] == [f"bob/{LESSON}"]
    assert [(r["student"], r["lesson"]) for r in summary["results"]] == [("alice", LESSON), ("bob", LESSON)]
    assert re.search(r"^alice\s", summary["out"], re.M)


def test_feedback_export_and_report_name_what_was_collected_since_grading(tmp_path, capsys):
    """A second batch collected but not graded yet: feedback, the class CSV and the report still show the earlier
    version's result, and each says so on stderr, naming the notebook; after autograde the note is gone."""
    from grader.cli import main

    root, rel = _build(tmp_path / "course")
    _autograde(root, capsys)
    batch = tmp_path / "incoming-2"
    (batch / "bob").mkdir(parents=True)
    again = json.loads(json.dumps(rel))
    again["cells"][0]["source"] = "".join(again["cells"][0]["source"]) + "\n\n(my second try)"
    (batch / "bob" / f"{LESSON}.ipynb").write_text(json.dumps(again, indent=1))
    later = time.time() + 3600
    os.utime(batch / "bob" / f"{LESSON}.ipynb", (later, later))
    assert main(["--course", str(root), "collect", str(batch)]) == 0
    capsys.readouterr()
    commands = (["feedback"], ["report"], ["export", "--to", str(tmp_path / "grades.csv")])
    for args in commands:
        assert main(["--course", str(root), *args]) == 0
        err = capsys.readouterr().err
        assert f"1 collected notebook(s) not graded since they were collected (bob/{LESSON})" in err, (args, err)
        assert "alice" not in err and f"python -m grader --course {root} autograde grades them" in err
    _autograde(root, capsys)
    for args in commands:
        assert main(["--course", str(root), *args]) == 0
        assert "not graded since" not in capsys.readouterr().err
