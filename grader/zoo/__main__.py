"""``python -m grader.zoo``: grade every zoo entry in this mode and write a JSON report.

Entries are graded by ``--jobs`` worker processes (compiling the kernels dominates on a GPU), except those of the
speed-graded exercises, which run afterwards in this process, one at a time, with the GPU to themselves. The exit
status is 0 only if every entry got the verdict the zoo expects: wrong ones failing with their fault named, right
ones passing. ``--compile`` instead compiles, for sm_90 and without a GPU, every launch of the chosen entries that
the zoo expects to pass somewhere (the right ones, and the wrong ones only a GPU's timing fails), and prints the
errors.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import pathlib
import sys
import time


def _environment() -> dict:
    from kernels.device import machine

    return machine()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.zoo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("results/gpu/zoo.json"))
    parser.add_argument("--jobs", type=int, default=1, help="worker processes for the entries not timed")
    parser.add_argument("--lesson", action="append", help="only this lesson (repeatable)")
    parser.add_argument("--only", action="append", help="only entries whose id contains this (repeatable)")
    parser.add_argument("--compile", action="store_true", help="compile the entries for sm_90 instead of grading")
    args = parser.parse_args(argv)
    if args.compile:
        return _compile(args) if _triton_compiles() else _compile_fresh(sys.argv[1:] if argv is None else argv)

    import kernels  # noqa: F401
    from grader.zoo import entries, grade_ids, share_threads
    from kernels.checks.spec import get

    t0 = time.time()
    chosen = [e for lesson in (args.lesson or [None]) for e in entries(lesson)
              if not args.only or any(o in e.id for o in args.only)]
    timed = [e.id for e in chosen if get(e.exercise).performance is not None]
    rest = [e.id for e in chosen if e.id not in timed]
    rows: list[dict] = []
    order = {e.id: i for i, e in enumerate(chosen)}
    if args.jobs > 1 and len(rest) > 1:
        # one entry a task: a few entries (the GPU's illegal-address ones) take far longer than the rest
        with multiprocessing.get_context("spawn").Pool(args.jobs, share_threads, (args.jobs,)) as pool:
            for part in pool.imap_unordered(grade_ids, [[i] for i in rest]):
                rows += part
                if len(rows) % 10 == 0 or len(rows) == len(rest):
                    print(f"[{time.time() - t0:5.0f}s] {len(rows)} of {len(chosen)} graded", flush=True)
                    _report(args.out, rows, order, t0, finished=False)
    else:
        rows += grade_ids(rest)
    for i in timed:
        rows += grade_ids([i])
        _report(args.out, rows, order, t0, finished=False)
    report = _report(args.out, rows, order, t0, finished=True)
    bad = [r for r in rows if not r["ok"]]
    for r in rows:
        mark = "ok " if r["ok"] else "BAD"
        kind = "wrong" if r["wrong_here"] else "right"
        print(f"{mark} {r['seconds']:6.1f}s {kind:5} {r['exercise']}/{r['name']}")
        for p in r["problems"]:
            print(f"      {p[:600]}")
    print(f"{len(rows)} entries ({report['wrong']} wrong here, {report['right']} right) in {report['seconds']} s; "
          f"{len(bad)} not as expected; report: {args.out}")
    return 1 if bad else 0


def _report(out: pathlib.Path, rows: list[dict], order: dict, t0: float, finished: bool) -> dict:
    """Write the report so far (``finished`` false until every entry is graded): a run cut off keeps its rows."""
    rows.sort(key=lambda r: order[f"{r['exercise']}/{r['name']}"])
    report = {**_environment(), "finished": finished, "seconds": round(time.time() - t0, 1), "entries": len(rows),
              "wrong": sum(r["wrong_here"] for r in rows), "right": sum(not r["wrong_here"] for r in rows),
              "bad": [f"{r['exercise']}/{r['name']}" for r in rows if not r["ok"]], "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    tmp.write_text(json.dumps(report, indent=1, default=str) + "\n")
    tmp.replace(out)
    return report


def _triton_compiles() -> bool:
    """Whether Triton's own ``@jit`` helpers were built compiled in this process. Triton decides when it is first
    imported, and ``python -m grader.zoo`` imports it through this package after ``kernels`` has set
    TRITON_INTERPRET=1 (without a GPU): its helpers are then interpreted functions, and every compile fails."""
    import triton.language.standard as standard
    from triton.runtime.jit import JITFunction

    return isinstance(standard.cdiv, JITFunction)


def _compile_fresh(argv: list[str]) -> int:
    """Run ``--compile`` in a fresh compile process (:func:`kernels.compile.run_compiled`)."""
    from kernels.compile import run_compiled

    return run_compiled("grader.zoo", argv, capture=False).returncode


def _compile(args) -> int:
    import tempfile

    from kernels.compile import enter_compile_mode

    enter_compile_mode()
    from grader.zoo import compile_entry, entries

    chosen = [e for lesson in (args.lesson or [None]) for e in entries(lesson)
              if (not args.only or any(o in e.id for o in args.only)) and e.wrong_here("interpreter") is False]
    failed = 0
    with tempfile.TemporaryDirectory(prefix="zoo-aot-") as folder:
        for e in chosen:
            err = compile_entry(e, folder)
            failed += err is not None
            print(f"{'ok ' if err is None else 'BAD'} {e.id}" + (f": {err[:800]}" if err else ""), flush=True)
    print(f"{len(chosen)} entries compiled for sm_90; {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
