"""``nbgrader generate_assignment`` for several lessons in one process (run by :mod:`grader.course.build`).

Prints one JSON line last: lesson id -> path of the released student notebook.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grader.course._nbgrader")
    ap.add_argument("--root", type=pathlib.Path, required=True, help="the nbgrader course folder")
    ap.add_argument("--config", type=pathlib.Path, help="an nbgrader_config.py to load first")
    ap.add_argument("--db", help="gradebook URL (default: the configuration's)")
    ap.add_argument("lessons", nargs="+")
    args = ap.parse_args(argv)

    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    config = Config()
    if args.config:
        config.merge(PyFileConfigLoader(args.config.name, path=str(args.config.parent)).load_config())
    config.CourseDirectory.root = str(args.root.resolve())
    if args.db:
        config.CourseDirectory.db_url = args.db
    api = NbGraderAPI(config=config)
    released = {}
    for lesson in args.lessons:
        result = api.generate_assignment(lesson, force=True, create=True)
        if not result["success"]:
            print(result.get("log", ""), result.get("error", ""), sep="\n", file=sys.stderr)
            return 1
        path = pathlib.Path(api.coursedir.format_path(api.coursedir.release_directory, ".", lesson))
        released[lesson] = str(path / f"{lesson}.ipynb")
    print(json.dumps(released))
    return 0


if __name__ == "__main__":
    sys.exit(main())
