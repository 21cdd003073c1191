"""``make student-dist``: the hand-out holds none of the solutions' code and works on its own."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from grader.collect import _BLOCK, _squeeze
from grader.course import SOLUTIONS, source_text
from kernels.catalog import lesson_ids

# one pytest-xdist worker runs this module: its module-scoped fixtures (the hand-out) are built once
pytestmark = pytest.mark.xdist_group("test_dist")

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    from grader.dist import build

    return build(tmp_path_factory.mktemp("dist") / "student")


def _texts(folder: pathlib.Path):
    for p in sorted(folder.rglob("*")):
        if not p.is_file():
            continue
        text = p.read_text(errors="replace")
        if p.suffix == ".ipynb":
            cells = json.loads(text)["cells"]
            text = "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells)
        yield p, text


def test_no_solution_code(dist):
    blocks = []
    for f in (SOLUTIONS / f"{lesson}.py" for lesson in lesson_ids()):
        blocks += [(f.stem, b) for b in (_squeeze(m.group(1)) for m in _BLOCK.finditer(source_text(f))) if len(b) >= 40]
    assert len(blocks) >= 12
    names = {p.relative_to(dist).as_posix() for p in dist.rglob("*")}
    left_out = ("solutions", "grader", "tests")
    assert not any(n.startswith(left_out) for n in names)
    assert "notebooks/00_setup.ipynb" in names and "kernels/checks/engine.py" in names
    problems = []
    for path, text in _texts(dist):
        assert "### BEGIN SOLUTION" not in text and "### BEGIN HIDDEN TESTS" not in text, path
        assert "hidden=True" not in text or path.suffix != ".ipynb", path  # hidden tests: in no notebook
        # nothing in it imports the grader, which the hand-out leaves out
        assert not re.search(r"^\s*(from|import) grader\b", text, re.M), path
        mine = _squeeze(text)
        for lesson, block in blocks:
            lines = [ln for ln in block.splitlines() if len(ln) > 30]
            same = sum(1 for ln in lines if ln in mine)
            if block in mine or (len(lines) >= 4 and same * 2 >= len(lines)):
                problems.append(f"{path.relative_to(dist)}: {same} of {len(lines)} lines of a {lesson} solution")
    assert not problems, problems


@pytest.mark.slow
def test_installs_and_runs_lesson_00(dist, tmp_path):
    """A fresh environment with only the hand-out installed (torch and the rest from this environment's
    site-packages, so nothing is downloaded) runs lesson 00 to its first check, with the solution filled in."""
    import site
    import sysconfig

    from grader.demo import read_source

    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in site.getsitepackages() if "site-packages" in p] or [sysconfig.get_paths()["purelib"]]
    (pathlib.Path(purelib) / "workbook-deps.pth").write_text("\n".join(ours) + "\n")
    wheels = tmp_path / "wheels"
    clean = dict(os.environ, PYTHONPYCACHEPREFIX=str(tmp_path / "pyc"))  # byte code of its own: none stale
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "--no-index", "-w", str(wheels), str(dist)], capture_output=True, text=True, timeout=300,
                           env=clean)
    assert built.returncode == 0, built.stderr[-3000:]
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", purelib,
                          *map(str, wheels.glob("*.whl"))], capture_output=True, text=True, timeout=300, env=clean)
    assert pip.returncode == 0, pip.stderr[-3000:]
    release = json.loads((dist / "notebooks" / "00_setup.ipynb").read_text())
    answers = {c["metadata"].get("nbgrader", {}).get("grade_id"): c["source"]
               for c in read_source(ROOT / "solutions" / "00_setup.py")["cells"]
               if c["metadata"].get("nbgrader", {}).get("solution")}
    script = []
    for cell in release["cells"]:
        if cell["cell_type"] != "code":
            continue
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        src = answers.get(gid, cell["source"])
        src = "".join(src) if isinstance(src, list) else src
        script.append("\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))))
        if "check(" in src:
            break
    # and the last cell, which in the repository scores with the hidden checks: here it says how to hand in
    last = [c for c in release["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "score"]
    assert len(last) == 1
    script.append("".join(last[0]["source"]))
    run = tmp_path / "run"
    run.mkdir()
    (run / "lesson.py").write_text("\n\n".join(script) + "\nimport kernels\nprint('KERNELS_FROM', kernels.__file__)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([py, "lesson.py"], cwd=run, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    where = proc.stdout.split("KERNELS_FROM", 1)[1].strip()
    assert where.startswith(purelib), where  # the hand-out's package, not the repository's
    assert "✓" in proc.stdout and "00_setup.vector_add" in proc.stdout, proc.stdout[-2000:]
    assert "Hand in 00_setup.ipynb" in proc.stdout, proc.stdout[-2000:]
