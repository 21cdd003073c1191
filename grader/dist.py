"""``make student-dist``: what the students of a graded class install, without the answers.

The hand-out (``dist/student/`` by default) holds:

- ``kernels/``: the course package the notebooks import (checks, plots, benchmarks, reference maths), less each
  package kernel that is itself the answer to an exercise (:data:`ANSWERS`), whose body is replaced by a
  ``NotImplementedError`` naming the lesson (the check zoo, whose right answers are the solutions', is the
  grader's: ``grader/zoo``, never in the hand-out);
- ``notebooks/``: the student notebooks of ``course/`` (nbgrader's release: solutions and hidden tests removed),
  whose last cells say how to hand the notebook in (the score the repository's last cell gives needs the hidden
  checks, which stay with the instructor);
- ``pyproject.toml`` and ``README.md``: ``pip install .`` then ``jupyter lab notebooks``.

No ``solutions/``, no ``grader/`` (hidden tests, sources, gradebook), no ``tests/``. ``tests/grader/test_dist.py``
searches the hand-out for every solution block's code and installs it into a fresh environment that runs lesson
00 to its first check. A self-paced learner who wants the worked answers takes the whole repository instead.
"""

from __future__ import annotations

import ast
import json
import pathlib
import re
import shutil

from kernels.catalog import lesson_ids

from .layout import ROOT as _ROOT

__all__ = ["ANSWERS", "EXCLUDED", "build", "handout_notebook"]


#: package kernels that are an exercise's answer: file -> (function, the lesson that asks for it)
ANSWERS = {
    "kernels/matmul/tiled.py": [("_tiled_matmul_kernel", "03_tiled_sram")],
    "kernels/linear_attention/chunked.py": [("_chunked_linear_attention_kernel", "04_chunked_linear_attention")],
}
#: folders of the package that the hand-out leaves out (none now: the zoo, whose entries are edits of the
#: solutions, lives in grader/, which the hand-out never holds)
EXCLUDED: tuple[str, ...] = ()

_PYPROJECT = '''[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "gpu-kernel-workbook-student"
version = "{version}"
description = "The GPU Kernel Workbook's notebooks and course package, for students of a graded class"
requires-python = ">=3.10"
dependencies = {dependencies}

[project.optional-dependencies]
lab = ["jupyterlab>=4.2", "ipykernel>=6.29"]

[tool.setuptools.packages.find]
include = ["kernels*"]

[tool.setuptools.package-data]
kernels = ["viz/*.json"]
'''

_README = '''# GPU Kernel Workbook: student hand-out

    python -m venv .venv && . .venv/bin/activate
    pip install ".[lab]"
    jupyter lab notebooks

On a machine without an NVIDIA GPU, install torch's CPU build first (otherwise pip fetches the CUDA one, several
GiB you cannot use), then start JupyterLab with `TRITON_INTERPRET=1` set:

    python -m venv .venv && . .venv/bin/activate
    pip install torch --index-url https://download.pytorch.org/whl/cpu
    pip install ".[lab]"
    TRITON_INTERPRET=1 jupyter lab notebooks

Kernels then run in Triton's interpreter on the CPU with small sizes, and every exercise can still be completed
and checked (speed requirements need a GPU).

Work in the cells marked `# YOUR CODE HERE`; the locked `check(...)` cell below each one grades it on fresh
inputs and says what to fix. Hand in each notebook under its own name (`00_setup.ipynb`, ...), as your
instructor asks (an upload to the course's LMS, or JupyterHub's Assignments tab).
'''


#: the hand-out's text for the lessons' last two cells (by grade id): the score there runs the hidden checks,
#: which stay with the instructor in a graded class
_HANDIN = {
    "score_md": "## Handing in\n\nYour instructor grades this notebook: every check above again, on inputs of its "
                "own, and the speed\nrequirements on a GPU. Run the notebook top to bottom, see every check pass, "
                "save it and hand it in\nunder its own name ({name}).",
    "score": "print(\"Hand in {name}: your instructor's grader gives the points (the checks above, on other inputs "
             "too).\")",
}


def handout_notebook(text: str, name: str) -> str:
    """A course notebook as the hand-out gives it: its score cells (which need the hidden checks) say how the
    notebook is handed in instead; ids and metadata stay, so nbgrader matches the cells as before."""
    nb = json.loads(text)
    for cell in nb["cells"]:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in _HANDIN:
            cell["source"] = _HANDIN[gid].format(name=name)
            if cell["cell_type"] == "code":
                cell["outputs"], cell["execution_count"] = [], None
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def _stub_functions(text: str, names: list[tuple[str, str]]) -> str:
    """``text`` with the bodies of the named top-level functions replaced by a NotImplementedError."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    for node in sorted((n for n in tree.body if isinstance(n, ast.FunctionDef)), key=lambda n: -n.lineno):
        lesson = dict(names).get(node.name)
        if lesson is None:
            continue
        first = node.body[0]
        indent = " " * first.col_offset
        body = (f'{indent}"""Lesson {lesson} asks for this kernel: it is not in the student hand-out."""\n'
                f'{indent}raise NotImplementedError("{node.name} is lesson {lesson}\'s exercise")\n')
        lines[first.lineno - 1: node.end_lineno] = [body]
    return "".join(lines)


def _dependencies() -> list[str]:
    text = (_ROOT / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    return re.findall(r'"([^"]+)"', block.group(1)) if block else ["torch", "triton==3.6.0"]


def build(out: pathlib.Path | None = None) -> pathlib.Path:
    """Write the hand-out to ``out`` (default ``dist/student``), replacing what was there; returns it."""
    out = pathlib.Path(out or _ROOT / "dist" / "student")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    stubbed = []
    for src in sorted((_ROOT / "kernels").rglob("*")):
        rel = src.relative_to(_ROOT).as_posix()
        if "__pycache__" in src.parts or src.is_dir() or any(rel.startswith(x + "/") for x in EXCLUDED):
            continue
        if src.suffix not in (".py", ".json", ".md", ".txt"):
            continue
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if rel in ANSWERS:
            dest.write_text(_stub_functions(src.read_text(), ANSWERS[rel]))
            stubbed += [f"{rel}:{name}" for name, _ in ANSWERS[rel]]
        else:
            shutil.copy(src, dest)
    nbs = out / "notebooks"
    nbs.mkdir()
    for nb in (_ROOT / "course" / f"{lesson}.ipynb" for lesson in lesson_ids()):
        (nbs / nb.name).write_text(handout_notebook(nb.read_text(), nb.name))
    version = re.search(r'^version = "([^"]+)"', (_ROOT / "pyproject.toml").read_text(), re.M)
    (out / "pyproject.toml").write_text(_PYPROJECT.format(version=version.group(1) if version else "0.1.0",
                                                          dependencies=json.dumps(_dependencies())))
    (out / "README.md").write_text(_README)
    (out / "MANIFEST.json").write_text(json.dumps({"left_out": list(EXCLUDED), "stubbed": stubbed,
                                                   "notebooks": sorted(p.name for p in nbs.iterdir())}, indent=1))
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m grader.dist", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="where to write it (default dist/student)")
    args = ap.parse_args(argv)
    out = build(pathlib.Path(args.out) if args.out else None)
    n = sum(1 for _ in out.rglob("*") if _.is_file())
    print(f"student hand-out: {out} ({n} files; pip install \"{out}[lab]\", as its README.md says)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
