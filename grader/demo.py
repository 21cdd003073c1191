"""``python -m grader demo``: build the course, write the demo class, grade it, print the table, check every score.

On a machine with nbgrader the class goes through the instructor's workflow in a course folder of its own
(``grader/demo/course``: generate_assignment, collect, autograde with the sandbox, generate_feedback, export);
without it (the GPU machine may lack it) the same grader runs on the collected notebooks directly. Either way the
report is ``<out>/grade-demo.json`` and the exit status is 0 only if every submission got its expected score,
every other student's work was unaffected, and no sandbox process outlived its submission.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import time

from kernels.catalog import lesson_ids
from kernels.device import MODE, ON_GPU, describe

from . import democlass
from .collect import collect_folder
from .grade import Grader, Settings
from .layout import ROOT as _ROOT
from .run import grade_class, report, table

__all__ = ["run_demo", "course_lessons", "class_sources", "demo_class", "demo_settings", "expected_scores",
           "write_class", "collect_class"]


def read_source(path: pathlib.Path) -> dict:
    """An instructor notebook from a percent-format lesson: the course build's reader (jupytext) when installed,
    else the grader's own."""
    try:
        import jupytext  # noqa: F401
        import nbformat

        from .course import solution_notebook
    except ImportError:
        from .course import source_text
        from .percent import read_percent

        return read_percent(source_text(path))
    return json.loads(nbformat.writes(solution_notebook(path.stem, validate=False, source=path)))


def course_lessons(only: list[str] | None = None) -> dict[str, tuple[dict, dict]]:
    """lesson id -> (instructor source, student release), for every lesson in ``solutions/``."""
    from .percent import release

    out = {}
    for p in (_ROOT / "solutions" / f"{lesson}.py" for lesson in lesson_ids()):
        if only is not None and p.stem not in only:
            continue
        src = read_source(p)
        committed = _ROOT / "course" / f"{p.stem}.ipynb"
        rel = json.loads(committed.read_text()) if committed.exists() else release(src)
        out[p.stem] = (src, rel)
    return out


def _points(nb: dict) -> float:
    from .notebook import split

    return sum(g.points for g in split(nb)[1])


def _leftovers(uid_base: int, slots: int) -> list[int]:
    from .grade import UIDS_PER_SLOT
    from .sandbox import _pids_of

    return [p for u in range(uid_base, uid_base + UIDS_PER_SLOT * slots) for p in _pids_of(u)]


def _has_nbgrader() -> bool:
    try:
        import nbformat  # noqa: F401
        import nbgrader  # noqa: F401
    except ImportError:
        return False
    return True


def class_sources(real: dict[str, tuple[dict, dict]]) -> dict[str, dict]:
    """lesson id -> instructor source, for the course lessons ``real`` (``course_lessons``) and the demo's fixture."""
    return {**{k: v[0] for k, v in real.items()},
            democlass.LESSON: read_source(democlass.FIXTURE / f"{democlass.LESSON}.py")}


def demo_class(real: dict[str, tuple[dict, dict]], *, copies: int = 0, students: list[str] | None = None,
               term: bool = False, selection: str = "all") -> list:
    """The demo class (grader/democlass.py) for the course lessons ``real`` (``course_lessons``), each expected
    score without the points this machine cannot grade (speed without a GPU, a missing toolchain). ``term``: with
    the term scenarios' students; ``copies``: instead, that many copies of the full solution; ``students``: only
    these; ``selection``: a named part of the class (``democlass.SELECTIONS``: ``all``, or ``ci``, the part
    ``make test`` grades). A student of the term scenario (dave, and those handing in through the LMS download)
    brings the others of it along."""
    from . import policy

    points = {k: _points(v[0]) - policy.toolchain_points(v[0]) for k, v in real.items()}
    klass = democlass.students(points, {k: policy.speed_points(v[0]) for k, v in real.items()})
    if term and not copies:
        klass += democlass.term_students(points)
    klass = democlass.select(klass, selection)
    if copies:
        base = next(s for s in klass if s.name == "solution")
        klass = [dataclasses.replace(base, name=f"student{i + 1:02d}") for i in range(copies)]
    if students:
        chosen = set(students)
        term_group = {s.name for s in klass if s.lms} | ({"dave"} if any(s.lms for s in klass) else set())
        if chosen & term_group:  # the term scenario's collects (a second batch, the LMS zip) need all three
            chosen |= term_group
        klass = [s for s in klass if s.name in chosen]
    return klass


def expected_scores(klass: list) -> dict[tuple[str, str], float]:
    """(student, lesson) -> the score expected in this mode."""
    return {(st.name, lesson): e[MODE] for st in klass for lesson, e in st.expect.items()}


