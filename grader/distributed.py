"""Grading a class on Dask distributed: every GPU of a host, a Slurm cluster, or any Dask scheduler.

``python -m grader autograde --scheduler ADDRESS`` (a running scheduler), ``--cluster local-gpus`` (dask-cuda's
``LocalCUDACluster``: one worker per GPU of this host), ``--cluster slurm --cluster-config FILE``
(dask-jobqueue's ``SLURMCluster``) or ``--cluster local --workers N`` (worker processes on this host, each
pinned to one GPU when there are GPUs). Each collected (submission, lesson) is one Dask task; on GPU workers it
needs a share of the worker resource ``GPU`` (one per worker: a worker's ``nthreads`` are its slots on its GPU,
and a task takes ``1/nthreads`` of it), under the interpreter one of the worker's threads. Inside a task the
same sandbox grades as on one machine: a worker process builds one :class:`grader.grade.Grader` per run (its own
sandbox uid range, the run's master seed, so a seed gives the same cases wherever a submission lands) and hands
its slots to its threads.

The results come back to this process, which alone writes ``reports/``, ``gradebook.db``, feedback and CSV
(:func:`grader.workflow.record`): the workers never touch the course folder. Faults:

- a worker (or node) lost mid-task: the scheduler runs the task again on another worker; lost a second time it
  is an **infrastructure failure**, named in the summary and left unrecorded (never a 0, the submission stays
  where ``collect`` put it). Clusters made here set ``distributed.scheduler.allowed-failures`` to 1 (one
  retry); a scheduler started elsewhere keeps its own setting (Dask's default is 3), reported in the summary.
- re-running grades only what no earlier run recorded for the same version of the submission, graded the same
  way (:func:`grader.workflow.to_grade`, as on one machine; ``--redo``: everything again).
- the scheduler unreachable, no worker, workers that cannot grade (no ``GPU`` resource on GPU workers, workers
  of different modes, a sandbox that will not start): a clear error before anything is written.

Student code still never leaves its sandbox; Dask's own messages (pickle) pass only between the instructor's
process and the instructor's workers.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import pathlib
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable

from .grade import SetupError

try:  # the worker plugin below must subclass Dask's when Dask is there; this module imports without it
    from distributed.diagnostics.plugin import WorkerPlugin as _PluginBase
except ImportError:  # pragma: no cover - exercised where dask is not installed
    _PluginBase = object

__all__ = ["CLUSTERS", "Cluster", "Outcome", "connect", "plan", "autograde", "slurm_options", "main"]

CLUSTERS = ("local-gpus", "slurm", "local")
INSTALL = "pip install -e '.[cluster]'"


def _distributed():
    try:
        import distributed
    except ImportError:
        raise SetupError("grading on a Dask cluster needs dask.distributed, which is not installed here: "
                         f"{INSTALL} (or `pip install 'dask[distributed]'`); nothing was graded") from None
    return distributed


# ---- the worker side ---------------------------------------------------------------------------------------

_RUNS: dict[str, dict] = {}  # run id -> the lessons and settings of one grading run, put here by _RunPlugin
_GRADERS: dict[str, tuple] = {}  # run id -> (Grader, queue of free slots) of this worker process
_LOCK = threading.Lock()


class _RunPlugin(_PluginBase):
    """Gives every worker (those that join later too) the run's instructor notebooks, releases and settings,
    once, instead of with every task."""

    def __init__(self, run: str, sources: dict, releases: dict, settings: dict):
        self.run, self.sources, self.releases, self.settings = run, sources, releases, settings

    def setup(self, worker=None):
        _RUNS[self.run] = {"sources": self.sources, "releases": self.releases, "settings": self.settings}

    def teardown(self, worker=None):
        _RUNS.pop(self.run, None)
        with _LOCK:
            got = _GRADERS.pop(self.run, None)
        if got is not None:
            _release(*got)


def _release(grader, free) -> None:
    """A run's end on this worker: no process of its sandbox uids left, its uid range and folder given back (a
    worker that serves many runs must not run out of uid ranges)."""
    import shutil

    from .sandbox import sweep

    cfg = grader.sandbox
    cfg.close()  # its bubblewrap templates end with the run (each holds torch and Triton imported)
    from .grade import UIDS_PER_SLOT

    for uid in range(cfg.uid_base, cfg.uid_base + UIDS_PER_SLOT * max(1, free.maxsize or free.qsize())):
        sweep(uid)
    if cfg._lock is not None:
        os.close(cfg._lock)
        cfg._lock = None
    shutil.rmtree(cfg.root, ignore_errors=True)


def _worker_grader(run: str, slots: int):
    """This worker process's Grader for ``run`` (made on its first task) and its free slots."""
    with _LOCK:
        got = _GRADERS.get(run)
        if got is None:
            from .grade import Grader, Settings

            if run not in _RUNS:
                raise SetupError(f"this worker never received grading run {run}'s lessons")
            grader = Grader(Settings(**_RUNS[run]["settings"]))
            free: queue.Queue[int] = queue.Queue(maxsize=max(1, slots))
            for s in range(max(1, slots)):
                free.put(s)
            got = _GRADERS[run] = (grader, free)
    return got


