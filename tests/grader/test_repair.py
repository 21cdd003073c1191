"""Correct work keeps its points in the gradebook: a notebook saved without cell metadata, with a graded cell
pasted twice, or heavy with stored outputs is repaired (or read) so nbgrader can record the grader's score."""

import json

from grader.collect import read_notebook
from grader.repair import restore_metadata


def _ids(nb):
    return [c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb["cells"]]


def test_stripped_metadata_comes_back_from_the_release(fixture_source, fixture_release):
    nb = json.loads(json.dumps(fixture_source))  # answers differ from the release's stubs: matched by position
    for cell in nb["cells"]:
        cell["metadata"] = {}
    notes = restore_metadata(nb, fixture_release)
    assert _ids(nb) == _ids(fixture_release), (_ids(nb), _ids(fixture_release))
    assert any("restored from the release" in n for n in notes)
    again = json.loads(json.dumps(nb))
    assert restore_metadata(again, fixture_release) == [] and again == nb  # nothing to do twice


def test_a_doubled_graded_cell_keeps_one_grade_id(fixture_source, fixture_release):
    nb = json.loads(json.dumps(fixture_source))
    graded = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade"))
    nb["cells"].append(json.loads(json.dumps(graded)))
    notes = restore_metadata(nb, fixture_release)
    gid = graded["metadata"]["nbgrader"]["grade_id"]
    assert _ids(nb).count(gid) == 1 and "more than once" in notes[0]


def test_stored_outputs_do_not_push_a_notebook_over_the_limit(tmp_path, fixture_source):
    nb = json.loads(json.dumps(fixture_source))
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x" * (3 << 20)}]
    p = tmp_path / "big.ipynb"
    p.write_text(json.dumps(nb))
    got, notes = read_notebook(p, max_bytes=1 << 20)
    assert got is not None and all(c.get("outputs", []) == [] for c in got["cells"])
    assert any("stored outputs" in n and "cleared" in n for n in notes), notes
    code["outputs"], code["source"] = [], "x = 1\n" * (300 << 10)  # 1.8 MiB of code is over the limit itself
    p.write_text(json.dumps(nb))
    got, notes = read_notebook(p, max_bytes=1 << 20)
    assert got is None and "of code and text" in notes[0]
