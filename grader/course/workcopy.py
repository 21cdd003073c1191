"""The learner's own copy of the course: ``make lab`` opens ``my-work/``, made from ``course/`` and never overwritten.

``course/`` is tracked by git and regenerated from ``solutions/``: a learner who edits it there gets conflicts on the
next ``git pull``. :func:`sync` copies each file of ``course/`` into the working folder once (git ignores it), and
again only when the learner has deleted it (to start a lesson afresh). When ``course/`` changes after the copy was
made, a copy the learner never changed is replaced; one they changed stays as it is and the new version goes to
``my-work/updates/``.
``python -m grader.course.workcopy [FOLDER]`` (``make lab``) runs it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import shutil
import sys

from ..layout import COURSE, WORK

__all__ = ["WORK", "sync"]

_STATE = ".course-versions.json"  # file name -> sha256 of the course/ version last copied or offered


def _digest(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sync(work: pathlib.Path = WORK, course: pathlib.Path = COURSE) -> list[str]:
    """Bring ``work`` up to date with ``course`` without touching any file the learner already has; returns one
    line per file copied or offered."""
    work = pathlib.Path(work)
    if not course.is_dir():
        raise FileNotFoundError(f"no course folder at {course}: run `make course` first")
    work.mkdir(parents=True, exist_ok=True)
    state_path = work / _STATE
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    said = []
    for src in sorted(p for p in course.iterdir() if p.is_file() and p.suffix in (".ipynb", ".md")):
        digest, dst = _digest(src), work / src.name
        if not dst.exists():
            shutil.copy2(src, dst)
            said.append(f"copied {src.name} into {work.name}/")
        elif state.get(src.name) == digest or _digest(dst) == digest:
            pass
        elif _digest(dst) == state.get(src.name):  # never changed by the learner: take the new version
            shutil.copy2(src, dst)
            said.append(f"updated {work.name}/{src.name} (you had not changed it)")
        else:
            newer = work / "updates" / src.name
            newer.parent.mkdir(exist_ok=True)
            shutil.copy2(src, newer)
            said.append(f"{src.name} changed in the course since your copy was made: the new version is "
                        f"{work.name}/updates/{src.name}; your {work.name}/{src.name} is untouched")
        state[src.name] = digest
    state_path.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    return said


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grader.course.workcopy", description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default=str(WORK), help="the learner's working folder (default: my-work)")
    args = ap.parse_args(argv)
    work = pathlib.Path(args.folder)
    if not work.is_absolute():
        work = pathlib.Path.cwd() / work
    try:
        said = sync(work)
    except (FileNotFoundError, OSError) as e:
        print(e, file=sys.stderr)
        return 1
    for line in said:
        print(line)
    print(f"your notebooks: {work} (git ignores it; course/ stays as released)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
