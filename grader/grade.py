"""Grading one notebook: every graded cell's checks, judged here, run in sandboxed workers.

The grader (this process) owns everything the verdict depends on: it reads the graded cells from the
instructor's notebook, rebuilds each graded kernel from the submission's source (:mod:`kernels.checks.provenance`),
draws the seeds, makes the inputs, computes the float64 references and judges the raw outputs that come back.
Workers (:mod:`grader.worker`) only run things: the ahead-of-time compile, the kernels, and the notebook cells
that values and functions need. A problem (one ``check(...)`` call) that crashes, hangs or runs out of memory
scores 0 with the reason; its worker is replaced by a fresh one for the next problem.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import pathlib
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field

import torch

from kernels.checks import engine, provenance
from kernels.checks.spec import CheckFailed, get
from kernels.device import ON_GPU, describe

from . import cubin as _cubin
from .notebook import CheckCall, GradedCell, cells_needed, jit_prints, split
from .results import CellResult, CheckResult, NotebookResult
from .sandbox import SandboxConfig, SetupError, Worker, WorkerDied, bwrap_path

__all__ = ["Settings", "CheckResult", "CellResult", "NotebookResult", "Grader", "SetupError"]

_ROOT = pathlib.Path(__file__).resolve().parents[1]
#: Sandbox uids per slot: one per kind of worker ("launch": the GPU worker that launches cubins).
_UID_OFFSET = {"kernel": 0, "compile": 1, "notebook": 2, "launch": 3}
UIDS_PER_SLOT = len(_UID_OFFSET)


@dataclass
class Settings:
    """Budgets and limits of a grading run (seconds and bytes)."""

    problem_timeout: float = 180.0 if not ON_GPU else 60.0
    cell_timeout: float = 60.0
    submission_budget: float = 900.0 if not ON_GPU else 300.0
    compile_timeout: float = 120.0
    memory_limit: int = 4 << 30
    seed: int | None = None
    lesson_paths: list[str] = field(default_factory=list)
    gpu_memory_fraction: float | None = None
    hide: list[str] = field(default_factory=list)  # kept for callers; workers see only an allowlist (bubblewrap)
    # on a GPU, launch and time the cubin the sandbox compiled, from a worker that never runs the student's Python
    cubin: bool = os.environ.get("GRADER_CUBIN", "1") != "0"
    # on a GPU, the lessons whose speed checks' baselines and targets are run once before grading (None: all)
    warm_lessons: tuple[str, ...] | None = None


class GpuLock:
    """Shared while a slot runs anything on the GPU, exclusive while one slot times a kernel, so that no
    timing overlaps another submission's work (a hung kernel included: it holds the GPU until it is killed)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.readers = 0
        self.writer = False
        self.waiting = 0

    @contextlib.contextmanager
    def shared(self):
        with self.cond:
            while self.writer or self.waiting:
                self.cond.wait()
            self.readers += 1
        try:
            yield
        finally:
            with self.cond:
                self.readers -= 1
                self.cond.notify_all()

    def upgrade(self) -> None:
        """From shared to exclusive (the caller holds shared)."""
        with self.cond:
            self.readers -= 1
            self.waiting += 1
            while self.writer or self.readers:
                self.cond.wait()
            self.waiting -= 1
            self.writer = True

    def downgrade(self) -> None:
        with self.cond:
            self.writer = False
            self.readers += 1
            self.cond.notify_all()


def _output_bytes(ex, run) -> int:
    """The bytes of a run's output buffers (guards included), as the check lays them out: a result message carries
    them back, so it may be that much larger than the usual allowance (a GPU case's output is tens of MiB)."""
    return sum((math.prod(shape) + 2 * guard) * dtype.itemsize
               for shape, dtype, guard, _ in engine.expected_outputs(ex, run.case, run.inputs).values())


