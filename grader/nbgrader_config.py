"""nbgrader configuration of the course (``grader/`` is the nbgrader course folder).

Autograding replaces nbgrader's ``Execute`` step with the sandboxed grader (``grader.nbexec.SandboxExecute``):
student code never runs in nbgrader's process, and graded cells deleted or stripped of their metadata are put
back from the gradebook. Nothing here changes what ``generate_assignment`` produces.
"""

import pathlib
import sys

_HERE = pathlib.Path(__file__).resolve().parent
if str(_HERE.parent) not in sys.path:
    sys.path.insert(0, str(_HERE.parent))

c = get_config()  # noqa: F821  (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "gpu-kernel-workbook"
c.OverwriteCells.add_missing_cells = True
c.Autograde.autograde_preprocessors = [
    "grader.nbexec.SandboxExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# An LMS download: files named <student>_<notebook>.ipynb (nbgrader zip_collect).
c.FileNameCollectorPlugin.named_regexp = r".*?(?P<student_id>[A-Za-z0-9.-]+)_(?P<file_id>\d\d_[a-z0-9_]+\.ipynb)$"
# Late work: 10% of the score off per started day past the due date (grader/late.py; due dates in the gradebook).
c.AssignLatePenalties.plugin_class = "grader.late.PerDayPenalty"
c.PerDayPenalty.percent_per_day = 10.0
# Feedback shows each hidden test's result, not its source (grader/hidetests.py).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "grader.hidetests.HideTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
