"""``python -m grader <command>``: build, collect, autograde, feedback, export, report, lint, demo."""

from __future__ import annotations

import argparse
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
    out = pathlib.Path(args.out) if args.out else (_ROOT / "results" / "gpu" if ON_GPU else _ROOT / "grader" / "demo")
    return run_demo(out, slots=args.slots, lessons=args.lessons, students=args.students, direct=args.direct)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grader", description=__doc__.split(": ", 1)[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="build the course, grade the demo class, check every expected score")
    d.add_argument("--gpu", action="store_true", help="require a GPU (fail if there is none)")
    d.add_argument("--out", help="report folder (default: grader/demo, or results/gpu on a GPU)")
    d.add_argument("--slots", type=int, default=2, help="submissions graded at once")
    d.add_argument("--lessons", nargs="*", help="course lessons to include (default: all)")
    d.add_argument("--students", nargs="*", help="only these demo students")
    d.add_argument("--direct", action="store_true", help="grade without nbgrader (no gradebook, feedback, CSV)")
    d.set_defaults(fn=_demo)
    args = ap.parse_args(argv)
    return args.fn(args)