class Grader:
    """One grading run: a sandbox root, settings and ``slots`` parallel worker uids."""

    #: the seconds the latest GPU warm-up in this process took (the demo's report names them)
    last_warm_s = 0.0

    def __init__(self, settings: Settings | None = None, *, root: pathlib.Path | None = None):
        self.settings = settings or Settings()
        bwrap_path()  # a SetupError naming the fix, before anything else
        self.sandbox = SandboxConfig(mode="gpu" if ON_GPU else "interpreter", memory_limit=self.settings.memory_limit,
                                     gpu_memory_fraction=self.settings.gpu_memory_fraction,
                                     **({"root": root} if root else {}))
        self.lessons_dir = self.sandbox.root / "lessons"
        self.lessons_dir.mkdir(exist_ok=True)
        self.lessons_dir.chmod(0o755)
        for d in self.settings.lesson_paths:
            for f in pathlib.Path(d).glob("l[0-9][0-9]_*.py"):
                shutil.copy(f, self.lessons_dir / f.name)
                (self.lessons_dir / f.name).chmod(0o644)
            if d not in sys.path:
                sys.path.append(d)
        self.sandbox.lessons = str(self.lessons_dir)
        self.master = self.settings.seed if self.settings.seed is not None else engine.draw_seed()
        self.cubin = self.sandbox.mode == "gpu" and self.settings.cubin
        self.gpu = GpuLock()
        self.targets: dict[str, tuple[float, str]] = {}  # speed targets measured once (engine.warm_performance)
        try:
            self.isolation = self._probe()
        except SetupError:
            self.sandbox.close()
            if root is None:  # the folder made for this run holds nothing yet
                shutil.rmtree(self.sandbox.root, ignore_errors=True)
            raise

    def _probe(self) -> str:
        """Start the three sandbox templates (their imports overlap) and one worker of each, to learn that the
        sandbox uid can run everything a grading run needs; in GPU mode, warm Triton's cache once and seed every
        later worker with it."""
        mode = self.sandbox.mode
        cubin = mode == "gpu" and self.settings.cubin
        kinds = [("kernel", mode), ("notebook", mode)] + ([("compile", "compile")] if mode == "interpreter" or cubin
                                                          else [])
        self.sandbox.start(*kinds)
        how = "?"
        for kind, m in kinds:
            w = Worker(self.sandbox, uid=self.sandbox.uid_base, mode=m, kind=kind, name=f"probe-{kind}",
                       startup_timeout=300)
            how = w.isolation
            if kind == "kernel" and mode == "gpu":
                lessons = self.settings.warm_lessons
                warm_t0 = time.time()
                w.send({"op": "warm", "lessons": None if lessons is None else list(lessons)})
                try:
                    try:
                        warm = w.recv(420, what="warming Triton's cache with the speed checks' baselines",
                                      cap=256 << 20)
                    except WorkerDied as e:  # a baseline or a target broke or hung: without them, as before
                        print(f"grader: the speed checks' warm-up failed ({e}); each timed check measures its "
                              "own baseline and target", file=sys.stderr)
                        w.close()
                        w = Worker(self.sandbox, uid=self.sandbox.uid_base, mode=m, kind=kind, name="probe-warm",
                                   startup_timeout=300)
                        w.send({"op": "warm", "performance": False})
                        warm = w.recv(300, what="warming Triton's cache", cap=256 << 20)
                    Grader.last_warm_s = time.time() - warm_t0
                    files = warm.get("files") or {}
                    self.targets = {k: (float(v[0]), str(v[1])) for k, v in (warm.get("targets") or {}).items()}
                except WorkerDied as e:  # compiling one kernel failed: what the worker printed names the cause
                    raise SetupError(f"a sandboxed GPU worker (uid {w.uid}, {how}) cannot compile and launch a "
                                     f"Triton kernel: {e}. It printed:\n" + "\n".join(w.output_tail(25))
                                     + "\nnothing was graded") from None
                for rel, data in files.items():
                    dest = (self.sandbox.seed / rel).resolve()
                    if self.sandbox.seed.resolve() in dest.parents:
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        dest.write_bytes(data.numpy().tobytes())
                w.close()
                w = Worker(self.sandbox, uid=self.sandbox.uid_base, mode=m, kind=kind, name=f"probe-{kind}")
            w.send({"op": "probe", "cubin": kind == "kernel" and cubin})
            err = w.recv(120, what="starting its notebook runner").get("error")
            w.close()
            if err:
                raise SetupError(
                    f"a sandboxed worker (uid {w.uid}, no root rights, {how}, {kind}) cannot start: "
                    f"{err.get('type')}: {str(err.get('message'))[:500]}. Every package the grader imports must be "
                    "on its Python path and readable by all users (after `pip install --target DIR`, say, run "
                    "`chmod -R a+rX DIR`)" + ("; the cubin launcher needs cuda-bindings (or grade with GRADER_CUBIN=0 "
                                              "to launch through Triton's JIT in the sandbox)"
                                              if "cuda-bindings" in str(err.get("message")) else "")
                    + "; nothing was graded")
        return how

    def seed(self, *parts) -> int:
        h = hashlib.sha256(repr((self.master, *parts)).encode()).digest()
        return int.from_bytes(h[:6], "little")

    def grade(self, student: str, lesson: str, submission: dict, source: dict, release: dict | None = None,
              *, slot: int = 0) -> NotebookResult:
        """Grade one notebook (nbformat dicts): the submission, the instructor's source and the release."""
        t0 = time.time()
        graded_source = {}
        for cell in source.get("cells", []):
            nbg = (cell.get("metadata") or {}).get("nbgrader") or {}
            if cell.get("cell_type") == "code" and nbg.get("grade") and not nbg.get("solution"):
                src = cell.get("source", "")
                graded_source[nbg["grade_id"]] = ("".join(src) if isinstance(src, list) else src,
                                                  float(nbg.get("points", 0)))
        code, graded = split(submission, graded_source)
        release_code = split(release)[0] if release else []
        session = _Session(self, student, lesson, slot, code, graded, release_code)
        try:
            cells = []
            for c in graded:
                asked = time.time()
                with self.gpu.shared() if ON_GPU else contextlib.nullcontext():
                    session.phase("gpu_wait", asked)
                    cells.append(session.grade_cell(c))
        finally:
            stopping = time.time()
            session.finish()
            session.phase("stop", stopping)
        return NotebookResult(student, lesson, cells, notes=session.notes, seconds=time.time() - t0,
                              isolation=session.isolation, phases=dict(session.phases), where=describe())