def demo_settings(seed: int | None = None) -> Settings:
    """The demo's grading settings (``seed``: a fixed master seed)."""
    # On a GPU a worker holds the CUDA context (about 1 GiB resident) and, while timing, lesson 01's 512 MiB input
    # before it moves to the device: 2 GiB stopped a correct copy kernel on the H200.
    return Settings(seed=seed, problem_timeout=60.0 if not ON_GPU else 15.0, cell_timeout=60.0,
                    memory_limit=(4 << 30) if ON_GPU else (2 << 30), lesson_paths=[str(democlass.FIXTURE)],
                    gpu_memory_fraction=0.3 if ON_GPU else None)


def write_class(root: pathlib.Path, folder: pathlib.Path, real: dict[str, tuple[dict, dict]], sources: dict,
                klass: list) -> dict:
    """The nbgrader course at ``root`` with its releases (the committed student notebooks for the course lessons),
    and the class's submissions in ``folder``; returns the releases."""
    from . import workflow

    releases = workflow.build_course(root, sources)
    releases.update({k: v[1] for k, v in real.items()})
    for lesson, nb in releases.items():
        (root / "release" / lesson / f"{lesson}.ipynb").write_text(json.dumps(nb, indent=1))
    democlass.write_class(folder, {k: (sources[k], releases[k]) for k in sources}, klass)
    return releases


def collect_class(root: pathlib.Path, folder: pathlib.Path, klass: list, sources: dict) -> None:
    """Collect ``folder`` into the course at ``root``, keeping only the lessons each student is expected in."""
    from . import workflow

    workflow.collect(root, folder)
    for st in klass:
        for lesson in sources:
            if lesson not in st.expect:
                shutil.rmtree(root / "submitted" / st.name / lesson, ignore_errors=True)


