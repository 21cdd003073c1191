"""The folders grader/GUIDE.md tells an instructor to make in the repository hold students' work: git must ignore
them (so they are never committed, and the linter does not read students' notebooks)."""

import re
import shutil
import subprocess

import pytest

from grader.layout import ROOT


def _guide_paths() -> list[str]:
    text = (ROOT / "grader" / "GUIDE.md").read_text()
    paths = re.findall(r"cp -r grader (\S+?)`", text) + re.findall(r"cp -r grader (\S+) &&", text)
    paths += re.findall(r"(?:SUBMISSIONS|ROSTER)=([^`\s]+)", text)
    paths += re.findall(r"python -m grader (?:--course \S+ )?collect ([^`\s.][^`\s,]*)", text)
    return sorted({p.rstrip("/") for p in paths})


def test_guide_names_class_folders():
    assert {"terms/2027", "staging", "incoming", "roster.csv", "canvas-00.zip", "again"} <= set(_guide_paths())


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_class_folders_are_ignored():
    for path in _guide_paths():
        probe = f"{path}/submitted/alice/00_setup/00_setup.ipynb" if "." not in path.rsplit("/", 1)[-1] else path
        res = subprocess.run(["git", "check-ignore", "-q", "--no-index", probe], cwd=ROOT)
        assert res.returncode == 0, f"{probe}: grader/GUIDE.md has instructors make it, but git does not ignore it"