def _grade_task(run: str, student: str, lesson: str, notebook: dict):
    """One (submission, lesson), graded in this worker's sandbox; returns (NotebookResult, worker address, the
    worker's clock when it finished)."""
    from distributed import get_worker

    from . import run as _run  # noqa: F401  (on Python 3.11 its import makes threads parse one at a time)
    from .notebook import split
    from .results import CellResult, NotebookResult

    # A nanny's worker is a daemonic process, and multiprocessing refuses children to those; the sandbox's
    # workers are not left behind by clearing the flag: each asks the kernel for SIGKILL when its parent dies.
    multiprocessing.current_process()._config["daemon"] = False
    worker = get_worker()
    grader, free = _worker_grader(run, worker.state.nthreads)
    lessons = _RUNS[run]
    source, release = lessons["sources"][lesson], lessons["releases"].get(lesson)
    slot = free.get()
    try:
        r = grader.grade(student, lesson, notebook, source, release, slot=slot)
    except SetupError:
        raise
    except Exception as e:  # a grader bug must not abort the batch; it is reported, as on one machine
        r = NotebookResult(student, lesson, [CellResult(g.grade_id, g.points, 0.0, error=f"grader error: {e!r}")
                                             for g in split(source)[1]])
    finally:
        free.put(slot)
    return r, worker.address, time.time()


def _probe() -> dict:
    """What a worker is: its mode, machine and GPUs (run on every worker before anything is graded)."""
    from kernels import device  # decides GPU or interpreter first

    return {"mode": device.MODE, "where": device.describe(),
            "gpus": device.torch.cuda.device_count() if device.ON_GPU else 0,
            "pid": os.getpid(), "host": os.uname().nodename}


# ---- the instructor's side ---------------------------------------------------------------------------------

@dataclasses.dataclass
class Cluster:
    """A client on a scheduler, and what closes the cluster made for it (nothing for ``--scheduler``)."""

    client: object
    what: str
    closer: Callable[[], None] | None = None

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            if self.closer:
                self.closer()