def run_demo(out: pathlib.Path, *, slots: int = 2, lessons: list[str] | None = None, students: list[str] | None = None,
             settings: Settings | None = None, direct: bool = False, reports: list[pathlib.Path] = (),
             copies: int = 0, selection: str = "all") -> int:
    """Grade the demo class into ``out`` (see the module's doc); ``selection``: a named part of the class
    (``democlass.select``; ``make test`` grades ``ci``); the other arguments as ``python -m grader demo``'s."""
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    real = course_lessons(lessons)
    sources = class_sources(real)
    from . import policy

    with_nbgrader = not direct and _has_nbgrader()
    klass = demo_class(real, copies=copies, students=students, term=with_nbgrader, selection=selection)
    settings = settings or demo_settings()
    failures: list = []
    term: dict = {}
    checks: list[str] = []  # the term scenarios' expectations that failed
    if with_nbgrader:
        from . import workflow

        root = out / "course"
        if root.exists():
            shutil.rmtree(root)
        folder = out / "incoming"
        releases = write_class(root, folder, real, sources, klass)
        if any(st.name == "dave" for st in klass):
            term = democlass.term_batches(out, {k: (sources[k], releases[k]) for k in sources}, folder, time.time())
            from .late import set_due

            set_due(f"sqlite:///{(root / 'gradebook.db').resolve()}", democlass.TERM_LESSON,
                    _utc(term["due"]))
        collect_class(root, folder, klass, sources)
        if term:
            checks += _term_collect(root, term)
        built = time.time() - t0
        results, failures, uid_base = workflow.autograde(root, slots=slots, settings=settings)
    else:
        releases = {**{k: v[1] for k, v in real.items()},
                    democlass.LESSON: democlass.release(sources[democlass.LESSON])}
        folder = out / "incoming"
        democlass.write_class(folder, {k: (sources[k], releases[k]) for k in sources}, klass)
        collected = collect_folder(folder, sources)
        subs = [collected[st.name][lesson] for st in klass for lesson in sources if lesson in st.expect]
        settings.warm_lessons = tuple(sorted({s.lesson for s in subs}))
        grader = Grader(settings)
        uid_base = grader.sandbox.uid_base
        built = time.time() - t0
        results = grade_class(grader, subs, sources, releases, slots=slots, speed_policy=policy.DEFAULT)
    graded = time.time() - t0 - built
    results = [r for r in results if any(r.student == st.name and r.lesson in st.expect for st in klass)]
    subs = results
    left = _leftovers(uid_base, slots)
    expected = expected_scores(klass)
    print(table(results, expected, mode=f"{MODE}; {describe()}; {policy.describe(policy.DEFAULT, MODE)}"))
    bad = [(r.student, r.lesson, r.score, expected[(r.student, r.lesson)]) for r in results
           if abs(r.score - expected[(r.student, r.lesson)]) > 1e-9]
    for r in results:
        for c in r.cells:
            if not c.passed:
                print(f"  {r.student}/{r.lesson}/{c.grade_id}: {c.gist(200)}")
        for n in r.notes:
            print(f"  {r.student}/{r.lesson}: note: {n[:200]}")
    first = klass[0].name if copies else "solution"
    full = [r for r in results if r.student == first]  # one complete submission, lesson by lesson
    full_s = sum(r.seconds for r in full)
    phases: dict[str, float] = {}
    for r in full:
        for k, v in r.phases.items():
            phases[k] = phases.get(k, 0.0) + v
    summary = {"mode": MODE, "nbgrader": with_nbgrader, "where": describe(),
               "isolation": sorted({r.isolation for r in results if r.isolation}),
               "selection": selection, "students": len(klass), "submissions": len(subs), "slots": slots,
               "build_s": built, "warm_s": Grader.last_warm_s,
               "grade_s": graded, "solution_seconds_by_lesson": {r.lesson: r.seconds for r in full},
               "solution_total_s": full_s, "solution_phases_s": phases, "mismatches": bad,
               "leftover_processes": left,
               "gpu_only_students": [s.name for s in klass if s.gpu_only],
               "expected": {f"{k[0]}/{k[1]}": v for k, v in expected.items()}}

    def write() -> None:
        report(results, out / "grade-demo.json", summary)
        for d in reports:
            d.mkdir(parents=True, exist_ok=True)
            shutil.copy(out / "grade-demo.json", d / "grade-demo.json")

    if with_nbgrader:
        from . import workflow

        # the scores first: a run cut short in nbgrader's steps (minutes for a class) still leaves its report
        summary["nbgrader"] = "not finished"
        write()

        fb = workflow.feedback(root)
        csv = workflow.export(root, out / "grades.csv")
        book = workflow.gradebook_scores(root)
        differ = [(k, v, book.get(k)) for k, v in ((( r.student, r.lesson), r.score) for r in results)
                  if book.get(k) is None or abs(book[k] - v) > 1e-9]
        html = sorted(str(p.relative_to(root)) for p in (root / "feedback").rglob("*.html"))
        leaks = [h for h in html if "BEGIN HIDDEN TESTS" in (root / h).read_text(errors="replace")]
        if leaks:
            failures = failures + [("feedback", "", f"hidden tests' source in {leaks[:3]}")]
        summary.update(nbgrader={"autograde_failures": failures, "feedback_failures": fb, "csv": str(csv),
                                 "feedback_html": len(html), "gradebook_differs": differ})
        print(f"nbgrader: gradebook recorded {len(book)} submissions, {len(html)} feedback pages, CSV {csv.name}")
        for f in failures + fb:
            print(f"FAIL: nbgrader step failed for {f[0]}/{f[1]}: {f[2][-300:]}")
        for k, v, b in differ:
            print(f"FAIL: gradebook has {b} for {k[0]}/{k[1]}, the grader gave {v:g}")
        if term:
            checks += _term_grades(root, term, results)
            checks += _term_regrade(root, out, settings, slots)
            summary["term"] = {"checks_failed": checks, "due": _utc(term["due"]).isoformat()}
        for c in checks:
            print(f"FAIL: {c}")
        if failures or fb or differ or checks:
            bad = bad + [("nbgrader", "", 0, 0)]
    write()
    print(f"\n{len(subs)} submissions of {len(klass)} students graded in {graded:.0f} s with {slots} slot(s) "
          f"({MODE}); one full solution submission: {full_s:.0f} s of grading ("
          + ", ".join(f"{k} {v:.0f} s" for k, v in sorted(phases.items())) + ")")
    if left:
        print(f"FAIL: {len(left)} sandbox process(es) outlived their submission: {left}")
    for st, lesson, got, want in bad:
        print(f"FAIL: {st}/{lesson} scored {got:g}, expected {want:g}")
    if not bad and not left:
        print("demo class: every submission got its expected score")
    return 1 if bad or left else 0


def _utc(t: float):
    import datetime

    return datetime.datetime.fromtimestamp(int(t), datetime.timezone.utc).replace(tzinfo=None)


