"""The demo class through Dask on this host's GPU(s) against the default executor: same scores, the times.

    python3 scripts/gpu_dask.py [--all] [--students ...] [--out results/gpu/dask.json]

Builds the demo class (grader/democlass.py; by default a subset that fits a GPU batch stage: the full solution, the
untouched release, a zoo student and the GPU-only faults), collects it into two course folders, grades one with
the default executor (thread slots in this process) and the other with ``--cluster local-gpus`` (dask-cuda's
``LocalCUDACluster``, one worker per GPU; ``--workers 1`` for one GPU) with the same master seed, and writes
the scores of both, whether they are identical and as expected, the gradebooks, and the wall times. Without
dask-cuda (or where it does not import) the cluster is ``--cluster local``, the same layout by hand; the JSON
says which and why. Also runs under the interpreter (no GPU), where it compares with a local CPU cluster.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import pathlib
import shutil
import signal
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import kernels  # noqa: E402,F401  (decides GPU or interpreter first)
from kernels.device import MODE, ON_GPU, describe  # noqa: E402

SUBSET = ["solution", "release", "zoo_copy_off_by_one", "slow", "race", "skip_work"]


def build(work: pathlib.Path, students: list[str] | None, copies: int = 0,
          lessons: list[str] | None = None) -> tuple[pathlib.Path, dict]:
    """The demo class collected into ``work/course`` (its ``lessons`` only, if given); returns it and the expected
    scores in this mode."""
    from grader.demo import class_sources, collect_class, course_lessons, demo_class, expected_scores, write_class

    real = course_lessons(lessons)
    sources = class_sources(real)
    klass = demo_class(real, copies=copies, students=students)
    root = work / "course"
    if work.exists():
        shutil.rmtree(work)
    folder = work / "incoming"
    write_class(root, folder, real, sources, klass)
    collect_class(root, folder, klass, sources)
    return root, expected_scores(klass)


def copy_course(root: pathlib.Path, name: str) -> pathlib.Path:
    dst = root.parent / name
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(root, dst, symlinks=True)
    return dst


def open_cluster(workers: int, slots: int) -> tuple[object, dict]:
    """``--cluster local-gpus`` when dask-cuda imports, else ``--cluster local`` (also what runs without a GPU)."""
    from grader import distributed

    note = {}
    if ON_GPU:
        try:
            t0 = time.time()
            c = distributed.connect(cluster="local-gpus", workers=workers, slots=slots)
            note.update(cluster="local-gpus", start_s=time.time() - t0)
            return c, note
        except Exception as e:  # dask-cuda missing or broken here: the same layout by hand
            note["local_gpus_unavailable"] = f"{type(e).__name__}: {e}"
    t0 = time.time()
    c = distributed.connect(cluster="local", workers=workers, slots=slots)
    note.update(cluster="local", start_s=time.time() - t0)
    return c, note


def grade_on_cluster(root: pathlib.Path, workers: int, slots: int, seed: int, *, progress: bool = True,
                     during=None) -> tuple[object, dict]:
    """Grade the course at ``root`` on a fresh cluster (``open_cluster``) with the demo's settings and master
    ``seed``, holding the context ``during`` while grading; returns the run's Outcome and what every report says."""
    from grader import distributed
    from grader.demo import demo_settings

    cluster, note = open_cluster(workers, slots)
    try:
        with during or contextlib.nullcontext():
            t0 = time.time()
            out = distributed.autograde(root, cluster.client, settings=demo_settings(seed), progress=progress)
            wall = time.time() - t0
    finally:
        cluster.close()
    return out, {**note, "what": cluster.what, "wall_s": wall,
                 "scores": {f"{r.student}/{r.lesson}": r.score for r in out.results},
                 "notebooks_per_worker": dict(collections.Counter(out.placement.values())),
                 "infrastructure": out.infrastructure}


def grade_dask(root: pathlib.Path, workers: int, slots: int, seed: int, progress: bool = True) -> dict:
    out, run = grade_on_cluster(root, workers, slots, seed, progress=progress)
    return {**run, "workers": len(out.workers), "slots_per_worker": slots,
            "seconds": {f"{r.student}/{r.lesson}": r.seconds for r in out.results},
            "nbgrader_failures": out.failures, "retries": out.retries, "where": out.where}


