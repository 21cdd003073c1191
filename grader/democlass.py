"""``python -m grader demo``: build the course, write the demo class, grade it, print the table, check every score.

On a machine with nbgrader the class goes through the instructor's workflow in a course folder of its own
(``grader/demo/course``: generate_assignment, collect, autograde with the sandbox, generate_feedback, export);
without it (the GPU machine may lack it) the same grader runs on the collected notebooks directly. Either way the
report is ``<out>/grade-demo.json`` and the exit status is 0 only if every submission got its expected score,
every other student's work was unaffected, and no sandbox process outlived its submission.
"""

from __future__ import annotations

import json
import os
import pathlib
import time

from kernels.device import MODE, ON_GPU, describe

from . import demo
from .collect import collect_folder
from .grade import Grader, Settings
from .run import grade_class, report, table

__all__ = ["run_demo", "course_lessons"]

_ROOT = pathlib.Path(__file__).resolve().parents[1]


def course_lessons(only: list[str] | None = None) -> dict[str, tuple[dict, dict]]:
    """lesson id -> (instructor source, student release), for every lesson in ``solutions/``."""
    from .percent import read_percent, release

    out = {}
    for p in sorted((_ROOT / "solutions").glob("[0-9][0-9]_*.py")):
        if only is not None and p.stem not in only:
            continue
        src = read_percent(p.read_text())
        committed = _ROOT / "course" / f"{p.stem}.ipynb"
        rel = json.loads(committed.read_text()) if committed.exists() else release(src)
        out[p.stem] = (src, rel)
    return out


def _points(nb: dict) -> float:
    from .notebook import split

    return sum(g.points for g in split(nb)[1])


def _leftovers(uid_base: int, slots: int) -> list[int]:
    from .sandbox import _pids_of

    return [p for u in range(uid_base, uid_base + 2 * slots) for p in _pids_of(u)]


def run_demo(out: pathlib.Path, *, slots: int = 2, lessons: list[str] | None = None, students: list[str] | None = None,
             settings: Settings | None = None) -> int:
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    real = course_lessons(lessons)
    fx_src, fx_rel = demo.fixture_notebooks()
    all_lessons = {**real, demo.LESSON: (fx_src, fx_rel)}
    klass = demo.students({k: _points(v[0]) for k, v in real.items()})
    if students:
        klass = [s for s in klass if s.name in students]
    folder = out / "submitted"
    demo.write_class(folder, all_lessons, klass)
    sources = {k: v[0] for k, v in all_lessons.items()}
    releases = {k: v[1] for k, v in all_lessons.items()}
    collected = collect_folder(folder, sources)
    subs = [collected[st.name][lesson] for st in klass for lesson in all_lessons
            if lesson in st.expect]
    settings = settings or Settings(problem_timeout=60.0 if not ON_GPU else 30.0, cell_timeout=60.0,
                                    memory_limit=2 << 30, lesson_paths=[str(demo.FIXTURE)],
                                    gpu_memory_fraction=0.45 if ON_GPU else None)
    grader = Grader(settings)
    built = time.time() - t0
    results = grade_class(grader, subs, sources, releases, slots=slots)
    graded = time.time() - t0 - built
    left = _leftovers(grader.sandbox.uid_base, slots)
    expected = {(st.name, lesson): e[MODE] for st in klass for lesson, e in st.expect.items()}
    print(table(results, expected, mode=f"{MODE}; {describe()}"))
    bad = [(r.student, r.lesson, r.score, expected[(r.student, r.lesson)]) for r in results
           if abs(r.score - expected[(r.student, r.lesson)]) > 1e-9]
    for r in results:
        for c in r.cells:
            if not c.passed:
                print(f"  {r.student}/{r.lesson}/{c.grade_id}: {c.message.splitlines()[0][:200] if c.message else ''}")
        for n in r.notes:
            print(f"  {r.student}/{r.lesson}: note: {n[:200]}")
    per_sub = [r.seconds for r in results if r.student == "solution"]
    summary = {"mode": MODE, "where": describe(), "isolation": sorted({r.isolation for r in results if r.isolation}),
               "students": len(klass), "submissions": len(subs), "slots": slots, "build_s": built,
               "grade_s": graded, "solution_seconds_by_lesson": {r.lesson: r.seconds for r in results
                                                                 if r.student == "solution"},
               "solution_total_s": sum(per_sub), "mismatches": bad, "leftover_processes": left,
               "gpu_only_students": [s.name for s in klass if s.gpu_only],
               "expected": {f"{k[0]}/{k[1]}": v for k, v in expected.items()}}
    report(results, out / "grade-demo.json", summary)
    print(f"\n{len(subs)} submissions of {len(klass)} students graded in {graded:.0f} s with {slots} slot(s) "
          f"({MODE}); one full solution submission: {sum(per_sub):.0f} s of grading")
    if left:
        print(f"FAIL: {len(left)} sandbox process(es) outlived their submission: {left}")
    for st, lesson, got, want in bad:
        print(f"FAIL: {st}/{lesson} scored {got:g}, expected {want:g}")
    if not bad and not left:
        print("demo class: every submission got its expected score")
    return 1 if bad or left else 0


def main_env_slots() -> int:
    return int(os.environ.get("GRADER_SLOTS", "2"))