def _term_collect(root: pathlib.Path, term: dict) -> list[str]:
    """The second batch and the Canvas zip of the term scenarios (grader/democlass.py: term_batches), collected; what
    went other than expected."""
    from . import workflow

    bad = []
    got = workflow.collect(root, term["second"])
    status = got["dave"][democlass.LESSON].status
    if not status.startswith("replaced"):
        bad.append(f"dave's second batch: {democlass.LESSON} {status}, expected replaced")
    kept = root / "submitted" / "dave" / democlass.TERM_LESSON / f"{democlass.TERM_LESSON}.ipynb"
    if not kept.exists():
        bad.append("dave's 00_setup from the first batch was lost by the second")
    print(f"second batch: dave/{democlass.LESSON} {status}; dave/{democlass.TERM_LESSON} "
          f"{'kept' if kept.exists() else 'LOST'}")
    got, skipped = workflow.collect_lms(root, term["zip"], roster=term["roster"])
    for s in skipped:
        print(f"Canvas zip: skipped {s.name}: {s.reason}")
    why = {s.name: s.reason for s in skipped}
    for name, want in term["skipped"].items():
        if want not in why.get(name, ""):
            bad.append(f"Canvas zip: {name} should be skipped ({want}), got {why.get(name)!r}")
    if set(got) != {"alice", "lucy"}:
        bad.append(f"Canvas zip: collected {sorted(got)}, expected alice and lucy")
    return bad


def _term_grades(root: pathlib.Path, term: dict, results) -> list[str]:
    """Late penalties in the gradebook (only lucy's), flags on the instructor's source, no phantom student."""
    from nbgrader.api import Gradebook

    bad = []
    by = {(r.student, r.lesson): r for r in results}
    with Gradebook(f"sqlite:///{(root / 'gradebook.db').resolve()}") as gb:
        for r in results:
            try:
                sub = gb.find_submission(r.lesson, r.student)
            except Exception:
                continue
            want = (term["late_percent"] / 100 * r.score) if (r.student, r.lesson) in term["penalties"] else 0.0
            if abs((sub.late_submission_penalty or 0.0) - want) > 1e-6:
                bad.append(f"late penalty of {r.student}/{r.lesson}: {sub.late_submission_penalty}, expected {want:g}")
        if any(s.id == "phantom" for s in gb.students):
            bad.append("the phantom Canvas student (not on the roster) reached the gradebook")
    sol = by.get(("solution", democlass.TERM_LESSON))
    if sol is not None and not any(n.startswith("flagged") for n in sol.notes):
        bad.append("the instructor's source handed in as solution/00_setup was not flagged")
    rel = by.get(("release", democlass.TERM_LESSON))
    if rel is not None and any(n.startswith("flagged") for n in rel.notes):
        bad.append("the untouched student notebook release/00_setup was flagged")
    late = by.get(("lucy", democlass.TERM_LESSON))
    print(f"due date {_utc(term['due']):%Y-%m-%d %H:%M} UTC for {democlass.TERM_LESSON}; lucy handed in 2 h late: "
          f"{late.score if late else '?'} points less {term['late_percent']:g}% in the gradebook")
    return bad


def _term_regrade(root: pathlib.Path, out: pathlib.Path, settings, slots: int) -> list[str]:
    """Grade one unchanged notebook again (``redo``: a run would otherwise leave it as recorded): the term's seed
    makes it reproducible, so nothing may change; the class CSV has the roster's names and the late penalty."""
    import csv

    from . import workflow

    bad = []
    seed = workflow.last_run.get("seed")
    # the untouched notebook: its stubs fail in a second, so the regrade costs nothing next to the demo
    regraded, _, _ = workflow.autograde(root, lessons=[democlass.TERM_LESSON], students=["release"], slots=1,
                                        settings=settings, progress=False, redo=True)
    again = workflow.last_run
    print(f"regrade of release/{democlass.TERM_LESSON} with the term's seed {again['seed']}: "
          + ("; ".join(again["changes"]) or "nothing changed"))
    if [(r.student, r.lesson) for r in regraded] != [("release", democlass.TERM_LESSON)]:
        bad.append(f"the regrade of release/{democlass.TERM_LESSON} graded {[(r.student, r.lesson) for r in regraded]}")
    if again["seed"] != seed or again["changes"]:
        bad.append(f"a regrade with the term's seed changed something: {again['changes']} (seed {seed} -> "
                   f"{again['seed']})")
    path = workflow.export_class(root, out / "class.csv")
    rows = {r["student"]: r for r in csv.DictReader(path.open())}
    lucy = rows.get("lucy", {})
    if lucy.get("name") != "Jones Lucy" or lucy.get(f"{democlass.TERM_LESSON} late penalty") in (None, "0"):
        bad.append(f"class CSV: lucy's row lacks her roster name or late penalty: {lucy}")
    print(f"class CSV {path.name}: {len(rows)} students, lucy {lucy.get(democlass.TERM_LESSON)} "
          f"(late penalty {lucy.get(f'{democlass.TERM_LESSON} late penalty')})")
    return bad


def main_env_slots() -> int:
    return int(os.environ.get("GRADER_SLOTS", "2"))