def slurm_options(path: pathlib.Path) -> tuple[dict, int]:
    """``SLURMCluster`` keyword arguments and the number of jobs from a YAML (or JSON) file; see the README."""
    import yaml

    try:
        opts = yaml.safe_load(pathlib.Path(path).read_text()) or {}
    except OSError as e:
        raise SetupError(f"--cluster-config {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise SetupError(f"--cluster-config {path} is not valid YAML: {e}") from None
    if not isinstance(opts, dict):
        raise SetupError(f"--cluster-config {path} must be a mapping of SLURMCluster options")
    opts = dict(opts)
    jobs = opts.pop("jobs", 1)
    if not isinstance(jobs, int) or jobs < 1:
        raise SetupError(f"--cluster-config {path}: jobs must be a positive whole number, not {jobs!r}")
    gpus = opts.pop("gpus_per_job", 1)
    extra = list(opts.get("worker_extra_args") or [])
    if gpus and "--resources" not in extra:
        extra += ["--resources", f"GPU={gpus}"]
    opts["worker_extra_args"] = extra
    return opts, jobs


def connect(scheduler: str | None = None, cluster: str | None = None, *, config: str | None = None,
            workers: int | None = None, slots: int | None = None, timeout: float = 20.0) -> Cluster:
    """A client on ``scheduler`` (an address), or on a cluster made here (``cluster`` in :data:`CLUSTERS`)."""
    distributed = _distributed()
    import dask

    if bool(scheduler) == bool(cluster):
        raise SetupError("give either a scheduler address or a cluster kind, not both")
    if scheduler:
        try:
            client = distributed.Client(scheduler, timeout=timeout)
        except (OSError, TimeoutError) as e:
            raise SetupError(f"cannot reach the Dask scheduler at {scheduler} within {timeout:g} s ({e}); "
                             "nothing was graded or written") from None
        return Cluster(client, f"scheduler {scheduler}")
    if cluster not in CLUSTERS:
        raise SetupError(f"unknown cluster {cluster!r}: one of {', '.join(CLUSTERS)}")
    if cluster == "slurm" and not config:
        raise SetupError("--cluster slurm needs --cluster-config FILE (SLURMCluster options; see grader/README.md)")
    # one retry for a task whose worker was lost; nannies whose workers may start the sandbox's processes
    dask.config.set({"distributed.scheduler.allowed-failures": 1, "distributed.worker.daemon": False})
    if cluster == "local-gpus":
        try:
            from dask_cuda import LocalCUDACluster
        except Exception as e:  # not installed, or its CUDA bindings do not load here
            raise SetupError(f"--cluster local-gpus needs dask-cuda, which is not installed here ({e}): "
                             "pip install -e '.[gpus]' (or dask-cuda), or use --cluster local --workers N, one "
                             "worker per GPU as well; nothing was graded") from None
        c = LocalCUDACluster(n_workers=workers, threads_per_worker=slots or 3, resources={"GPU": 1},
                             memory_limit=0, dashboard_address=None)
        what = f"LocalCUDACluster, {len(c.workers)} GPU worker(s)"
    elif cluster == "slurm":
        opts, jobs = slurm_options(pathlib.Path(config))
        try:
            from dask_jobqueue import SLURMCluster
        except ImportError as e:
            raise SetupError(f"--cluster slurm needs dask-jobqueue, which is not installed here ({e}): "
                             f"{INSTALL}; nothing was graded") from None
        try:
            c = SLURMCluster(**opts)
        except TypeError as e:
            raise SetupError(f"--cluster-config {config}: {e}") from None
        c.scale(jobs=workers or jobs)
        what = f"SLURMCluster, {workers or jobs} job(s)"
    else:
        c = _local_cluster(workers or 2, slots)
        what = f"local cluster, {len(c.workers)} worker process(es)"
    client = distributed.Client(c)
    return Cluster(client, what, c.close)


def _local_cluster(n: int, slots: int | None):
    """``n`` worker processes on this host; with GPUs, each sees one (``CUDA_VISIBLE_DEVICES``) and offers the
    ``GPU`` resource, as dask-cuda lays them out."""
    import torch
    from distributed import Nanny, Scheduler, SpecCluster

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus and n > gpus:
        raise SetupError(f"--workers {n}: this host has {gpus} GPU(s), one worker each")
    workers = {}
    for i in range(n):
        opts = {"nthreads": slots or (3 if gpus else 1), "memory_limit": 0, "host": "127.0.0.1"}
        if gpus:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(gpus)))).split(",")
            opts.update(resources={"GPU": 1}, env={"CUDA_VISIBLE_DEVICES": visible[i]})
        workers[f"grader-{i}"] = {"cls": Nanny, "options": opts}
    return SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": None,
                                                                                   "host": "127.0.0.1"}})


@dataclasses.dataclass
class Outcome:
    """What a distributed run did: the results recorded, nbgrader's failures, infrastructure failures
    (student, lesson, reason) that were not recorded, what an earlier run had already recorded, and the workers."""

    results: list
    failures: list
    infrastructure: list
    skipped: list
    workers: dict
    mode: str
    where: list
    retries: int | None
    seconds: float
    placement: dict = dataclasses.field(default_factory=dict)  # (student, lesson) -> the worker that graded it
    # (student, lesson) -> seconds from submitting the tasks to the worker finishing it (the worker's clock: the
    # grading's makespan on one host, apart from the recording here)
    finished: dict = dataclasses.field(default_factory=dict)
    seed: int | None = None
    seed_line: str = ""
    changes: list = dataclasses.field(default_factory=list)  # what this regrade changed (reports/history.jsonl)


