"""Feedback pages show each check's result, not the hidden tests' source.

``nbgrader generate_feedback`` renders the autograded notebook, where nbgrader has put the instructor's graded
cells back, hidden tests included. :class:`HideTests` (in ``GenerateFeedback.preprocessors``, see
``nbgrader_config.py``) replaces each ``### BEGIN HIDDEN TESTS`` region with a line saying what it is; the
cell's output (the check's verdict and message, written by :mod:`grader.nbexec`) stays.
"""

from __future__ import annotations

import re

from nbgrader.preprocessors import NbGraderPreprocessor

__all__ = ["HideTests", "hide"]

_REGION = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[ \t]*$", re.M | re.S)
LINE = "# hidden test: run by the grader on inputs you have not seen; its result is below"


def hide(source: str) -> str:
    return _REGION.sub(LINE, source)


class HideTests(NbGraderPreprocessor):
    def preprocess_cell(self, cell, resources, index):
        if cell.get("cell_type") == "code" and "### BEGIN HIDDEN TESTS" in cell.get("source", ""):
            cell["source"] = hide(cell["source"])
        return cell, resources
