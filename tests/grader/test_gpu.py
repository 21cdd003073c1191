"""On a GPU: the checks with their speed requirement, and the faults only a GPU has (a kernel that never ends,
an illegal address), each costing only its own problem while the GPU stays healthy for the next."""

import runpy

import pytest
from conftest import FIXTURES

from grader.notebook import with_cells

pytestmark = pytest.mark.gpu


def test_fixture_checks_with_speed_in_the_notebook(tmp_path):
    from grader.percent import read_percent

    nb = read_percent((FIXTURES / "90_grader_fixture.py").read_text())
    code = "\n\n".join(c["source"] for c in nb["cells"] if c["cell_type"] == "code")
    code = code.replace("### BEGIN HIDDEN TESTS", "").replace("### END HIDDEN TESTS", "")
    path = tmp_path / "nb.py"
    path.write_text(code)
    runpy.run_path(str(path), run_name="__main__")


def test_gpu_faults_cost_one_problem(grader_run, fixture_source, fixture_release, monkeypatch):
    from grader.democlass import _SCALE, _SLOW, _STORE

    hang = _SCALE.format(body="    x = tl.load(x_ptr + offs, mask=mask)\n"
                              "    while tl.load(x_ptr, volatile=True) == tl.load(x_ptr, volatile=True):\n"
                              "        x += 0\n" + _STORE)
    wild = _SCALE.format(body="    x = tl.load(x_ptr + offs + (1 << 40), mask=mask)\n" + _STORE)
    slow = _SCALE.format(body=_SLOW)
    # the hang stops the notebook's try-cell and three kernel problems: 20 s each, not the default 60 s / 60 s
    monkeypatch.setattr(grader_run.settings, "problem_timeout", 20)
    monkeypatch.setattr(grader_run.settings, "cell_timeout", 20)
    results = {}
    for name, src in (("hang", hang), ("wild", wild), ("slow", slow), ("solution", None)):
        nb = with_cells(fixture_source, **{"ex1-kernel": src}) if src else fixture_source
        results[name] = grader_run.grade(name, "90_grader_fixture", nb, fixture_source, fixture_release)
    assert results["hang"].score == 6 and "stopped after" in results["hang"].cells[0].message
    assert results["wild"].score == 6, [c.message for c in results["wild"].cells]
    assert results["slow"].score == 10 and "too slow" in results["slow"].cells[-1].message
    assert results["solution"].score == 13, [c.message for c in results["solution"].cells]
    assert results["solution"].cells[-1].checks[0].perf["student_ms"] > 0