def _workers(client, timeout: float) -> dict:
    try:
        client.wait_for_workers(1, timeout=timeout)
    except (TimeoutError, OSError):
        raise SetupError(f"the Dask scheduler has no worker after {timeout:g} s; start workers "
                         "(`dask worker ADDRESS`, with `--resources GPU=1` on each GPU) and run again; nothing "
                         "was graded or written") from None
    try:
        info = client.run(_probe)
    except Exception as e:
        raise SetupError(f"a Dask worker cannot import the grader ({type(e).__name__}: {e}); install the "
                         "workbook (pip install -e .) in the workers' Python environment; nothing was graded") from None
    workers = client.scheduler_info()["workers"]
    for addr, d in info.items():
        d["resources"] = (workers.get(addr) or {}).get("resources", {})
        d["nthreads"] = (workers.get(addr) or {}).get("nthreads", 1)
    return info


def plan(info: dict) -> tuple[str, dict | None]:
    """The mode the workers grade in and the resources each task needs, from what :func:`_probe` and the scheduler
    said of every worker (address -> mode, resources, nthreads); refuses workers that cannot grade one class."""
    modes = sorted({d["mode"] for d in info.values()})
    if len(modes) > 1:
        raise SetupError("the Dask workers grade in different modes (" + "; ".join(
            f"{a}: {d['mode']}" for a, d in sorted(info.items())) + "): a score must not depend on where a "
            "submission lands; use workers of one kind; nothing was graded")
    if modes[0] != "gpu":
        return modes[0], None
    gpu = [d for d in info.values() if d.get("resources", {}).get("GPU")]
    if not gpu:
        raise SetupError("the Dask workers have GPUs but offer no GPU resource: start each with "
                         "`--resources GPU=1` (one worker per GPU); nothing was graded")
    # a GPU worker's threads are its slots on its GPU (the sandbox keeps timing exclusive among them): a task needs
    # 1/slots of the worker's GPU resource, a hair less so that rounding never leaves a slot idle
    slots = max(1, min(int(d.get("nthreads", 1)) for d in gpu))
    return "gpu", {"GPU": 1.0 / slots - 1e-9}


