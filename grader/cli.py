"""``python -m grader <command>``: collect, due, remove-student, readmit, autograde, feedback, export, report,
lint, demo, redteam.

The instructor's workflow, one command per step, over the nbgrader course folder ``grader/`` (``--course`` for
another; ``grader/GUIDE.md`` walks through a term), once the course build (``python -m grader.course``, ``make
course``) has made the student notebooks from ``solutions/``: ``collect`` a folder of submissions
(``<dir>/<student>/*.ipynb``) or an LMS download (Canvas, Moodle, Blackboard, Gradescope; ``--roster``), never
losing a collected notebook; ``due`` dates and extensions; ``autograde`` in the sandbox (on the GPU when there is
one, in the interpreter otherwise, under ``--speed-policy``) with the term's seed; ``feedback`` (HTML per student);
``export`` (the class CSV); ``report`` (the term's table). ``remove-student`` takes a student out, and collect
skips them until ``readmit``; ``lint`` checks that every graded cell of every lesson is gradable.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time
import zipfile

from .layout import ROOT as _ROOT
from .layout import scripts_on_path


def _course(args, *, graded: bool = False) -> pathlib.Path:
    """The course folder (``--course``, else grader/); a ValueError, which the command prints, where it holds no
    built course (``graded``: for the commands that read grades only, where nothing was ever graded)."""
    root = pathlib.Path(args.course).resolve() if args.course else _ROOT / "grader"
    if graded and not ((root / "gradebook.db").exists() or (root / "reports").is_dir()):
        raise ValueError(f"nothing graded in {root} (no gradebook.db, no reports/)"
                         + ("; check --course" if args.course else ""))
    if not graded and not (root / "source").is_dir():
        raise ValueError(f"no course in {root} (no source/ folder): build it first (make course)"
                         + (", or check --course" if args.course else ""))
    return root


def _lessons(root: pathlib.Path, names: list[str] | None) -> list[str] | None:
    """The course's lessons that ``names`` name, each an id (``00_setup``), its number (``00``) or its notebook's
    name; None: every lesson. A name the course does not have is a ValueError listing the ones it has, never a
    run that silently grades nothing."""
    if not names:
        return None
    from .workflow import lesson_names

    known = lesson_names(root)
    out = []
    for name in names:
        stem = name.removesuffix(".ipynb")
        hits = [k for k in known if k == stem or k.split("_", 1)[0] == stem]
        if len(hits) != 1:
            raise ValueError(f"no lesson {name!r} in {root / 'source'}: the course's lessons are "
                             + (", ".join(known) if known else "none yet (make course)"))
        out.append(hits[0])
    return list(dict.fromkeys(out))


def _how(root: pathlib.Path, make: str, command: str) -> str:
    """How to run a step on the course ``root``: the make target on grader/, else the command with its --course
    (the Makefile's targets work on grader/ only)."""
    from . import workflow

    return make if workflow.default_course(root) else workflow.grader_command(root, command)


def _collected(root: pathlib.Path, names: list[str] | None) -> list[str] | None:
    """The students that ``names`` name, each one whose work collect left in ``root/submitted``; None: every
    student. A name nothing was collected for, or a course with nothing collected, is a ValueError (listing those
    collected), never a run that silently grades nothing."""
    sub = root / "submitted"
    collected = sorted(d.name for d in sub.iterdir() if d.is_dir()) if sub.is_dir() else []
    if not collected:
        raise ValueError(f"nothing collected in {sub}: collect the class's notebooks first ("
                         + _how(root, "make grade-collect SUBMISSIONS=dir or SUBMISSIONS=lms.zip",
                                "collect DIR_OR_ZIP") + ")")
    if not names:
        return None
    unknown = [name for name in names if name not in collected]
    if unknown:
        raise ValueError(f"nothing collected for {', '.join(map(repr, unknown))} in {sub}: the collected students "
                         "are " + ", ".join(collected))
    return list(dict.fromkeys(names))


def _above_zero(cast):
    """An argparse type: a number above 0 (``--slots 0`` would start no grading slot at all)."""
    def parse(text: str):
        value = cast(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text} is not above 0")
        return value

    parse.__name__ = cast.__name__  # argparse names the type in "invalid int value: 'x'"
    return parse


def _demo(args) -> int:
    import kernels  # noqa: F401  (decides GPU or interpreter first)
    from kernels.device import ON_GPU

    from .demo import run_demo

    if args.gpu and not ON_GPU:
        print("--gpu: no CUDA device here", file=sys.stderr)
        return 2
    work = pathlib.Path(args.work) if args.work else _ROOT / "grader" / "demo"
    reports = [pathlib.Path(p) for p in (args.report or [])]
    if ON_GPU and not reports:
        reports = [_ROOT / "results" / "gpu"] + ([pathlib.Path(os.environ["OUT"])] if os.environ.get("OUT") else [])
    return run_demo(work, slots=args.slots or (3 if ON_GPU else 2), lessons=args.lessons, students=args.students,
                    direct=args.direct, reports=reports, copies=args.class_of, selection=args.selection)


def _redteam(args) -> int:
    import kernels  # noqa: F401  (decides GPU or interpreter first)
    from kernels.device import ON_GPU

    from .redteam import run

    report = pathlib.Path(args.report) if args.report else (_ROOT / "results" / "gpu" / "redteam.json" if ON_GPU
                                                             else None)
    summary = run(only=args.students, report=report, slots=args.slots, progress=True)
    print(summary["table"])
    for m in summary["mismatches"]:
        print(f"MISMATCH {m['student']}/{m['lesson']}: {m['score']:g}, want {m['want']:g}: {m['messages'][:2]}")
    print(f"{len(summary['scores'])} submissions in {summary['seconds']:.0f} s; "
          f"{len(summary['mismatches'])} mismatch(es)" + (f"; report {report}" if report else ""))
    return 1 if summary["mismatches"] else 0


def _collect(args) -> int:
    from . import workflow

    root = _course(args)
    lessons = _lessons(root, args.lessons)
    source = pathlib.Path(args.source)
    roster = pathlib.Path(args.roster) if args.roster else None
    if not source.exists():
        print(f"collect: {source} does not exist", file=sys.stderr)
        return 2
    if roster is not None and not roster.is_file():
        print(f"collect: the roster {roster} does not exist", file=sys.stderr)
        return 2
    if source.is_file() and (source.suffix == ".ipynb" or not zipfile.is_zipfile(source)):
        print(f"collect: {source} is " + ("one notebook" if source.suffix == ".ipynb" else "not a zip file")
              + ": collect takes a folder with one folder per student (FOLDER/<student>/<lesson>.ipynb) or an LMS "
              "download (its zip, or the folder it unpacks to, with --lms)", file=sys.stderr)
        return 2
    if args.zip or args.lms or source.is_file():
        collected, skipped = workflow.collect_lms(root, source, roster=roster, lessons=lessons,
                                                  replace_newer=args.replace_newer)
    else:
        skipped = []
        collected = workflow.collect(root, source, lessons, roster=roster, skipped=skipped,
                                     replace_newer=args.replace_newer)
    for s in skipped:
        print(f"skipped {s.name}: {s.reason}")
    counts: dict[str, int] = {}
    others = sorted({lesson for subs in collected.values() for lesson, sub in subs.items()
                     if sub.status == "not collected" and sub.notebook is not None})
    for student, subs in collected.items():
        for lesson, sub in subs.items():
            if sub.status == "not collected":
                continue
            word = sub.status.split(" ", 1)[0]
            counts[word] = counts.get(word, 0) + 1
            notes = [n for n in sub.notes if n != "not submitted" and n not in sub.status]  # "kept" names them
            notes = f"; {'; '.join(notes)}" if notes else ""
            print(f"{student:>20} {lesson:<28} {sub.status}{notes}")
    kept = workflow.backup_dir(root)
    versions = kept.is_dir() and any(p.name != "removed" for p in kept.iterdir())  # removed/: remove-student's
    print("collected: " + (", ".join(f"{n} {w}" for w, n in sorted(counts.items())) or "nothing new")
          + (f"; earlier versions are kept under {kept}" if versions else "")
          + (f"; not collected, as --lessons asked: the batch's notebooks of {', '.join(others)}" if others else ""))
    _print_other_versions([(student, lesson, sub) for student, subs in collected.items()
                           for lesson, sub in subs.items() if sub.status != "not collected"])
    return 0


def _print_other_versions(subs) -> None:
    """The CHECK lines: each (student, lesson, submission or result) note naming a notebook handed in beside the
    graded one under a longer name, which may be the version the student meant."""
    from .collect import other_versions

    other = [f"{student}/{lesson}: {n}" for student, lesson, sub in subs for n in other_versions(sub)]
    if other:
        print(f"CHECK: {len(other)} notebook(s) named after a lesson but not graded, perhaps the one meant:")
        for line in other:
            print(f"  {line}")


def _due(args) -> int:
    from .late import configured_plugin, parse_date, set_due

    root = _course(args)
    lesson = _lessons(root, [args.lesson])[0]
    when = parse_date(args.date) if args.date else None
    if args.student and when is None:
        print("due --student needs a DATE", file=sys.stderr)
        return 2
    print(set_due(f"sqlite:///{(root / 'gradebook.db').resolve()}", lesson, when, args.student,
                  configured_plugin(root), known=_students(root) if args.student else None))
    return 0


def _each_student(args, act: str, nothing: str) -> int:
    """``workflow.<act>(root, student)`` for every student named, a line each: what it did, or ``nothing`` (and,
    where the name is another key of the roster, such as an LMS id or an e-mail address, whose id it is). Exit
    status 1 when some name did nothing, else 0."""
    from . import workflow
    from .lms import kept_roster

    root = _course(args)
    roster = kept_roster(root)
    status = 0
    for student in args.students:
        done = getattr(workflow, act)(root, student)
        sid = roster.find(student) if roster is not None and not done else None
        again = workflow.grader_command(root, f"{args.cmd} {sid}")
        hint = f"; on the roster {student} is {sid}: {again}" if sid not in (None, student) else ""
        print(f"{student}: " + ("; ".join(done) if done else nothing + hint))
        status = status or (0 if done else 1)  # a name that matched no one is a mistake a script should see
    return status


def _remove_student(args) -> int:
    return _each_student(args, "remove_student", "not in this course (nothing to do)")


def _readmit(args) -> int:
    return _each_student(args, "readmit", "was not removed (nothing to do)")


def _students(root: pathlib.Path) -> set[str]:
    """Who this course knows: a collected folder, a roster line or a gradebook entry."""
    from .lms import kept_roster

    known = {d.name for d in (root / "submitted").iterdir() if d.is_dir()} if (root / "submitted").is_dir() else set()
    roster = kept_roster(root)
    known |= set(roster.names) if roster is not None else set()
    if (root / "gradebook.db").exists():
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{(root / 'gradebook.db').resolve()}") as gb:
            known |= {s.id for s in gb.students}
    return known


def _autograde(args) -> int:
    root = _course(args)
    args.lessons = _lessons(root, args.lessons)
    args.students = _collected(root, args.students)
    if args.scheduler or args.cluster:  # on a Dask cluster (grader/distributed.py)
        from .distributed import main

        return main(args, root)
    import kernels  # noqa: F401
    from kernels.device import MODE, describe

    from . import policy, workflow
    from .grade import Settings
    from .run import report, table

    settings = Settings(seed=args.seed)
    if args.timeout:
        settings.problem_timeout = args.timeout
    t0 = time.time()
    results, failures, _ = workflow.autograde(root, lessons=args.lessons, students=args.students,
                                              slots=args.slots, settings=settings, speed_policy=args.speed_policy,
                                              new_seed=args.new_seed, redo=args.redo)
    run = workflow.last_run
    # the whole class, skipped ones as recorded: with STUDENTS= too, the other students' recorded results
    ran = {(r.student, r.lesson) for r in results} | set(run["skipped"])
    others = [(s.student, s.lesson) for s in workflow.submissions(root, args.lessons)
              if (s.student, s.lesson) not in ran] if args.students else []
    rows = workflow.class_results(root, results, run["skipped"] + others)
    print(table(rows, mode=f"{MODE}; {describe()}; {policy.describe(args.speed_policy, MODE)}"))
    print(run["seed_line"])
    report(rows, root / "reports" / "summary.json", {"mode": MODE, "where": describe(),
                                                     "seconds": time.time() - t0, "nbgrader_failures": failures,
                                                     "seed": run["seed"], "speed_policy": args.speed_policy,
                                                     "changes": run["changes"],
                                                     "graded": [f"{r.student}/{r.lesson}" for r in results],
                                                     "already_recorded": [f"{s}/{lsn}" for s, lsn in run["skipped"]]})
    for line in run["changes"]:
        print(f"  changed: {line}")
    from .classbook import gradebook_lines

    for line in gradebook_lines(root, rows):
        print(f"  {line}")
    for r in rows:  # the whole class: a flag stays on what was not graded again
        for n in r.notes:
            if n.startswith("flagged"):
                print(f"  {r.student}/{r.lesson}: {n}")
    from .leaderboard import from_results_dir, write

    write(from_results_dir(root), root / "reports")  # the speed-graded exercises' ranking (grader/README.md)
    for r in results:
        for c in r.cells:
            if not c.passed:
                print(f"  {r.student}/{r.lesson}/{c.grade_id}: {c.gist()}")
    for f in failures:
        print(f"nbgrader autograde failed for {f[0]}/{f[1]}: {_one_line(f[2])} (its log: "
              f"{_failure_log(root, f)})", file=sys.stderr)
    _print_other_versions([(r.student, r.lesson, r) for r in rows])  # skipped ones too: a later collect's note
    if run["skipped"]:
        print(workflow.skipped_line(len(run["skipped"])))
    print(f"graded {len(results)} notebook(s) in {time.time() - t0:.0f} s ({MODE})")
    return 1 if failures else 0


def _one_line(log: str) -> str:
    """The line of an nbgrader log that says what went wrong (not "see the above traceback")."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    useful = [ln for ln in lines if "see the above traceback" not in ln.lower() and not ln.startswith(("File ", "^"))]
    errors = [ln for ln in useful if "Error" in ln or "error" in ln] or useful
    return (errors[-1] if errors else "no reason given")[:300]


def _failure_log(root: pathlib.Path, failure) -> pathlib.Path:
    path = root / "reports" / "nbgrader-failures" / f"{failure[0]}-{failure[1]}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(failure[2])
    return path


def _note_not_graded(root: pathlib.Path) -> None:
    """Say on stderr which collected notebooks no run has graded yet: what feedback, export and report show for
    them is an earlier version's result (or none), until autograde grades them."""
    from . import workflow

    todo = [f"{s.student}/{s.lesson}" for s in workflow.not_graded(root)]
    if todo:
        more = f" and {len(todo) - 10} more" if len(todo) > 10 else ""
        grade = _how(root, "make grade-autograde", "autograde")
        print(f"note: {len(todo)} collected notebook(s) not graded since they were collected ({', '.join(todo[:10])}"
              f"{more}): this shows their earlier result, or none; {grade} grades them", file=sys.stderr)


def _feedback(args) -> int:
    from . import workflow
    from .classbook import load_results

    root = _course(args)
    if not load_results(root):
        raise ValueError(f"nothing graded in {root}: feedback shows autograde's results, so grade first ("
                         + _how(root, "make grade-autograde", "autograde") + ")")
    failures = workflow.feedback(root)
    for f in failures:
        print(f"feedback failed for {f[0]}/{f[1]}:\n{f[2]}", file=sys.stderr)
    print(f"feedback HTML under {root / 'feedback'}")
    _note_not_graded(root)
    return 1 if failures else 0


def _export(args) -> int:
    from . import workflow

    to = pathlib.Path(args.to)
    if to.is_dir():
        raise ValueError(f"{to} is a folder: name the CSV file to write, such as {to / 'grades.csv'}")
    if not to.parent.is_dir():
        raise ValueError(f"cannot write {to}: the folder {to.parent} does not exist")
    root = _course(args, graded=True)
    path = (workflow.export if args.nbgrader else workflow.export_class)(root, to)
    print(f"grades written to {path}")
    _note_not_graded(root)
    return 0


def _report(args) -> int:
    from . import workflow
    from .classbook import gradebook_lines, load_results
    from .run import table

    root = _course(args, graded=True)
    results = load_results(root)
    if not results:
        print(f"nothing graded yet in {root}", file=sys.stderr)
        return 1
    last = root / "reports" / "summary.json"
    data = json.loads(last.read_text()) if last.exists() else {}
    rows = workflow.class_results(root, [], list(results), earlier=results)  # with what a later collect noted
    print(table(rows, mode=f"every submission graded this term (latest result of each); last run: "
                f"{data.get('mode', '?')}, speed policy {data.get('speed_policy', '?')}, seed {data.get('seed', '?')}"))
    for line in gradebook_lines(root, rows):
        print(f"  {line}")
    _print_other_versions([(r.student, r.lesson, r) for r in rows])
    _note_not_graded(root)
    return 0


def _lint(args) -> int:
    import kernels  # noqa: F401

    from .lint import lint

    problems = lint(args.lessons)
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grader", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    ap.add_argument("--course", help="nbgrader course folder (default: grader/)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("collect", help="copy submissions into submitted/, defensively")
    p.add_argument("source", help="a folder <student>/*.ipynb, or with --zip an LMS download")
    p.add_argument("--zip", action="store_true", help="source is an LMS download (a .zip always is)")
    p.add_argument("--lms", action="store_true",
                   help="source is an unpacked LMS download (Canvas, Moodle, Blackboard, Gradescope, nbgrader names)")
    p.add_argument("--roster", help="CSV from the LMS mapping its ids to students (kept for later collects); "
                   "files of students not on it are refused")
    p.add_argument("--lessons", nargs="*", help="lessons to collect (default: those anyone submitted)")
    p.add_argument("--replace-newer", action="store_true",
                   help="this batch's notebooks replace collected ones even where those are newer (the one meant was "
                        "an earlier copy); the replaced ones are kept under backups/")
    p.set_defaults(fn=_collect)
    p = sub.add_parser("due", help="set a lesson's due date (or one student's extension) in the gradebook")
    p.add_argument("lesson")
    p.add_argument("date", nargs="?", help="2026-12-01 23:59 (UTC unless a zone is given); omit to clear it")
    p.add_argument("--student", help="give this student until DATE (nbgrader's extension)")
    p.set_defaults(fn=_due)
    p = sub.add_parser("remove-student", help="take a student out: gradebook entry removed, folders moved to "
                       "backups/removed/")
    p.add_argument("students", nargs="+")
    p.set_defaults(fn=_remove_student)
    p = sub.add_parser("readmit", help="take a removed student back: the next collect collects them again")
    p.add_argument("students", nargs="+")
    p.set_defaults(fn=_readmit)
    p = sub.add_parser("autograde", help="grade collected submissions in the sandbox and record them")
    p.add_argument("--lessons", nargs="*")
    p.add_argument("--students", nargs="*")
    p.add_argument("--slots", type=_above_zero(int), default=2, help="submissions graded at once")
    p.add_argument("--seed", type=int, help="master seed (default: the term's, drawn at the first autograde and "
                   "recorded in reports/seed.json); one other than the term's grades every notebook again")
    p.add_argument("--new-seed", action="store_true", help="draw a new term seed: every notebook gets new inputs, "
                   "so every one is graded again")
    p.add_argument("--redo", action="store_true", help="grade again what an earlier run graded and recorded (by "
                   "default only notebooks new or changed since, or graded with another seed, mode, speed "
                   "policy or version of their lesson, are graded): after an update of the grader itself")
    p.add_argument("--timeout", type=_above_zero(float), help="seconds per check (default 180 interpreter, 60 GPU)")
    p.add_argument("--speed-policy", choices=("zero", "exclude", "award"), default="zero",
                   help="without a GPU, speed requirements cannot be timed: score them 0 (default: 'needs a GPU'), "
                   "leave them out of the totals, or award them")
    g = p.add_argument_group("on a Dask cluster (grader/README.md)")
    g.add_argument("--scheduler", metavar="ADDRESS", help="grade on the Dask scheduler at ADDRESS (tcp://host:8786)")
    g.add_argument("--cluster", choices=["local-gpus", "slurm", "local"],
                   help="grade on a cluster made here: one worker per GPU of this host (dask-cuda), Slurm jobs "
                        "(dask-jobqueue, --cluster-config), or --workers local worker processes")
    g.add_argument("--cluster-config", metavar="FILE", help="--cluster slurm: SLURMCluster options (YAML)")
    g.add_argument("--workers", type=_above_zero(int),
                   help="workers (local: processes, default 2; local-gpus: the first N GPUs; slurm: jobs, default the "
                        "config's)")
    g.add_argument("--slots-per-worker", type=_above_zero(int),
                   help="submissions a worker grades at once (default 3 on a GPU, 1 in the interpreter)")
    g.add_argument("--connect-timeout", type=_above_zero(float), default=20.0,
                   help="seconds to reach the scheduler (20)")
    p.set_defaults(fn=_autograde)
    p = sub.add_parser("feedback", help="nbgrader generate_feedback for every autograded notebook")
    p.set_defaults(fn=_feedback)
    p = sub.add_parser("export", help="grades as CSV")
    p.add_argument("--to", default="grades.csv")
    p.add_argument("--nbgrader", action="store_true",
                   help="nbgrader's own CSV (a row per student and lesson) instead of the class CSV")
    p.set_defaults(fn=_export)
    p = sub.add_parser("report", help="print the term's table: every submission's latest result")
    p.set_defaults(fn=_report)
    p = sub.add_parser("lint", help="check that every graded cell of the lessons can be graded")
    p.add_argument("lessons", nargs="*")
    p.set_defaults(fn=_lint)
    d = sub.add_parser("demo", help="build the course, grade the demo class, check every expected score")
    d.add_argument("--gpu", action="store_true", help="require a GPU (fail if there is none)")
    d.add_argument("--work", help="the demo's course folder and report (default: grader/demo)")
    d.add_argument("--report", nargs="*", help="also copy grade-demo.json here (on a GPU: results/gpu and $OUT)")
    d.add_argument("--slots", type=_above_zero(int), default=None, help="submissions graded at once (2; 3 on a GPU)")
    d.add_argument("--lessons", nargs="*", help="course lessons to include (default: all)")
    d.add_argument("--students", nargs="*", help="only these demo students")
    d.add_argument("--selection", default="all", choices=("all", "ci"),
                   help="a named part of the class (grader/democlass.py: select; make test grades ci)")
    d.add_argument("--direct", action="store_true", help="grade without nbgrader (no gradebook, feedback, CSV)")
    d.add_argument("--class-of", type=int, default=0, metavar="N",
                   help="instead: N students who all submit every lesson's solution (to time a class)")
    d.set_defaults(fn=_demo)
    r = sub.add_parser("redteam", help="grade the red-team class (crafted attacks on lessons 00 and 02)")
    r.add_argument("--students", nargs="*", help="only these attacks")
    r.add_argument("--slots", type=_above_zero(int), default=2)
    r.add_argument("--report", help="write the JSON report here (on a GPU: results/gpu/redteam.json)")
    r.set_defaults(fn=_redteam)
    args = ap.parse_args(argv)
    from .grade import SetupError

    scripts_on_path()  # nbgrader runs alembic by name
    try:
        return args.fn(args)
    except (SetupError, ValueError, FileNotFoundError) as e:
        print(f"grader: {e}", file=sys.stderr)
        return 2
