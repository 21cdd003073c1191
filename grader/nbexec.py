"""nbgrader's ``Execute`` step, replaced: graded cells get the sandboxed grader's verdicts as their outputs.

``grader/nbgrader_config.py`` puts :class:`SandboxExecute` where ``Execute`` was in ``Autograde``'s
preprocessors, so ``nbgrader autograde`` itself (and ``python -m grader autograde``, which first grades every
submission in parallel and hands the results over through :data:`PREGRADED`) never runs a student's notebook in
its own process. Each graded cell gets one output: a stream saying what passed, or an error whose message is the
failed check's (nbgrader scores a cell with an error output 0, any other full). ``SaveAutoGrades`` then records
the scores in the gradebook, ``generate_feedback`` renders them, ``export`` writes the CSV.
"""

from __future__ import annotations

import json
import os
import pathlib

from nbgrader.preprocessors import NbGraderPreprocessor

__all__ = ["SandboxExecute", "PREGRADED", "apply_results", "results_dir"]

#: (student, assignment, notebook) -> NotebookResult, filled by ``python -m grader autograde``.
PREGRADED: dict = {}


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
            r = by_id[gid]
            cell["outputs"] = [_stream(r.message) if r.passed else _error(r.message)]
        else:
            cell["outputs"] = []
    head = [f"Graded {'on a GPU' if result.mode == 'gpu' else 'in the Triton interpreter (no GPU)'}; "
            f"{result.score:g} of {result.max_score:g} points."] + [f"- {n}" for n in result.notes]
    from nbformat.v4 import new_markdown_cell

    note = new_markdown_cell("**Grader:** " + "\n".join(head))
    note["metadata"] = {"grader_note": True}
    nb.cells.insert(0, note)


class SandboxExecute(NbGraderPreprocessor):
    """Fill graded cells from the sandboxed grader (pre-graded results, or grade this notebook now)."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        key = (info["student"], info["assignment"], info["notebook"])
        result = PREGRADED.get(key)
        if result is None:
            result = self._grade_now(nb, info)
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
        grader = Grader(Settings(lesson_paths=paths))
        try:
            result = grader.grade(info["student"], info["assignment"], submission, source, release)
        finally:
            grader.sandbox.close()  # its sandbox templates end with this notebook, not with nbgrader's process
        from .policy import DEFAULT, apply

        apply([result], os.environ.get("GRADER_SPEED_POLICY", DEFAULT))
        return result