def autograde(root: pathlib.Path, client, *, lessons=None, students=None, settings=None, seed: int | None = None,
              problem_timeout: float | None = None, redo: bool = False, progress: bool = True, timeout: float = 60.0,
              on_result: Callable | None = None, speed_policy: str = "zero", new_seed: bool = False) -> Outcome:
    """Grade the collected submissions of course folder ``root`` on the cluster of ``client``; record them here.

    ``settings``: the grading run's (default: the defaults of the workers' mode, with ``seed`` and
    ``problem_timeout`` when given). ``on_result(done, total, result)`` is called in this process after each
    result (the live leaderboard). ``speed_policy``, the term's seed (``new_seed``) and the log of what a regrade
    changed: as on one machine (:func:`grader.workflow.autograde`)."""
    from . import classbook, policy, workflow
    from .grade import Settings
    from .run import Progress, _missing

    t0 = time.time()
    info = _workers(client, timeout)
    mode, resources = plan(info)
    sources, releases = workflow.sources_of(root), workflow.releases_of(root)
    subs = [s for s in workflow.submissions(root, lessons, students) if s.lesson in sources]
    if settings is None:  # the defaults of the workers' mode, not of this (the instructor's) machine
        settings = Settings(problem_timeout=60.0 if mode == "gpu" else 180.0,
                            submission_budget=300.0 if mode == "gpu" else 900.0)
    settings = dataclasses.replace(settings, seed=settings.seed if seed is None else seed)
    if problem_timeout:
        settings.problem_timeout = problem_timeout
    settings.hide = [*settings.hide, str(root.resolve())]
    settings.seed, seed_line = classbook.term_seed(root, settings.seed, new=new_seed)
    graded_as = workflow.how_graded(settings.seed, mode, speed_policy)
    todo, skipped = workflow.to_grade(root, subs, graded_as, redo=redo)
    before = classbook.load_results(root) if todo else {}
    changes: list[str] = []
    retries = _allowed_failures(client)
    run = uuid.uuid4().hex[:12]
    needed = sorted({s.lesson for s in todo})
    plugin = _RunPlugin(run, {k: sources[k] for k in needed}, {k: releases.get(k) for k in needed},
                        dataclasses.asdict(settings))
    name = f"grader-run-{run}"
    if todo:
        client.register_plugin(plugin, name=name)
    bar = Progress(len(todo)) if progress and todo else None
    results: dict[tuple[str, str], object] = {}
    placement: dict[tuple[str, str], str] = {}
    finished: dict[tuple[str, str], float] = {}
    infra: list[tuple[str, str, str]] = []
    failures: list = []
    book = workflow.api(root)
    done = 0

    def landed(s, r, addr: str) -> None:
        """Record a result as it arrives (nbgrader's step is serial here; it overlaps the cluster's grading)."""
        nonlocal done
        done += 1
        policy.apply([r], speed_policy)
        line = classbook.changes(before.get((s.student, s.lesson)), r)
        if line:
            changes.append(line)
            with (root / "reports" / "history.jsonl").open("a") as f:
                f.write(json.dumps({"when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                                    "seed": settings.seed, "change": line}) + "\n")
        results[(s.student, s.lesson)] = r
        placement[(s.student, s.lesson)] = addr
        failures.extend(workflow.record(root, [s], [r], book, graded_as=graded_as))
        if on_result:
            on_result(done, len(todo), r)
        if bar:
            bar.step(f"{s.student}/{s.lesson} {r.score:g}/{r.max_score:g}")

    futures = {}
    watch = None
    submitted = time.time()
    try:
        for s in todo:
            if s.notebook is not None:
                f = client.submit(_grade_task, run, s.student, s.lesson, s.notebook, resources=resources,
                                  key=f"grade-{run}-{s.student}-{s.lesson}", pure=False, retries=1)
                futures[f] = s
        for s in todo:
            if s.notebook is None:
                r = _missing(s, sources[s.lesson])
                landed(s, r, "")
        watch = _Orphans(client, list(futures), timeout)
        for f in _distributed().as_completed(list(futures)):
            s = futures[f]
            try:
                r, addr, end = f.result()
                finished[(s.student, s.lesson)] = end - submitted
            except Exception as e:
                infra.append((s.student, s.lesson, _reason(e)))
                done += 1
                if bar:
                    bar.step(f"{s.student}/{s.lesson} NOT GRADED (infrastructure)")
                continue
            r.notes = list(s.notes) + r.notes
            landed(s, r, addr)
    finally:
        if watch:
            watch.stop.set()
        if todo:
            try:
                client.unregister_worker_plugin(name)
            except Exception:  # the workers may be gone; the plugin dies with them
                pass
    ordered = [results[(s.student, s.lesson)] for s in todo if (s.student, s.lesson) in results]
    where = sorted({d["where"] for d in info.values()})
    return Outcome(ordered, failures, infra, [(s.student, s.lesson) for s in skipped], info, mode, where,
                   retries, time.time() - t0, placement, finished, settings.seed, seed_line, changes)


class _Orphans:
    """Cancels what is left when the cluster has had no worker for ``timeout`` seconds (all of them lost, a job
    queue that will not give any back): those tasks become infrastructure failures instead of a wait forever."""

    def __init__(self, client, futures: list, timeout: float):
        self.client, self.futures, self.timeout = client, futures, timeout
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True, name="orphans").start()

    def _run(self) -> None:
        since = None
        while not self.stop.wait(2.0):
            try:
                n = len(self.client.scheduler_info()["workers"])
            except Exception:  # the scheduler itself is gone: the futures fail on their own
                return
            if n:
                since = None
                continue
            since = since or time.time()
            if time.time() - since > self.timeout:
                self.client.cancel([f for f in self.futures if not f.done()])
                return


def _allowed_failures(client) -> int | None:
    try:
        return int(client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.allowed_failures))
    except Exception:
        return None


def _reason(e: BaseException) -> str:
    name = type(e).__name__
    if name == "KilledWorker":
        return ("the worker grading it was lost again after one retry on another worker (KilledWorker); the "
                "submission is kept: run autograde again to grade it")
    if name in ("CancelledError", "FutureCancelledError"):
        return ("not graded: the cluster had no worker left (or the scheduler went away); run autograde again to "
                "grade it")
    return f"{name}: {str(e)[:500]}; run autograde again to grade it"


# ---- the command ------------------------------------------------------------------------------------------

def main(args, root: pathlib.Path) -> int:
    """``python -m grader autograde --scheduler/--cluster ...``: connect first (nothing is written if that fails),
    grade, record, print the table, the infrastructure failures and the leaderboard's place."""
    from . import leaderboard, policy, workflow
    from .run import report, table

    if not (root / "submitted").is_dir():
        raise SetupError(f"{root} has no submitted/ folder: collect submissions first; nothing was graded")
    t0 = time.time()
    cluster = connect(args.scheduler, args.cluster, config=args.cluster_config, workers=args.workers,
                      slots=args.slots_per_worker, timeout=args.connect_timeout)
    print(f"grading on {cluster.what}", file=sys.stderr)
    wait = 1800.0 if args.cluster == "slurm" else max(args.connect_timeout, 60.0)  # Slurm jobs queue first
    board = leaderboard.Live(root / "reports")
    try:
        out = autograde(root, cluster.client, lessons=args.lessons, students=args.students, seed=args.seed,
                        problem_timeout=args.timeout, redo=args.redo, timeout=wait,
                        on_result=board.add, speed_policy=getattr(args, "speed_policy", "zero"),
                        new_seed=getattr(args, "new_seed", False))
    finally:
        cluster.close()
    mode = f"{out.mode}; {' / '.join(out.where)}; {policy.describe(getattr(args, 'speed_policy', 'zero'), out.mode)}"
    rows = workflow.class_results(root, out.results, out.skipped)  # the run's whole class, skipped ones too
    if rows:
        print(table(rows, mode=mode))
    print(out.seed_line)
    for line in out.changes:
        print(f"  changed: {line}")
    from .classbook import gradebook_lines

    for line in gradebook_lines(root, rows):
        print(f"  {line}")
    summary = {"mode": out.mode, "where": out.where, "seconds": time.time() - t0, "nbgrader_failures": out.failures,
               "executor": f"dask: {cluster.what}", "workers": out.workers, "worker_loss_retries": out.retries,
               "infrastructure_failures": [{"student": s, "lesson": lsn, "reason": why}
                                           for s, lsn, why in out.infrastructure],
               "graded": [f"{r.student}/{r.lesson}" for r in out.results],
               "already_recorded": [f"{s}/{lsn}" for s, lsn in out.skipped], "seed": out.seed,
               "speed_policy": getattr(args, "speed_policy", "zero"), "changes": out.changes}
    (root / "reports").mkdir(parents=True, exist_ok=True)
    report(rows, root / "reports" / "summary.json", summary)
    board.finish(leaderboard.from_results_dir(root))
    for r in out.results:
        for c in r.cells:
            if not c.passed:
                print(f"  {r.student}/{r.lesson}/{c.grade_id}: {c.gist()}")
    for f in out.failures:
        print(f"nbgrader autograde failed for {f[0]}/{f[1]}:\n{f[2][-1500:]}", file=sys.stderr)
    if out.skipped:
        print(workflow.skipped_line(len(out.skipped)))
    for s, lsn, why in out.infrastructure:
        print(f"INFRASTRUCTURE FAILURE {s}/{lsn}: not graded, nothing recorded: {why}", file=sys.stderr)
    print(f"graded {len(out.results)} notebook(s) in {time.time() - t0:.0f} s on {cluster.what} ({out.mode}); "
          f"worker-loss retries per task: {out.retries if out.retries is not None else 'unknown'}"
          + (f"; {len(out.infrastructure)} NOT graded (infrastructure): see above" if out.infrastructure else ""))
    if board.rows:
        print(f"leaderboard: {board.html} ({len(board.rows)} timed result(s))")
    return 1 if out.failures or out.infrastructure else 0
