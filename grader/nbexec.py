"""nbgrader's ``Execute`` step, replaced: graded cells get the sandboxed grader's verdicts as their outputs.

``grader/nbgrader_config.py`` puts :class:`SandboxExecute` where ``Execute`` was in ``Autograde``'s
preprocessors, so ``nbgrader autograde`` itself never runs a student's notebook in its own process. The score of
every graded cell is decided once, by the grader (``CellResult.score``, after the speed policy); nbgrader only
records it: :func:`scored_outputs` writes the outputs from which nbgrader's ``SaveAutoGrades`` reads exactly that
score (a stream saying what passed at full points, an error whose message is the failed check's at 0, the score
itself as the cell's result in between). ``generate_feedback`` renders them, ``export`` writes the CSV.

``python -m grader autograde`` grades every submission first, in parallel, then records each through
:func:`autograde_with`, which hands its result to the one ``nbgrader autograde`` run that records it (the
``SandboxExecute.verdict`` setting); run by hand, ``nbgrader autograde`` grades the notebook then and there.
"""

from __future__ import annotations

import json
import os
import pathlib

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Any

__all__ = ["SandboxExecute", "apply_results", "autograde_with", "results_dir", "scored_outputs"]


def results_dir(course_root: str | os.PathLike) -> pathlib.Path:
    return pathlib.Path(course_root) / "reports" / "results"


def _stream(text: str):
    from nbformat.v4 import new_output

    return new_output("stream", name="stdout", text=text + "\n")


def _error(message: str):
    from nbformat.v4 import new_output

    first = message.splitlines()[0] if message else "check failed"
    return new_output("error", ename="CheckFailed", evalue=first[:500],
                      traceback=["CheckFailed: " + line for line in message.splitlines()] or ["CheckFailed"])


def scored_outputs(cell) -> list:
    """The outputs of a graded cell (a ``CellResult``) from which nbgrader reads the grader's score for it
    (``nbgrader.utils.determine_grade``: an error scores 0, a result is the score, anything else full points)."""
    from nbformat.v4 import new_output

    if cell.score >= cell.points:
        return [_stream(cell.message)]
    if cell.score <= 0:
        return [_error(cell.message)]
    return [_stream(cell.message), new_output("execute_result", data={"text/plain": f"{cell.score:g}"})]


def apply_results(nb, result) -> None:
    """Write each graded cell's verdict as its only output; note submission problems at the top."""
    by_id = {c.grade_id: c for c in result.cells}
    for cell in nb.cells:
        nbg = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") != "code":
            continue
        gid = nbg.get("grade_id")
        cell["execution_count"] = None
        if nbg.get("grade") and not nbg.get("solution") and gid in by_id:
            cell["outputs"] = scored_outputs(by_id[gid])
        else:
            cell["outputs"] = []
    head = ([f"Graded {'on a GPU' if result.mode == 'gpu' else 'in the Triton interpreter (no GPU)'}; "
            f"the checks gave {result.score:g} of {result.max_score:g} points (the score at the top of this page is "
            "the gradebook's: it takes off any late penalty and holds any score your instructor set by hand)."]
            + [f"- {n}" for n in result.notes])
    from nbformat.v4 import new_markdown_cell

    note = new_markdown_cell("**Grader:** " + "\n".join(head))
    note["metadata"] = {"grader_note": True}
    nb.cells.insert(0, note)


def autograde_with(book, result) -> dict:
    """``nbgrader autograde`` of ``result``'s submission through the ``NbGraderAPI`` ``book``, handed the grader's
    result (a ``NotebookResult``): nbgrader records the scores it holds and runs nothing. Returns the API's
    answer (``success``, ``error``, ``log``)."""
    settings = book.config.SandboxExecute
    settings.verdict = result
    try:
        return book.autograde(result.lesson, result.student, force=True, create=True)
    finally:
        settings.verdict = None


class SandboxExecute(NbGraderPreprocessor):
    """Fill graded cells from the sandboxed grader (the result handed over, or grade this notebook now)."""

    verdict = Any(None, allow_none=True,
                  help="The grader's result (grader.grade.NotebookResult) for the one notebook this run records, "
                       "handed over by autograde_with; None: grade the notebook now").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        result = self.verdict
        if result is None:
            result = self._grade_now(nb, info)
        elif (result.student, result.lesson, result.lesson) != (info["student"], info["assignment"], info["notebook"]):
            raise ValueError(f"the grader's result for {result.student}/{result.lesson} was handed to the "
                             f"autograding of {info['student']}/{info['assignment']}/{info['notebook']}")
        apply_results(nb, result)
        return nb, resources

    def _grade_now(self, nb, info):
        from nbgrader.api import Gradebook

        import kernels  # noqa: F401  (decides GPU or interpreter first)

        from .grade import Grader, Settings

        source = {"cells": []}
        with Gradebook(info["db_url"]) as gb:
            nbk = gb.find_notebook(info["notebook"], info["assignment"])
            points = {g.name: g.max_score for g in nbk.grade_cells}
            for sc in nbk.source_cells:
                md = {"nbgrader": {"grade_id": sc.name, "grade": sc.name in points,
                                   "solution": sc.name in {s.name for s in nbk.solution_cells},
                                   "points": points.get(sc.name, 0)}}
                source["cells"].append({"cell_type": sc.cell_type, "metadata": md, "source": sc.source})
        release = {"cells": [c for c in source["cells"] if not c["metadata"]["nbgrader"]["solution"]]}
        submission = json.loads(json.dumps(nb))
        paths = [p for p in os.environ.get("GRADER_LESSON_PATHS", "").split(os.pathsep) if p]
        grader = Grader(Settings(lesson_paths=paths, warm_lessons=(info["assignment"],)))
        try:
            result = grader.grade(info["student"], info["assignment"], submission, source, release)
        finally:
            grader.sandbox.close()  # its sandbox templates end with this notebook, not with nbgrader's process
        from .policy import DEFAULT, apply

        apply([result], os.environ.get("GRADER_SPEED_POLICY", DEFAULT))
        return result
