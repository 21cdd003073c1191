"""``python -m grader <command>``: build, collect, autograde, feedback, export, report, lint, demo."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _demo(args) -> int:
    import kernels  # noqa: F401  (decides GPU or interpreter first)
    from kernels.device import ON_GPU

    from .democlass import run_demo

    if args.gpu and not ON_GPU:
        print("--gpu: no CUDA device here", file=sys.stderr)
        return 2
    work = pathlib.Path(args.work) if args.work else _ROOT / "grader" / "demo"
    reports = [pathlib.Path(p) for p in (args.report or [])]
    if ON_GPU and not reports:
        reports = [_ROOT / "results" / "gpu"] + ([pathlib.Path(os.environ["OUT"])] if os.environ.get("OUT") else [])
    return run_demo(work, slots=args.slots or (3 if ON_GPU else 2), lessons=args.lessons, students=args.students,
                    direct=args.direct, reports=reports)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grader", description=__doc__.split(": ", 1)[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="build the course, grade the demo class, check every expected score")
    d.add_argument("--gpu", action="store_true", help="require a GPU (fail if there is none)")
    d.add_argument("--work", help="the demo's course folder and report (default: grader/demo)")
    d.add_argument("--report", nargs="*", help="also copy grade-demo.json here (on a GPU: results/gpu and $OUT)")
    d.add_argument("--slots", type=int, default=None, help="submissions graded at once (2; 3 on a GPU)")
    d.add_argument("--lessons", nargs="*", help="course lessons to include (default: all)")
    d.add_argument("--students", nargs="*", help="only these demo students")
    d.add_argument("--direct", action="store_true", help="grade without nbgrader (no gradebook, feedback, CSV)")
    d.set_defaults(fn=_demo)
    args = ap.parse_args(argv)
    return args.fn(args)
