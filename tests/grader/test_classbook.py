"""The term's record: every result kept, one seed per term, regrades that say what changed, the class CSV,
a live line while a submission runs long."""

import csv
import io
import json
import time

from grader.grade import CellResult, CheckResult, NotebookResult


def _r(student, lesson, scores):
    cells = [CellResult(g, p, s, [CheckResult(f"{lesson}.x", False, s >= p, "passed" if s >= p else "failed",
                                              ["ok" if s >= p else "wrong output"])]) for g, p, s in scores]
    return NotebookResult(student, lesson, cells)


def _save(root, r):
    p = root / "reports" / "results" / r.student / f"{r.lesson}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(r.as_dict(), default=str))


def test_term_record(tmp_path):
    from grader import classbook

    root = tmp_path
    seed, line = classbook.term_seed(root)
    assert "recorded" in line and classbook.term_seed(root)[0] == seed  # one seed per term
    assert classbook.term_seed(root, 7)[0] == 7 and classbook.term_seed(root)[0] == 7

    _save(root, _r("alice", "00_setup", [("a", 2, 2), ("b", 2, 0)]))
    _save(root, _r("bob", "00_setup", [("a", 2, 0), ("b", 2, 0)]))
    again = [_r("alice", "00_setup", [("a", 2, 2), ("b", 2, 2)]), _r("bob", "00_setup", [("a", 2, 0), ("b", 2, 0)])]
    changed = classbook.record_changes(root, again, 7)
    assert changed == ["alice/00_setup: 2 -> 4: b 0->2 (passed)"]
    assert "alice/00_setup" in (root / "reports" / "history.jsonl").read_text()
    for r in again:
        _save(root, r)
    assert {k: v.score for k, v in classbook.load_results(root).items()} == {("alice", "00_setup"): 4,
                                                                               ("bob", "00_setup"): 0}
    (root / "roster.csv").write_text("student,name\nalice,Alice Smith\nbob,Bob Jones\ncarol,Carol King\n")
    rows = list(csv.DictReader(io.StringIO(classbook.write_csv(root, tmp_path / "g.csv").read_text())))
    by = {r["student"]: r for r in rows}
    assert by["alice"]["name"] == "Alice Smith" and by["alice"]["00_setup"] == "4" and by["alice"]["00_setup:b"] == "2"
    assert by["carol"]["total"] == "0" and by["carol"]["max"] == "4"  # on the roster, nothing handed in
    assert "01_memory_hierarchy" not in rows[0]  # only lessons that were assigned (collected)


def test_live_line(capsys):
    from grader.run import Progress

    bar = Progress(2, every=0.2)
    bar.begin("alice/01_memory_hierarchy")
    time.sleep(0.7)
    bar.step("alice/01_memory_hierarchy 11/11", "alice/01_memory_hierarchy")
    bar.step("bob/01 0/11", details=["ex1-check: out of bounds"])
    err = capsys.readouterr().err
    assert "still running: alice/01_memory_hierarchy" in err
    assert "bob/01 0/11\n    ex1-check: out of bounds\n" in err, "a log says why, as each submission finishes"


def test_summary_line_says_what_is_wrong():
    """A check's message whose first line only names the case (it ends in a colon) is summarised with the
    reason below it: the line autograde prints per failed cell, and what a regrade says changed."""
    from grader import classbook

    case = ("00_setup.vector_add failed on case 'n=1000 BLOCK_SIZE=128 fp32' (n=1000, BLOCK_SIZE=128; float32, "
            "tolerance 1e-05 [ieee fp32]; seed 113920267693125):")
    why = "- out: out of bounds: the kernel writes 24 element(s) past the end of `out`"
    bad = CellResult("check_add", 2, 0, [CheckResult("00_setup.vector_add", False, False, "failed", [case, why])])
    assert bad.gist(400) == case + " out: out of bounds: the kernel writes 24 element(s) past the end of `out`"
    assert len(bad.gist(200)) == 200 and bad.gist(200).endswith("...")
    plain = CellResult("b", 2, 0, [CheckResult("x", False, False, "failed", ["wrong output", "detail"])])
    assert plain.gist() == "wrong output" and CellResult("c", 1, 1).gist() == ""
    old = NotebookResult("carol", "00_setup", [CellResult("check_add", 2, 2)])
    assert "past the end of `out`" in classbook.changes(old, NotebookResult("carol", "00_setup", [bad]))