def main() -> int:
    from grader import workflow
    from grader.demo import demo_settings

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "results" / "gpu" / "dask.json"))
    ap.add_argument("--work", default=str(ROOT / "grader" / "demo-dask"))
    ap.add_argument("--all", action="store_true", help="the whole demo class (default: a subset, see SUBSET)")
    ap.add_argument("--students", nargs="*")
    ap.add_argument("--lessons", nargs="*", help="course lessons to include (default: all; lesson 07's solution "
                    "alone takes minutes to grade on a GPU)")
    ap.add_argument("--slots", type=int, default=3 if ON_GPU else 1, help="slots per GPU / worker threads")
    ap.add_argument("--workers", type=int, default=1 if ON_GPU else 2)
    ap.add_argument("--seed", type=int, default=20261204)
    args = ap.parse_args()
    # the stage's `timeout` sends SIGTERM: leave through the finally blocks, which stop the cluster's processes
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        import distributed  # noqa: F401
    except ImportError as e:
        print(f"gpu_dask: dask.distributed is not importable ({e}): on the GPU machine its wheels go in .dask-wheels/ "
              "(scripts/gpu_batch.sh installs them)", file=sys.stderr)
        return 3
    work = pathlib.Path(args.work)
    t0 = time.time()
    root, expected = build(work, None if args.all else (args.students or SUBSET), lessons=args.lessons)
    built = time.time() - t0
    a, b = copy_course(root, "default"), copy_course(root, "dask")
    t0 = time.time()
    results, failures, _ = workflow.autograde(a, slots=args.slots * args.workers, settings=demo_settings(args.seed))
    default = {"slots": args.slots * args.workers, "wall_s": time.time() - t0,
               "scores": {f"{r.student}/{r.lesson}": r.score for r in results},
               "seconds": {f"{r.student}/{r.lesson}": r.seconds for r in results}, "nbgrader_failures": failures}
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # what is done so far, in case the stage's time runs out during the cluster's run
    out.write_text(json.dumps({"mode": MODE, "where": describe(), "build_s": built, "default": default,
                               "dask": None}, indent=1, default=str) + "\n")
    print(f"default executor: {default['wall_s']:.0f} s for {len(default['scores'])} notebooks", flush=True)
    dask = grade_dask(b, args.workers, args.slots, args.seed)
    book_a, book_b = workflow.gradebook_scores(a), workflow.gradebook_scores(b)
    exp = {f"{s}/{lsn}": v for (s, lsn), v in expected.items()}
    differ = sorted(k for k in set(default["scores"]) | set(dask["scores"])
                    if default["scores"].get(k) != dask["scores"].get(k))
    unexpected = sorted(k for k, v in dask["scores"].items() if abs(v - exp.get(k, -1)) > 1e-9)
    summary = {"mode": MODE, "where": describe(), "students": sorted({k.split("/")[0] for k in exp}),
               "notebooks": len(exp), "build_s": built, "default": default, "dask": dask,
               "same_scores": not differ, "scores_differ": differ, "not_as_expected": unexpected,
               "gradebooks_equal": book_a == book_b and len(book_a) == len(exp),
               "expected": exp}
    out.write_text(json.dumps(summary, indent=1, default=str) + "\n")
    if os.environ.get("OUT"):
        shutil.copy(out, pathlib.Path(os.environ["OUT"]) / out.name)
    print(f"{len(exp)} notebooks ({MODE}); default executor {default['wall_s']:.0f} s with {default['slots']} slots; "
          f"dask ({dask['what']}) {dask['wall_s']:.0f} s (+{dask['start_s']:.0f} s to start); "
          f"same scores: {not differ}; as expected: {not unexpected}; gradebooks equal: {summary['gradebooks_equal']}")
    for k in differ:
        print(f"DIFFER {k}: default {default['scores'].get(k)}, dask {dask['scores'].get(k)}")
    for k in unexpected:
        print(f"UNEXPECTED {k}: dask {dask['scores'][k]}, expected {exp.get(k)}")
    ok = not differ and not unexpected and summary["gradebooks_equal"] and not dask["infrastructure"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
