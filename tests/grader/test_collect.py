"""Collecting never aborts: every odd submission is restored or an explicit 0 with its reason."""

import json

from grader.collect import collect_student, read_notebook


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
