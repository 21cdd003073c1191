"""Feedback pages show each check's result, not the hidden tests' source.

``nbgrader generate_feedback`` renders the autograded notebook, where nbgrader has put the instructor's graded
cells back, hidden tests included. :class:`HideTests` (in ``GenerateFeedback.preprocessors``, see
``nbgrader_config.py``) replaces each ``### BEGIN HIDDEN TESTS`` region with a line saying what it is; the
cell's output (the check's verdict and message, written by :mod:`grader.nbexec`) stays. The lesson's last two
cells, which nbgrader restores from the release (where they run the learner's own score, which a hand-out lacks:
``grader/dist.py``), say instead where the scores are.
"""

from __future__ import annotations

import re

from nbgrader.preprocessors import NbGraderPreprocessor

__all__ = ["HideTests", "hide", "FEEDBACK_CELLS"]

_REGION = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[ \t]*$", re.M | re.S)
LINE = "# hidden test: run by the grader on inputs you have not seen; its result is below"


#: what the feedback page shows in place of the lesson's score cells (by grade id), for every student alike
FEEDBACK_CELLS = {
    "score_md": "## Your score\n\nYour instructor's grader ran every check of this notebook again, on inputs of "
                "its own: each\ngraded cell above shows its points and what its check found.",
    "score": "# the grader's result of each check is under its cell above",
}


def hide(source: str) -> str:
    return _REGION.sub(LINE, source)


class HideTests(NbGraderPreprocessor):
    def preprocess_cell(self, cell, resources, index):
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in FEEDBACK_CELLS:
            cell["source"] = FEEDBACK_CELLS[gid]
            if cell.get("cell_type") == "code":
                cell["outputs"], cell["execution_count"] = [], None
        elif cell.get("cell_type") == "code" and "### BEGIN HIDDEN TESTS" in cell.get("source", ""):
            cell["source"] = hide(cell["source"])
        return cell, resources
