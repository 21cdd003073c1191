"""Starting, watching and killing sandboxed workers (the trusted side of :mod:`grader.worker`).

Workers are forked from a ``multiprocessing`` fork server that has imported torch and the worker module only
(no Triton, no CUDA context, nothing of the course), so a fresh worker costs a fork, not an interpreter start.
Each worker gets a uid of its own (``uid_base + 3 * slot``, ``+ 1`` for the compile worker, ``+ 2`` for the
notebook's code, so none of them can signal, trace or read another), a private folder
under the sandbox root, a wall-clock budget per request and a memory ceiling (``RLIMIT_AS`` without a GPU, and
on every machine a watchdog over the resident memory of all processes of its uid). Killing a worker kills its
process group and then every process left under its uid, so a daemon a student starts does not outlive it.
Messages are size-capped and decoded by :mod:`grader.wire` (no pickle).
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import pathlib
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing import popen_forkserver, spawn
from multiprocessing.context import ForkServerProcess

from . import wire

__all__ = ["SandboxConfig", "Worker", "WorkerDied", "WorkerTimeout", "sweep", "lockdown"]

_CTX = None
_CTX_LOCK = threading.Lock()
_SIGNALS = {signal.SIGSEGV: "a segmentation fault (SIGSEGV)", signal.SIGBUS: "a bus error (SIGBUS)",
            signal.SIGABRT: "an abort (SIGABRT)", signal.SIGFPE: "a floating-point exception (SIGFPE)",
            signal.SIGILL: "an illegal instruction (SIGILL)", signal.SIGKILL: "SIGKILL",
            signal.SIGTERM: "SIGTERM", signal.SIGXCPU: "the CPU time limit (SIGXCPU)"}


class WorkerDied(RuntimeError):
    """The worker ended or was killed; ``str()`` says why, in words a student can act on."""


class WorkerTimeout(WorkerDied):
    """The worker ran past its budget and was killed."""


@dataclass
class SandboxConfig:
    """What every worker of one grading run shares."""

    mode: str  # "gpu" or "interpreter"
    root: pathlib.Path = field(default_factory=lambda: pathlib.Path(tempfile.mkdtemp(prefix="grader-sandbox-")))
    hide: list[str] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    memory_limit: int = 6 << 30
    uid_base: int = 61000
    output_cap: int = 64 << 10
    message_cap: int = 1 << 31
    gpu_memory_fraction: float | None = None
    triton_seed: str | None = None  # a Triton cache (its compiled CUDA helpers) copied into every new worker

    def __post_init__(self):
        self.root = pathlib.Path(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        self._lock = None
        self.uid_base = self._claim(self.uid_base)

    def _claim(self, first: int) -> int:
        """A range of sandbox uids no other grading run on this machine holds (an flock per range), so two
        runs never sweep each other's workers."""
        for base in range(first, first + 100 * 40, 100):
            fd = os.open(os.path.join(tempfile.gettempdir(), f".grader-uids-{base}.lock"), os.O_RDWR | os.O_CREAT,
                         0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self._lock = fd
            return base
        raise RuntimeError("every sandbox uid range is held by another grading run")


def _context():
    global _CTX
    with _CTX_LOCK:
        if _CTX is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["grader.worker"])
            _CTX = ctx
    return _CTX


class _Popen(popen_forkserver.Popen):
    """Fork-server start whose child does not re-import the grader's ``__main__`` module."""

    def _launch(self, process_obj):
        with _CTX_LOCK:
            original = spawn.get_preparation_data

            def preparation(name):
                data = original(name)
                data.pop("init_main_from_path", None)
                data.pop("init_main_from_name", None)
                return data

            spawn.get_preparation_data = preparation
            try:
                super()._launch(process_obj)
            finally:
                spawn.get_preparation_data = original


class _Process(ForkServerProcess):
    @staticmethod
    def _Popen(process_obj):
        _context()
        return _Popen(process_obj)


def _uid_of(pid: str) -> int | None:
    """The real uid of a live process (``None`` for zombies, which hold nothing but their exit status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:") and line.split()[1] in ("Z", "X"):
                    return None
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _pids_of(uid: int) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and _uid_of(pid) == uid:
            out.append(int(pid))
    return out


def sweep(uid: int) -> int:
    """Kill every process running under ``uid`` (a sandbox uid, never a real user's); return how many."""
    if uid < 1000:
        raise ValueError(f"refusing to sweep system uid {uid}")
    killed = 0
    for _ in range(20):
        pids = _pids_of(uid)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    return killed


def _rss(uid: int) -> int:
    total = 0
    for pid in _pids_of(uid):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError):
            continue
    return total


