"""Where things are in this repository: the one module that knows the folder layout.

``kernels/`` (the library a learner imports) knows none of it; the course build, the grader's commands and the
scripts find the lesson sources, the student notebooks and the nbgrader course folder here.
"""

from __future__ import annotations

import os
import pathlib
import sys

__all__ = ["ROOT", "SOLUTIONS", "COURSE", "GRADER", "README", "WORK", "scripts_on_path"]

#: the repository: the folder that holds ``kernels/``, ``grader/`` and ``solutions/``
ROOT = pathlib.Path(__file__).resolve().parent.parent
#: the single source of every lesson, ``<lesson id>.py`` (jupytext percent format, nbgrader metadata)
SOLUTIONS = ROOT / "solutions"
#: the student notebooks the course build writes, ``<lesson id>.ipynb``, and their README
COURSE = ROOT / "course"
#: the nbgrader course folder (``nbgrader_config.py``, ``source/``, ``release/``, ``submitted/``, ...)
GRADER = ROOT / "grader"
#: the repository's README, whose lesson table the course build writes
README = ROOT / "README.md"
#: the learner's own copy of ``course/`` that ``make lab`` opens (git ignores it)
WORK = ROOT / "my-work"


def scripts_on_path() -> None:
    """Put this interpreter's scripts folder (``.venv/bin``) first on PATH if it is not on it: nbgrader runs
    ``alembic`` by name when it makes a gradebook, which fails ("No such file or directory: 'alembic'") for
    ``.venv/bin/python -m grader`` run without the environment activated."""
    scripts = str(pathlib.Path(sys.executable).parent)
    if scripts not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([scripts, os.environ.get("PATH", "")])
