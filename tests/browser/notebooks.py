"""Notebooks for the browser test: a lesson's widget cells with the cells they need.

From a lesson's single source (``solutions/NN_*.py``, jupytext percent) the notebook keeps the code cells up to
the last one tagged ``widget``, leaving out graded cells (nbgrader ``grade: true``: the checks) and cells tagged
``slow``: the set-up, the learner's kernels and the widget cells run as a learner would run them.
"""

from __future__ import annotations

import pathlib

import nbformat

from kernels.catalog import lesson_ids

ROOT = pathlib.Path(__file__).resolve().parents[2]
LESSONS = lesson_ids()

PREAMBLE = f"import sys\nsys.path.insert(0, {str(ROOT)!r})"

def lesson_source(lesson: str) -> pathlib.Path:
    return ROOT / "solutions" / f"{lesson}.py"


def _needed(cell) -> bool:
    graded = cell.metadata.get("nbgrader", {}).get("grade", False)
    return not graded and "slow" not in cell.metadata.get("tags", [])


def widget_cells(lesson: str) -> tuple[list[str], int]:
    """The code cells to run for ``lesson``'s widgets, and how many of them are widget cells."""
    from grader.course import solution_notebook

    nb = solution_notebook(lesson, validate=False)
    code = [c for c in nb.cells if c.cell_type == "code"]
    tagged = [i for i, c in enumerate(code) if "widget" in c.metadata.get("tags", [])]
    if not tagged:
        return [], 0
    keep = [c.source for i, c in enumerate(code[: tagged[-1] + 1]) if i in tagged or _needed(c)]
    return keep, len(tagged)


def build(cells: list[str], path: pathlib.Path) -> pathlib.Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(PREAMBLE)] + [nbformat.v4.new_code_cell(s) for s in cells]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path