class _Session:
    """The workers and budget of one submitted notebook."""

    def __init__(self, grader: Grader, student, lesson, slot, code, graded, release_code):
        self.g = grader
        self.s = grader.settings
        self.student, self.lesson, self.slot = student, lesson, slot
        self.code = code
        self.started = time.time()
        self.notes: list[str] = []
        self.isolation = ""
        self.release_prints = jit_prints(release_code)
        self.workers: dict[str, Worker] = {}
        self.bad_cells: dict[int, str] = {}
        self.cell_errors: dict[int, str] = {}
        self.names = sorted({n for c in graded for call in c.checks
                             for kind, n in zip(_kinds(call), call.names) if kind in ("value", "function")})
        self.restarts = 0
        self.phases: dict[str, float] = {}
        self.caches: list[pathlib.Path] = []

    def phase(self, name: str, since: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + time.time() - since

    # ---- budget and workers --------------------------------------------------------------------------------
    def left(self) -> float:
        """Seconds of the submission's budget left. Time spent waiting for the GPU while other submissions are
        timed is not the submission's: with several slots it came to minutes, and correct work ran out of time."""
        return self.s.submission_budget - (time.time() - self.started - self.phases.get("gpu_wait", 0.0))

    def budget(self, want: float) -> float:
        left = self.left()
        if left <= 0:
            raise _Fail("timeout", f"the submission's time budget ({self.s.submission_budget:.0f} s) is used up; "
                        "this check was not run")
        return min(want, left)

    def worker(self, kind: str) -> Worker:
        w = self.workers.get(kind)
        if w is not None and w.alive():
            return w
        mode = {"kernel": self.g.sandbox.mode, "compile": "compile", "notebook": self.g.sandbox.mode,
                "launch": self.g.sandbox.mode}[kind]
        # "launch": a kernel worker that never imports the student's source (it launches their cubins)
        uid = self.g.sandbox.uid_base + UIDS_PER_SLOT * self.slot + _UID_OFFSET[kind]
        t0 = time.time()
        w = Worker(self.g.sandbox, uid=uid, mode=mode, kind="kernel" if kind == "launch" else kind,
                   name=f"slot{self.slot}-{kind}",
                   startup_timeout=self.budget(120), cache=self._cache(kind, uid))
        self.phase("start", t0)
        self.isolation = self.isolation or w.isolation
        self.workers[kind] = w
        if kind == "notebook":
            t0 = time.time()
            self._run_cells(w)
            self.phase("cells", t0)
            return self.workers["notebook"]
        return w

    def _cache(self, kind: str, uid: int) -> str | None:
        """Triton's cache for this submission's workers of one kind, so a kernel compiled for one problem is not
        compiled again for the next: shared only by the problems of this submission, owned by that kind's uid,
        removed when the submission is done. The kernel and compile workers' caches are written only by the uid
        that runs rebuilt kernels; the notebook's is its own (what the notebook's code compiles when a function
        answer, an autograd Function say, launches its kernels), apart from theirs, so nothing the notebook's
        code writes reaches a compile the verdict trusts."""
        box = self.g.sandbox
        d = (box.notebook_caches if kind == "notebook" else box.caches) / f"slot{self.slot}-{kind}"
        if d not in self.caches:
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
            os.chown(d, uid, uid)
            os.chmod(d, 0o700)
            self.caches.append(d)
        return d.name

    def drop(self, kind: str) -> None:
        w = self.workers.pop(kind, None)
        if w is not None:
            w.kill()

    def close(self) -> None:
        for w in self.workers.values():
            w.close()
        self.workers.clear()

    def finish(self) -> None:
        self.close()
        for d in self.caches:
            shutil.rmtree(d, ignore_errors=True)
        self.caches.clear()

    def _run_cells(self, w: Worker) -> None:
        needed = [i for i in cells_needed(self.code, set(self.names)) if i not in self.bad_cells]
        w.send({"op": "notebook", "cells": [{"index": i, "source": self.code[i]} for i in needed]})
        current = None
        while True:
            try:
                m = w.recv(self.budget(self.s.cell_timeout),
                           what=f"in code cell {current + 1} of your notebook" if current is not None else "")
            except WorkerDied as e:
                self.workers.pop("notebook", None)
                if current is None:
                    raise _Fail("crashed", f"the notebook's code could not start: {e}") from None
                self._without_cell(current, str(e))
                return
            if m.get("event") == "setup_error":
                err = m.get("error") or {}
                self.workers.pop("notebook", None)
                w.kill()
                raise _Fail("crashed", "the grading machine could not start its notebook runner in the worker "
                            f"({err.get('type')}: {str(err.get('message'))[:300]}); this is not the notebook's "
                            "fault: tell the instructor")
            if m.get("event") == "cell":
                current = m["index"]
            elif m.get("event") == "cell_done":
                if m.get("error"):
                    self.cell_errors[m["index"]] = m["error"]
                if m.get("cuda"):  # the worker has ended: its GPU context is lost
                    self.workers.pop("notebook", None)
                    w.kill()
                    self._without_cell(m["index"], f"left the GPU unusable ({m['cuda']})")
                    return
                current = None
            elif m.get("event") == "ready":
                return

    def _without_cell(self, index: int, why: str) -> None:
        """Run the notebook again in a fresh worker, leaving out the code cell that crashed or broke the last."""
        self.bad_cells[index] = why
        self.notes.append(f"code cell {index + 1}: {why}; graded without it")
        self.restarts += 1
        if self.restarts > 8:
            raise _Fail("crashed", "the notebook's code keeps crashing its worker")
        self.worker("notebook")

    def _name_hint(self, name: str) -> str:
        for i in cells_needed(self.code, {name}):
            if i in self.bad_cells:
                return f" (code cell {i + 1} never finished: {self.bad_cells[i]})"
            if i in self.cell_errors:
                return f" (code cell {i + 1} raised {self.cell_errors[i]})"
        return ""

    # ---- one graded cell -----------------------------------------------------------------------------------
    def grade_cell(self, cell: GradedCell) -> CellResult:
        if cell.error:
            return CellResult(cell.grade_id, cell.points, 0.0, error=f"grader configuration error: {cell.error}")
        results = []
        for n, call in enumerate(cell.checks):
            t0 = time.time()
            try:
                r = self.check(cell, n, call)
            except _Fail as f:
                r = CheckResult(call.exercise, call.hidden, False, f.status, [f"{call.exercise}: {f}"])
            except WorkerDied as e:
                r = CheckResult(call.exercise, call.hidden, False, "crashed", [f"{call.exercise}: {e}"])
            finally:
                stopping = time.time()
                self.close()  # a fresh sandbox for every problem: nothing one leaves behind reaches the next
                self.phase("stop", stopping)
            r.seconds = time.time() - t0
            results.append(r)
            if not r.passed:
                break
        ok = all(r.passed for r in results) and len(results) == len(cell.checks)
        return CellResult(cell.grade_id, cell.points, cell.points if ok else 0.0, results)

    def check(self, cell: GradedCell, n: int, call: CheckCall) -> CheckResult:
        try:
            ex = get(call.exercise)
        except (KeyError, ImportError) as e:
            raise _Fail("error", f"grader configuration error: {e}") from None
        if len(call.names) != len(ex.args):
            raise _Fail("error", f"grader configuration error: the cell passes {len(call.names)} object(s), the "
                        f"exercise takes {len(ex.args)}")
        self.budget(1)
        kernels, values = [], []
        for kind, name in zip(ex.args, call.names):
            try:
                if kind == "kernel":
                    forbidden = {fp: f"the lesson's own {nm}" for fp, nm in self.release_prints.items() if nm != name}
                    ks = provenance.from_cells(self.code, name, allowed=frozenset(self.release_prints),
                                               forbidden=forbidden, twins=ex.twins)
                    engine.check_kernel_source(ex, ks.text)
                    kernels.append({"entry": ks.entry, "text": ks.text})
                    values.append(None)
                elif kind == "function":
                    provenance.check_function_static(self.code, name, ex.forbid)
                    kernels.append(None)
                    values.append(None)
                else:
                    kernels.append(None)
                    values.append(self.value(name))
            except CheckFailed as e:
                raise _Fail("rejected", str(e)) from None
        plan = engine.Plan(ex, call.hidden,
                           lambda *parts: self.g.seed(self.student, self.lesson, cell.grade_id, n, *parts))
        # a toolchain's rule builds and runs the student's code: in the sandbox, never here
        rule = (lambda v: self.toolchain_rule(ex, call, v)) if ex.toolchain else None
        if not plan.check_values(tuple(values), rule) or plan.values_only:
            return _result(plan)
        if "function" in ex.args:
            return self.run_function(plan, call, values)
        if self.g.sandbox.mode == "interpreter":
            self.compile(ex, call, kernels, values)
        return self.run_kernel(plan, call, kernels, values)

    def value(self, name: str):
        w = self.worker("notebook")
        w.send({"op": "value", "name": name})
        m = w.recv(self.budget(30), what=f"reading {name}")
        if m.get("missing"):
            raise _Fail("failed", f"{name} is not defined{self._name_hint(name)}")
        if "invalid" in m:
            raise _Fail("failed", f"{name} must be plain data (numbers, strings, lists, dicts): {m['invalid']}")
        return m.get("value")

    def toolchain_rule(self, ex, call, values) -> str | None:
        """The rule of an exercise graded with an outside toolchain (lesson 05's Rust: cargo builds the student's
        code and runs its tests), run in the compile sandbox, where the toolchain is bound read-only. Where the
        grading machine lacks the toolchain the check is "not graded", with the reason (0 points, never a silent
        0)."""
        missing = engine.toolchain_missing(ex)
        if missing:
            raise _Fail("not graded", f"{missing} (on the grading machine: install it there and grade again)")
        w = self.worker("compile")
        w.send({"op": "rule", "exercise": ex.id, "hidden": call.hidden, "values": values})
        try:
            m = w.recv(self.budget(self.s.compile_timeout), what=f"building and testing with {ex.toolchain}")
        except WorkerDied as e:
            self.drop("compile")
            raise _Fail("crashed", f"the {ex.toolchain} build {e}") from None
        if m.get("needs"):
            raise _Fail("not graded", m["needs"])
        return m.get("why")

    def compile(self, ex, call, kernels, values) -> None:
        w = self.worker("compile")
        w.send({"op": "compile", "exercise": ex.id, "hidden": call.hidden, "kernels": kernels, "values": values})
        try:
            m = w.recv(self.budget(self.s.compile_timeout), what="compiling the kernel for sm_90")
        except WorkerDied as e:
            self.drop("compile")
            raise _Fail("crashed", f"the sm_90 compile {e}") from None
        if not m.get("ok"):
            raise _Fail("rejected", m.get("message", "does not compile for sm_90"))

    # ---- running ------------------------------------------------------------------------------------------
    def _outputs(self, plan, run, m) -> tuple[dict, list[str]]:
        """The poisoned outputs of a run from the worker's raw buffers, laid out as the check laid them out (or
        why they cannot be used)."""
        want = engine.expected_outputs(plan.ex, run.case, run.inputs)
        got = m.get("outputs") or {}
        outs = {}
        for k, (shape, dtype, guard, order) in want.items():
            b = got.get(k, {}).get("buffer") if isinstance(got.get(k), dict) else None
            n = 1
            for s in shape:
                n *= s
            if b is None or b.dtype != dtype or b.dim() != 1 or b.numel() != n + 2 * guard:
                return {}, [f"{k}: the worker returned no usable output buffer"]
            outs[k] = engine.poisoned_view(b, shape, guard, order)
        return outs, []

    def _error_lines(self, ex, label, m) -> list[str]:
        err = m.get("error") or {}
        raised = engine.your_code_raised(err.get("type"), err.get("message"), ex)
        lines = [f"{ex.id} failed on case {label!r}: {raised}"]
        tb = [ln for ln in (err.get("traceback") or "").splitlines() if ln.strip()]
        mine = [i for i, ln in enumerate(tb) if "_graded_" in ln or "<ipython-input" in ln or "/tmp/ipykernel" in ln
                or 'File "<cell' in ln]
        if mine:
            lines += ["  " + ln for ln in tb[mine[-1]: mine[-1] + 4]]
        return lines

    def run_kernel(self, plan, call, kernels, values) -> CheckResult:
        """The plan's runs go to the kernel worker in one request (the timing after the last case, when timed);
        what comes back is judged here, run by run."""
        ex = plan.ex
        runs = [plan.prepare(r) for r in plan.sequence()]
        request = [{"index": r.index, "hidden": call.hidden, "inputs": r.inputs} for r in runs]
        if plan.timed:
            request[len(plan.runs) - 1]["time"] = plan.time_seed
        cubin = self.g.cubin
        traffic: dict = {}
        if cubin:  # the kernel's Python runs only in the interpreter's pre-check and the compile, never here
            items = [{"index": r.index, "case": r.case, "seed": r.seed} for r in runs]
            t0 = time.time()
            found = _cubin.precheck(self, ex, call, kernels, values, request, items)
            self.phase("precheck", t0)
            if isinstance(found, CheckResult):
                return found
            traffic = found
        w = self.worker("launch" if cubin else "kernel")
        w.send({"op": "kernel", "exercise": ex.id, "kernels": kernels, "values": values, "cases": request,
                "target": self.g.targets.get(ex.id),
                "cubin": cubin})
        label, k = None, 0
        deadline = time.time() + self.s.problem_timeout
        exclusive = False
        cap = self.g.sandbox.message_cap + max(_output_bytes(ex, r) for r in runs)
        try:
            while True:
                try:
                    m = w.recv(self.budget(max(1.0, deadline - time.time())),
                               what=f"on case {label!r}" if label else "", cap=cap)
                except WorkerDied as e:
                    self.drop("launch" if cubin else "kernel")
                    if exclusive:
                        self.g.gpu.downgrade()
                        exclusive = False
                    status = "timeout" if "stopped after" in str(e) else "crashed"
                    return CheckResult(ex.id, call.hidden, False, status, [f"{ex.id}: {e}"])
                ev = m.get("event")
                if ev == "case":
                    label = m.get("label")
                elif ev == "compile" and cubin:  # the compile has a limit of its own: the problem's clock stops
                    asked = time.time()
                    _cubin.relay(self, w, m, kernels)
                    self.phase("compile", asked)
                    deadline += time.time() - asked
                elif ev == "result":
                    run = runs[k]
                    k += 1
                    if traffic.get(run.index) and isinstance(m.get("result"), dict):
                        m["result"][engine.TRAFFIC] = traffic[run.index]
                    if not plan.failed:
                        outs, problems = self._outputs(plan, run, m)
                        if problems:
                            plan.fail_run(run, problems)
                        else:
                            plan.judge(run, outs, m.get("result") or {})
                elif ev == "timing":
                    label = m.get("label") or label
                    asked = time.time()
                    self.g.gpu.upgrade()
                    self.phase("gpu_wait", asked)
                    exclusive = True
                    w.send({"op": "go"})
                    deadline = max(deadline, time.time() + self.s.problem_timeout)
                elif ev == "timed":
                    if exclusive:
                        self.g.gpu.downgrade()
                        exclusive = False
                    plan.judge_timing(m.get("timing"))
                elif ev == "error":
                    if exclusive:
                        self.g.gpu.downgrade()
                        exclusive = False
                    if m.get("cuda"):
                        self.drop("launch" if cubin else "kernel")
                    return CheckResult(ex.id, call.hidden, False, "failed", self._error_lines(ex, label, m))
                elif ev == "done":
                    break
        finally:
            if exclusive:  # left while timing (the submission's budget used up): the worker may still be timing
                self.drop("launch" if cubin else "kernel")
                self.g.gpu.downgrade()
        return _result(plan)

    def run_function(self, plan, call, values) -> CheckResult:
        """The exercise's ``run`` and the judging happen here, in the grader; each call of the student's function
        goes to the notebook's sandbox (where no reference, check or grader code exists) and only its arguments
        and return value cross."""
        ex = plan.ex
        for run in plan.runs:  # a function is not timed
            deadline = time.time() + self.s.problem_timeout
            args = tuple(_Remote(self, nm, ex.forbid, deadline) if kind == "function" else v
                         for kind, nm, v in zip(ex.args, call.names, values))
            label = run.case.label
            try:
                outs, result = engine.run_case(ex, args, run.case, plan.prepare(run).inputs)
            except WorkerDied as e:
                self.drop("notebook")
                status = "timeout" if "stopped after" in str(e) else "crashed"
                return CheckResult(ex.id, call.hidden, False, status, [f"{ex.id}: {e}"])
            except _Raised as e:
                if e.cuda:
                    self.drop("notebook")
                if e.error.get("type") == "NameError" and "is not defined" in str(e.error.get("message")):
                    hint = self._name_hint(call.names[0])
                    return CheckResult(ex.id, call.hidden, False, "failed",
                                       [f"{ex.id}: {e.error.get('message')}{hint}"])
                return CheckResult(ex.id, call.hidden, False, "failed",
                                   self._error_lines(ex, label, {"error": e.error}))
            except CheckFailed as e:
                return CheckResult(ex.id, call.hidden, False, "failed", [f"{ex.id} failed on case {label!r}: {e}"])
            except Exception as e:  # noqa: BLE001 (the exercise's run choked on what the function returned)
                return CheckResult(ex.id, call.hidden, False, "failed", [
                    f"{ex.id} failed on case {label!r}: what your function returned could not be used "
                    f"({type(e).__name__}: {str(e)[:300]})"])
            if not plan.judge(run, outs, result):
                break
        return _result(plan)


def _result(plan: engine.Plan) -> CheckResult:
    """The plan's outcome as the grader reports it."""
    out = plan.outcome()
    if plan.unrated:  # the grader's side never judges a toolchain's rule (the sandbox does): kept for safety
        return CheckResult(out.exercise, plan.hidden, False, "not graded", [f"{out.exercise}: {plan.unrated}"])
    if not out.passed:
        return CheckResult(out.exercise, plan.hidden, False, "failed", out.lines, perf=out.perf)
    status = "passed (partly not graded)" if out.not_graded and "kernel" in plan.ex.args else "passed"
    return CheckResult(out.exercise, plan.hidden, True, status, out.lines, not_graded=out.not_graded, perf=out.perf)


class _Raised(Exception):
    """The student's function raised in the sandbox (``error``: type, message, traceback there)."""

    def __init__(self, error: dict, cuda: bool = False):
        super().__init__(f"{error.get('type')}: {error.get('message')}")
        self.error, self.cuda = error, cuda


def _raised(error: dict, cuda: bool) -> _Raised:
    """The student's exception, as a :class:`_Raised` that is also the same built-in type when the exercise may
    expect it (a launch refused with ``ValueError``)."""
    import builtins

    name = str(error.get("type"))
    if name in _PASSABLE:
        e = type(name, (getattr(builtins, name), _Raised), {})(f"{error.get('message')}")
        e.error, e.cuda = error, cuda
        return e
    return _Raised(error, cuda)


_PASSABLE = {"ValueError", "TypeError", "KeyError", "IndexError", "ZeroDivisionError", "OverflowError",
             "AssertionError", "NotImplementedError", "AttributeError", "ArithmeticError", "LookupError"}


class _Remote:
    """Stands in, on the grader's side, for a function of the notebook: calling it sends the arguments to the
    notebook's sandbox and returns what the function returned there. An exception the exercise may expect (a
    ``ValueError`` refusing a launch, say) is raised again here as the same built-in type; anything else stops the
    case as the student's error. Torch calls counted in the sandbox are handed to the exercise's counters
    (a torch function mode with ``absorb(calls, widest)``) active here."""

    def __init__(self, session: _Session, name: str, forbid, deadline: float):
        self.session, self.name, self.forbid, self.deadline = session, name, tuple(forbid), deadline
        self.callbacks: list = []

    def __call__(self, *args, **kwargs):
        modes = torch.overrides._get_current_function_mode_stack()
        with torch._C.DisableTorchFunction():  # the channel's own tensor handling is not the student's torch calls
            value, ops = self._call(args, kwargs)
        for mode in modes:
            if hasattr(mode, "absorb"):
                mode.absorb(int(ops.get("calls") or 0), ops.get("widest"))
        return value

    def call_with_grad(self, args, requires, grad_output) -> dict:
        """Call a differentiable answer in the sandbox and run its backward there with ``grad_output``: a dict of
        ``output``, ``grads`` (of the inputs at ``requires``), ``grad_fn`` (its node's type name), ``custom``
        (a ``torch.autograd.Function``'s node) and ``saved`` (each saved tensor's input index or None, and shape);
        or whatever the function returned, when it is not a tensor."""
        self.callbacks = []
        grad = {"requires": list(requires), "output": self._out(grad_output)}
        with torch._C.DisableTorchFunction():
            value, _ = self._call(args, {}, grad)
        return value

    def _call(self, args, kwargs, grad=None):
        s = self.session
        w = s.worker("notebook")
        if grad is None:
            self.callbacks = []
        msg = {"op": "call", "name": self.name, "args": self._out(list(args)), "kwargs": self._out(kwargs),
               "forbid": list(self.forbid)}
        if grad is not None:
            msg["grad"] = grad
        w.send(msg)
        while True:
            m = w.recv(s.budget(max(1.0, self.deadline - time.time())), what=f"in {self.name}")
            ev = m.get("event")
            if ev == "callback":
                fn = self.callbacks[int(m["id"])]
                try:
                    value = fn(*self._back(m.get("args") or []))
                    w.send({"op": "callback_result", "value": self._out(value)})
                except Exception as e:  # noqa: BLE001 (an allocator refusing a size, say: raised in the sandbox)
                    w.send({"op": "callback_result", "error": {"type": type(e).__name__, "message": str(e)}})
                continue
            if ev == "raised":
                err = m.get("error") or {}
                raise _raised(err, bool(m.get("cuda")))
            if ev == "returned":
                return self._back(m.get("value")), m.get("ops") or {}

    def _out(self, obj):
        if isinstance(obj, torch.Tensor) and obj.is_meta:  # shape and dtype only (no memory to send)
            return {"__meta__": {"shape": list(obj.shape), "stride": list(obj.stride()),
                                 "dtype": str(obj.dtype).replace("torch.", "")}, "ptr": obj.data_ptr()}
        if isinstance(obj, torch.Tensor):
            return {"__cuda__" if obj.is_cuda else "__cpu__": obj, "ptr": obj.data_ptr()}
        if isinstance(obj, dict):
            return {str(k): self._out(v) for k, v in obj.items()}
        if isinstance(obj, tuple):
            return {"__tuple__": [self._out(v) for v in obj]}
        if isinstance(obj, list):
            return [self._out(v) for v in obj]
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        if callable(obj):
            self.callbacks.append(obj)
            return {"__callback__": len(self.callbacks) - 1}
        if hasattr(obj, "__dict__"):
            return {"__ns__": {k: self._out(v) for k, v in vars(obj).items() if not k.startswith("_")}}
        raise TypeError(f"grader configuration error: cannot pass a {type(obj).__name__} to the notebook")

    def _back(self, obj):
        if isinstance(obj, dict):
            if "__tuple__" in obj:
                return tuple(self._back(v) for v in obj["__tuple__"])
            if "__ptr__" in obj:
                return int(obj["__ptr__"])
            if "__dtype__" in obj:
                dt = getattr(torch, str(obj["__dtype__"]), None)
                if not isinstance(dt, torch.dtype):
                    raise _Raised({"type": "TypeError", "message": "returned an unknown dtype", "traceback": ""})
                return dt
            return {k: self._back(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self._back(v) for v in obj]
        return obj


def _kinds(call: CheckCall) -> tuple[str, ...]:
    try:
        return get(call.exercise).args
    except (KeyError, ImportError):
        return ()


class _Fail(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
