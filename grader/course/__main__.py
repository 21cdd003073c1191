"""``python -m grader.course [--check] [LESSON ...]``: build course/ from solutions/, or check it is in sync."""

from __future__ import annotations

import argparse
import sys

from .build import CourseError, OutOfSync, build


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grader.course", description=__doc__.split(": ", 1)[1])
    ap.add_argument("lessons", nargs="*", help="lesson ids or numbers (default: all)")
    ap.add_argument("--check", action="store_true", help="change nothing; fail if course/ is out of sync")
    args = ap.parse_args(argv)
    try:
        built = build(args.lessons or None, check=args.check)
    except (CourseError, OutOfSync) as e:
        print(e, file=sys.stderr)
        return 1
    if args.check:
        print(f"course/ is in sync with solutions/ ({len(built)} lessons)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
