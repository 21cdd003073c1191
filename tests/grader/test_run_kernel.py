"""The grader's side of a kernel problem (``_Session.run_kernel``) against a scripted launch worker: the clock a
problem runs under, the label a timeout names, and the speed target measured once for the class."""

import time
import types

import pytest

from grader import grade
from grader.grade import GpuLock, Settings, _Session
from grader.notebook import CheckCall
from grader.sandbox import WorkerTimeout
from kernels.checks.engine import Plan
from kernels.checks.spec import get


class _Scripted:
    """A launch worker that answers each ``recv`` from a script and records the limit it was given."""

    def __init__(self, script):
        self.script, self.limits, self.sent = list(script), [], []

    def send(self, m):
        self.sent.append(m)

    def recv(self, timeout, *, what="", cap=None):
        self.limits.append(timeout)
        if not self.script:
            raise WorkerTimeout(f"stopped after {timeout:.0f} s {what}: an infinite loop")
        return self.script.pop(0)

    def kill(self):
        pass


def _session(monkeypatch, worker, problem_timeout):
    g = types.SimpleNamespace(settings=Settings(problem_timeout=problem_timeout), cubin=True, gpu=GpuLock(),
                              targets={"00_setup.vector_add": (0.5, "somebody's kernel")},
                              sandbox=types.SimpleNamespace(message_cap=1 << 20))
    s = _Session(g, "student", "00_setup", 0, [], [], [])
    monkeypatch.setattr(s, "worker", lambda kind: worker)
    monkeypatch.setattr(grade._cubin, "precheck", lambda *a, **k: {})
    return s


def _plan():
    ex = get("00_setup.vector_add")
    return Plan(ex, False, seed=lambda *parts: 7), CheckCall(ex.id, ("add_kernel",), False)


def test_compiling_stops_the_problems_clock(monkeypatch):
    """Two specialisations that take 1.5 s each to compile leave a 4 s problem its whole 4 s to run: the compile
    has its own limit (``compile_timeout``), and a slow compile on a busy machine is not a hung kernel."""
    worker = _Scripted([{"event": "case", "label": "n=1000"}, {"event": "compile"}, {"event": "compile"}])
    monkeypatch.setattr(grade._cubin, "relay", lambda *a, **k: time.sleep(1.5))
    s = _session(monkeypatch, worker, 4.0)
    plan, call = _plan()
    out = s.run_kernel(plan, call, [{"entry": "add_kernel", "text": ""}], [None])
    assert not out.passed and "stopped after" in "\n".join(out.lines)
    assert worker.limits[-1] > 3.5, worker.limits  # was 1 s: what the compiles had left of the 4
    assert worker.sent[0]["target"] == (0.5, "somebody's kernel")  # measured once, sent with every problem


@pytest.mark.parametrize("timed", [False, True])
def test_a_timeout_names_the_timed_case(monkeypatch, timed):
    """A worker that goes silent while it times the kernel is reported on the timed case, not on the last case
    it checked before."""
    script = [{"event": "case", "label": "n=1000"}]
    if timed:
        script.append({"event": "timing", "label": "n=2**28 fp32 (timed)"})
    worker = _Scripted(script)
    s = _session(monkeypatch, worker, 2.0)
    plan, call = _plan()
    s.g.gpu.readers = 1  # the slot holds the GPU shared, as grading does
    text = "\n".join(s.run_kernel(plan, call, [{"entry": "add_kernel", "text": ""}], [None]).lines)
    assert ("n=2**28 fp32 (timed)" in text) == timed and ("'n=1000'" in text) != timed, text


def test_a_budget_used_up_while_timing_gives_the_gpu_back(monkeypatch):
    """The submission's budget running out while its kernel holds the GPU alone (a compile during the timing, say)
    ends the problem and the worker, and hands the GPU back: before, every other slot then waited for ever."""
    worker = _Scripted([{"event": "case", "label": "n=1000"}, {"event": "timing", "label": "n=2**28 (timed)"}])
    s = _session(monkeypatch, worker, 2.0)
    s.g.gpu.readers = 1
    dropped = []
    monkeypatch.setattr(s, "drop", dropped.append)

    def budget(want):
        if s.g.gpu.writer:
            raise grade._Fail("timeout", "the submission's time budget is used up")
        return want

    monkeypatch.setattr(s, "budget", budget)
    plan, call = _plan()
    with pytest.raises(grade._Fail):
        s.run_kernel(plan, call, [{"entry": "add_kernel", "text": ""}], [None])
    assert not s.g.gpu.writer and s.g.gpu.readers == 1 and dropped == ["launch"]


def test_the_cache_snapshot_keeps_each_entry_whole(tmp_path):
    """The warmed Triton cache seeds every later worker: an entry (a folder) goes whole or not at all, so a
    snapshot at its size limit never leaves a kernel's metadata without its binary."""
    from grader.worker import _tree

    for name, sizes in (("a", (10, 30)), ("b", (50, 5)), ("c", (20,))):
        (tmp_path / name).mkdir()
        for i, n in enumerate(sizes):
            (tmp_path / name / f"f{i}").write_bytes(bytes(n))
    got = _tree(str(tmp_path), cap=70)
    assert sorted(got) == ["a/f0", "a/f1", "c/f0"] and got["a/f1"].numel() == 30