def lockdown(paths: list[str]) -> list[tuple[str, int]]:
    """Without mount namespaces, make private folders unreadable to other uids; returns what to restore."""
    changed = []
    for p in paths:
        try:
            mode = os.stat(p).st_mode & 0o7777
        except OSError:
            continue
        if mode & 0o007:
            os.chmod(p, mode & ~0o007)
            changed.append((p, mode))
    return changed


class Worker:
    """One sandboxed worker process: ``request`` sends a message, ``events`` yields its replies."""

    def __init__(self, cfg: SandboxConfig, *, uid: int, mode: str, name: str, startup_timeout: float = 120):
        self.cfg = cfg
        self.uid = uid
        self.mode = mode
        self.dir = cfg.root / name
        if self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)
        sweep(uid)
        if cfg.triton_seed:
            shutil.copytree(cfg.triton_seed, self.dir / ".triton")
            for path in [self.dir, *self.dir.rglob("*")]:
                os.lchown(path, uid, uid)
        ctx = _context()
        ours, theirs = ctx.Pipe(duplex=True)
        out_r, out_w = ctx.Pipe(duplex=False)
        conf = {"mode": mode, "uid": uid, "sandbox": str(self.dir), "hide": cfg.hide, "keep": cfg.keep,
                "paths": cfg.paths, "address_space": cfg.memory_limit + (8 << 30) if mode != "gpu" else None,
                "gpu_memory_fraction": cfg.gpu_memory_fraction}
        from . import worker

        self.proc = _Process(target=worker.main, args=(conf, theirs, out_w), name=f"grader-{name}", daemon=True)
        self.started = time.time()
        self.proc.start()
        theirs.close()
        out_w.close()
        self._out = bytearray()
        self._out_total = 0
        self._drain = threading.Thread(target=self._read_output, args=(out_r,), daemon=True)
        self._drain.start()
        self.conn = ours
        self.pid = self.proc.pid
        self.hello = self.recv(startup_timeout, what="starting the sandbox")
        self.isolation = self.hello.get("isolation", "?")

    def send(self, message: dict) -> None:
        try:
            self.conn.send_bytes(wire.encode(message))
        except (OSError, EOFError, BrokenPipeError):
            raise WorkerDied(self._death("while receiving its inputs")) from None

    def recv(self, timeout: float, *, what: str = "") -> dict:
        """The next message, within ``timeout`` seconds; kills the worker on a timeout, a crash or too much memory."""
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                self.kill()
                raise WorkerTimeout(f"stopped after {timeout:.0f} s{' ' + what if what else ''}: an infinite loop, "
                                    "a hung kernel or far too much work (the worker was killed)")
            try:
                ready = self.conn.poll(min(0.25, left))
            except (OSError, EOFError):
                ready = True
            if ready:
                try:
                    data = self.conn.recv_bytes(self.cfg.message_cap)
                except (EOFError, OSError):
                    raise WorkerDied(self._death(what)) from None
                try:
                    return wire.decode(data)
                except wire.WireError as e:
                    self.kill()
                    raise WorkerDied(f"sent a malformed message ({e})") from None
            if not self.proc.is_alive():
                raise WorkerDied(self._death(what))
            if self.cfg.memory_limit and _rss(self.uid) > self.cfg.memory_limit:
                self.kill()
                raise WorkerDied(f"ran out of host memory: more than {self.cfg.memory_limit / 2**30:.1f} GiB "
                                 f"resident{' ' + what if what else ''} (the worker was killed)")

    def _death(self, what: str) -> str:
        self.proc.join(timeout=5)
        code = self.proc.exitcode
        self.kill()
        where = f" {what}" if what else ""
        if code is None:
            return f"the worker stopped answering{where}"
        if code < 0:
            sig = signal.Signals(-code)
            return f"the process died of {_SIGNALS.get(sig, sig.name)}{where}"
        tail = ""
        if not hasattr(self, "hello"):
            self._drain.join(timeout=2)
            lines = [ln for ln in self.output().splitlines() if ln.strip()]
            tail = f": {' | '.join(lines[-3:])}" if lines else ""
        return f"the process exited with code {code}{where} (os._exit, sys.exit or a fatal error){tail}"

    def _read_output(self, conn) -> None:
        fd = conn.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            self._out_total += len(chunk)
            room = self.cfg.output_cap - len(self._out)
            if room > 0:
                self._out += chunk[:room]
        conn.close()

    def output(self) -> str:
        """What the student's code printed, stdout and stderr together, capped at ``output_cap`` bytes."""
        text = bytes(self._out).decode("utf-8", "replace")
        if self._out_total > len(self._out):
            text += f"\n[... {self._out_total - len(self._out)} more bytes of output not kept]"
        return text

    def alive(self) -> bool:
        return self.proc.is_alive()

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=10)
        sweep(self.uid)

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self.send({"op": "stop"})
                self.proc.join(timeout=5)
            except WorkerDied:
                pass
        self.kill()
        try:
            self.conn.close()
        except OSError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
