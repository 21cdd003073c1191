"""Starting, watching and killing sandboxed workers (the trusted side of :mod:`grader.worker`).

The sandbox is bubblewrap (``bwrap``, Debian's ``bubblewrap``), used as an allowlist: a worker's file system holds
only the Python environment (read-only), the ``kernels`` package (read-only; without ``kernels/checks`` for the
notebook's code), the worker's own code, ``/proc``, a minimal ``/dev`` (plus the GPU's device nodes in GPU mode)
and, per worker, a private ``/tmp`` and ``/dev/shm`` of ``tmp_size`` and ``shm_size`` bytes. It has no network,
its own PID, IPC and UTS namespaces, and dies with the grader. The collect folder, other students' notebooks,
the instructor's sources, the release and the gradebook are not in it at all.

One bubblewrap *template* per kind of worker (kernels, the sm_90 compile, the notebook's code) imports torch,
Triton and the package once, as root inside the sandbox; each problem then gets a *fresh* worker forked from it
(a fraction of a second), which mounts its own ``/tmp`` and ``/dev/shm`` and drops to the slot's uid for good
before it touches student code. Nothing a problem does (patched functions, files, shared memory, daemons) is seen
by the next one: the worker is killed with every process of its uid when its problem ends.

Each worker has a wall-clock budget per request and a memory ceiling (``RLIMIT_AS`` without a GPU, and on every
machine a watchdog over the resident memory of all processes of its uid plus what its ``/tmp`` and ``/dev/shm``
hold). Messages are size-capped (``message_cap``; a larger one is refused unread) and decoded by
:mod:`grader.wire` (no pickle).
"""

from __future__ import annotations

import array
import atexit
import fcntl
import glob
import json
import os
import pathlib
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from . import wire
from .layout import ROOT as _ROOT

__all__ = ["SandboxConfig", "SetupError", "Worker", "WorkerDied", "WorkerTimeout", "sweep", "bwrap_path", "bwrap_args"]

_SIGNALS = {signal.SIGSEGV: "a segmentation fault (SIGSEGV)", signal.SIGBUS: "a bus error (SIGBUS)",
            signal.SIGABRT: "an abort (SIGABRT)", signal.SIGFPE: "a floating-point exception (SIGFPE)",
            signal.SIGILL: "an illegal instruction (SIGILL)", signal.SIGKILL: "SIGKILL",
            signal.SIGTERM: "SIGTERM", signal.SIGXCPU: "the CPU time limit (SIGXCPU)"}
#: What the notebook's code sees as ``kernels.checks``: ``check`` does nothing there (graded cells are judged by
#: the grader, never run), and nothing of the checks, their references or the lessons' specs exists.
_CHECKS_STUB = '''"""Stands in for kernels.checks while a notebook is graded: the grader judges graded cells itself."""


class CheckFailed(AssertionError):
    pass


def check(exercise_id, *objects, hidden=False):
    return None


def guard_launches(on=True):
    return False  # nothing to guard here: the grader runs each graded kernel in a worker of its own


def value_problem(exercise_id, *values):
    return None  # the grader judges value answers itself


def describe_error(e):
    text = (str(e).strip().splitlines() or [""])[0]  # a try-it cell's message: read by no one while graded
    return type(e).__name__ + (f": {text}" if text else "")
'''

#: Packages whose code computes what graded functions must compute themselves (the references, the package's
#: kernels and their Python entry points, the export's launch rules): in the notebook's sandbox each is replaced
#: by a stub, so its imports still succeed (a lesson's setup cell imports a reference to compare with) but every
#: name in it, in any of its modules, raises when called. ``fla`` too, where installed.
CLOSED_PACKAGES = ("linear_attention", "recurrent", "matmul", "memory", "vector_add", "export")
CLOSED_ELSEWHERE = ("fla",)
_CLOSED_STUB = '''"""Closed while a notebook is graded: graded answers cannot call the package's references."""

import importlib.abc
import importlib.machinery
import sys

__path__ = []


def _closed(name):
    def closed(*args, **kwargs):
        raise RuntimeError(f"{name} is not available while your notebook is graded (graded answers are your own "
                           "code; the package's references and kernels are closed to them)")
    closed.__name__ = closed.__qualname__ = name.rsplit(".", 1)[-1]
    return closed


def _getattr(module):
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _closed(f"{module}.{name}")
    return __getattr__


__getattr__ = _getattr(__name__)


class _Closed(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, prefix):
        self.prefix = prefix + "."

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(self.prefix):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__path__ = []
        module.__getattr__ = _getattr(module.__name__)


sys.meta_path.insert(0, _Closed(__name__))
'''


def _closed_binds(cfg: SandboxConfig, kernels: pathlib.Path) -> list[str]:
    """bubblewrap arguments that put :data:`_CLOSED_STUB` in place of each closed package."""
    import importlib.util

    stub = cfg.root / "closed-stub.py"
    stub.write_text(_CLOSED_STUB)
    dirs = [kernels / name for name in CLOSED_PACKAGES if (kernels / name).is_dir()]
    for name in CLOSED_ELSEWHERE:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        for d in (spec.submodule_search_locations or []) if spec is not None else []:
            d = pathlib.Path(d)
            if d.is_dir() and any(d.resolve().is_relative_to(pathlib.Path(e).resolve()) for e in cfg.environment):
                dirs.append(d)
    out = []
    for d in dirs:
        out += ["--tmpfs", str(d), "--ro-bind", str(stub), str(d / "__init__.py")]
    return out


class SetupError(RuntimeError):
    """The grading machine cannot grade at all (no submission's fault): said once, before anything is graded."""


class WorkerDied(RuntimeError):
    """The worker ended or was killed; ``str()`` says why, in words a student can act on."""


class WorkerTimeout(WorkerDied):
    """The worker ran past its budget and was killed."""


def bwrap_path() -> str:
    """The bubblewrap binary, or a :class:`SetupError` that says how to install it."""
    path = shutil.which("bwrap")
    if path is None:
        raise SetupError("the grader's sandbox needs bubblewrap (`bwrap`), which is not installed: "
                         "`apt-get install -y bubblewrap` (Debian/Ubuntu) or `dnf install bubblewrap`; nothing was "
                         "graded")
    return path


def libcuda_dir() -> str | None:
    """The folder of the CUDA driver library (``libcuda.so.1``), as Triton looks for it: ``TRITON_LIBCUDA_PATH``,
    else the linker cache (``/sbin/ldconfig -p``), else ``LD_LIBRARY_PATH``. Found here, by the grader: inside the
    sandbox ``ldconfig -p`` fails for the worker's uid where the cache is readable by root alone (an image built
    with umask 077), and Triton cannot build its launcher without the folder."""
    found = os.environ.get("TRITON_LIBCUDA_PATH")
    if found:
        return found
    try:
        out = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    dirs = [os.path.dirname(line.split()[-1]) for line in out.splitlines() if "libcuda.so.1" in line]
    dirs += [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    return next((d for d in dirs if os.path.exists(os.path.join(d, "libcuda.so.1"))), None)


def _environment() -> list[str]:
    """The read-only folders a worker needs besides the system: the Python installation, the environment and
    anything else on ``sys.path`` outside the checkout (never the checkout itself: ``kernels/`` is bound alone)."""
    out = []
    for p in dict.fromkeys([sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path]):
        if not p or not os.path.exists(p):
            continue
        path = pathlib.Path(p).resolve()
        if path == _ROOT or (_ROOT in path.parents and not _inside(path, pathlib.Path(sys.prefix).resolve())):
            continue
        if str(path).startswith(("/usr/", "/proc", "/dev")) or str(path) == "/":
            continue
        if path in _never_bound() or _inside(_ROOT, path):  # /tmp itself, a home, the checkout's parents
            continue
        out.append(str(path))
    exe = pathlib.Path(sys.executable)
    for p in (exe.parent, exe.resolve().parent):
        if not str(p).startswith("/usr/"):
            out.append(str(p))
    prefix = pathlib.Path(sys.prefix)
    if (prefix / "pyvenv.cfg").is_file() and prefix.resolve() != prefix:
        # a virtualenv reached through a symlink (`.venv -> elsewhere`): Python finds its site-packages from
        # pyvenv.cfg beside the interpreter's folder as it was started, so the link's path is bound whole too
        out.append(str(prefix))
    # keep the outermost of nested folders only
    out = sorted(set(out), key=len)
    kept: list[str] = []
    for p in out:
        if not any(_inside(pathlib.Path(p), pathlib.Path(k)) for k in kept):
            kept.append(p)
    return kept


def sandbox_pythonpath(cfg: SandboxConfig) -> str:
    """``PYTHONPATH`` inside the sandbox: the checkout (of which only ``kernels/`` and the worker's own files are
    bound), then the grader's own ``PYTHONPATH`` entries that are bound read-only. ``--clearenv`` drops the
    grader's variables, so without this a checkout that is not pip-installed (the project put on ``PYTHONPATH``, as on
    a GPU machine whose image holds torch) could not import ``grader.worker`` inside."""
    bound = [pathlib.Path(p) for p in cfg.environment]
    out = [str(_ROOT)]
    for p in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if p and os.path.isdir(p) and any(_inside(pathlib.Path(p).resolve(), b.resolve()) for b in bound):
            out.append(p)
    return os.pathsep.join(dict.fromkeys(out))


def _under_tmp(cfg: SandboxConfig) -> list[str]:
    """What a worker binds back over its fresh private /tmp: the environment's folders there and, for a checkout
    under /tmp, the checkout as the sandbox shows it (``kernels/`` with its stubs, the worker's own files), its
    folder first."""
    ours = [str(_ROOT)] if _inside(_ROOT, pathlib.Path("/tmp")) else []
    return ours + [p for p in cfg.environment if (p == "/tmp" or p.startswith("/tmp/"))
                   and not any(_inside(pathlib.Path(p), pathlib.Path(o)) for o in ours)]


def _never_bound() -> set[pathlib.Path]:
    """Folders on ``sys.path`` that hold far more than Python packages: the temp folder, homes, and the folder of
    the script that started the grader (``python /somewhere/script.py`` puts it first on ``sys.path``)."""
    out = {pathlib.Path(tempfile.gettempdir()).resolve(), pathlib.Path.home().resolve(), pathlib.Path("/root"),
           pathlib.Path("/home")}
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main:
        folder = pathlib.Path(main).resolve().parent
        if folder.name not in ("site-packages", "dist-packages"):
            out.add(folder)
    return out


def _inside(path: pathlib.Path, folder: pathlib.Path) -> bool:
    return path == folder or folder in path.parents


@dataclass
class SandboxConfig:
    """What every worker of one grading run shares."""

    mode: str  # "gpu" or "interpreter"
    root: pathlib.Path | None = None  # a folder of its own by default, removed by close()
    environment: list[str] = field(default_factory=_environment)
    lessons: str | None = None  # a folder of extra lesson specs (l90_*.py), bound read-only for kernels and compile
    memory_limit: int = 6 << 30
    uid_base: int = 61000
    output_cap: int = 64 << 10
    message_cap: int = 8 << 20
    tmp_size: int = 256 << 20
    shm_size: int = 256 << 20
    gpu_memory_fraction: float | None = None
    libcuda: str | None = None  # GPU mode: the CUDA driver library's folder, given to Triton inside (libcuda_dir)

    def __post_init__(self):
        if self.mode == "gpu" and self.libcuda is None:
            self.libcuda = libcuda_dir()
        self.owned = self.root is None
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="grader-sandbox-") if self.root is None else self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self.seed = self.root / "triton-seed"
        self.seed.mkdir(exist_ok=True)
        self.caches = self.root / "cache"  # one Triton cache per submission and worker kind (grade.py)
        # the notebooks' caches, in a folder of their own: a notebook's sandbox never has the kernels' folder
        self.notebook_caches = self.root / "cache-notebook"
        for d in (self.caches, self.notebook_caches):
            d.mkdir(exist_ok=True)
            os.chmod(d, 0o700)
        self._lock = None
        self.uid_base = self._claim(self.uid_base)
        self._templates: dict[str, _Template] = {}
        self._tlock = threading.Lock()
        atexit.register(self.close)

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

    def template(self, profile: str, mode: str) -> _Template:
        key = f"{profile}-{mode}"
        with self._tlock:
            t = self._templates.get(key)
            if t is None or not t.alive():
                t = _Template(self, profile, mode)
                self._templates[key] = t
            return t

    def start(self, *kinds: tuple[str, str]) -> None:
        """Start the templates of ``kinds`` ((profile, mode) pairs) at once, so their imports overlap."""
        for profile, mode in kinds:
            self.template(profile, mode)

    def close(self) -> None:
        with self._tlock:
            for t in self._templates.values():
                t.close()
            self._templates.clear()
            if self.owned:
                shutil.rmtree(self.root, ignore_errors=True)


_LD_CACHE = "/etc/ld.so.cache"


def readable_copy(cfg: SandboxConfig, path: str) -> str:
    """``path`` itself where any uid may read it, else a copy under the sandbox root that any may. The linker cache
    of an image built with umask 077 is root's alone: inside the sandbox every library opened by name then fails
    to load (Triton's libcuda lookup, torch's libnvidia-ml when it reports an out-of-memory error)."""
    try:
        if os.stat(path).st_mode & 0o004:
            return path
    except OSError:
        return path  # absent: --ro-bind-try leaves it out
    copy = cfg.root / f"readable-{pathlib.Path(path).name}"
    if not copy.exists():
        tmp = copy.with_suffix(".part")
        shutil.copyfile(path, tmp)
        tmp.chmod(0o644)
        tmp.replace(copy)
    return str(copy)


def bwrap_args(cfg: SandboxConfig, profile: str, mode: str) -> list[str]:
    """The bubblewrap command line, up to and including ``--``, of a ``profile`` sandbox in ``mode``."""
    a = [bwrap_path(), "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
         "--unshare-uts", "--unshare-cgroup-try", "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETUID",
         "--cap-add", "CAP_SETGID", "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
         "--ro-bind", "/usr", "/usr"]
    for top in ("bin", "lib", "lib32", "lib64", "sbin"):
        p = pathlib.Path("/") / top
        if p.is_symlink():
            a += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            a += ["--ro-bind", str(p), str(p)]
    if profile == "compile":  # cargo's linker is /usr/bin/cc -> /etc/alternatives/cc: /etc must be open
        a += ["--perms", "0755", "--dir", "/etc"]
    a += ["--ro-bind-try", readable_copy(cfg, _LD_CACHE), "/etc/ld.so.cache"]
    for e in ("ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf", "localtime", "hosts"):
        a += ["--ro-bind-try", f"/etc/{e}", f"/etc/{e}"]
    a += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/dev/shm"]
    for p in cfg.environment:
        a += ["--ro-bind", p, p]
    kernels = _ROOT / "kernels"
    a += ["--ro-bind", str(kernels), str(kernels)]
    if profile == "notebook":
        stub = cfg.root / "checks-stub.py"
        stub.write_text(_CHECKS_STUB)
        a += ["--tmpfs", str(kernels / "checks"), "--ro-bind", str(stub), str(kernels / "checks" / "__init__.py")]
        a += _closed_binds(cfg, kernels)
    elif cfg.lessons:
        a += ["--ro-bind", str(cfg.lessons), "/grader/lessons"]
    for f in ("__init__.py", "worker.py", "wire.py"):  # the worker's own code, nothing else of the grader
        a += ["--ro-bind", str(_ROOT / "grader" / f), str(_ROOT / "grader" / f)]
    a += ["--ro-bind", str(cfg.seed), "/grader/triton-seed"]
    a += ["--bind", str(cfg.notebook_caches if profile == "notebook" else cfg.caches), "/grader/cache"]
    if mode == "gpu":
        for dev in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*")):
            a += ["--dev-bind", dev, dev]
        a += ["--ro-bind", "/sys", "/sys"]
        for e in ("nvidia", "OpenCL", "vulkan"):
            a += ["--ro-bind-try", f"/etc/{e}", f"/etc/{e}"]
        lib = cfg.libcuda
        if lib:
            if not _inside(pathlib.Path(lib), pathlib.Path("/usr")):
                a += ["--ro-bind-try", lib, lib]
            a += ["--setenv", "TRITON_LIBCUDA_PATH", lib]
    # the worker's uid has no passwd entry: USER and LOGNAME answer getpass.getuser() (torch asks it on the first
    # call of a function under torch.compiler.disable; without them it raises KeyError)
    a += ["--setenv", "USER", "student", "--setenv", "LOGNAME", "student"]
    a += ["--chdir", "/tmp", "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp",
          "--setenv", "TRITON_CACHE_DIR", "/tmp/.triton", "--setenv", "OMP_NUM_THREADS", "1",
          "--setenv", "MKL_NUM_THREADS", "1", "--setenv", "MPLBACKEND", "Agg", "--setenv", "KERNELS_GRADING", "1",
          "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--setenv", "PYTORCH_NVML_BASED_CUDA_CHECK", "1"]
    for k in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"):
        if k in os.environ:
            a += ["--setenv", k, os.environ[k]]
    a += ["--setenv", "PYTHONPATH", sandbox_pythonpath(cfg)]
    if profile == "compile":
        a += _rust_toolchain()
    return _with_parents(a) + ["--"]


class _Template:
    """One bubblewrap sandbox whose root process has imported everything and forks a worker per request."""

    def __init__(self, cfg: SandboxConfig, profile: str, mode: str):
        self.cfg, self.profile, self.mode = cfg, profile, mode
        self.lock = threading.Lock()
        self.cond = threading.Condition()
        self.exits: dict[int, int] = {}
        self.spawned: set[int] = set()
        self.next_id = 0
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ctrl = ours
        self.log = open(cfg.root / f"template-{profile}-{mode}.log", "w+b")
        conf = {"profile": profile, "mode": mode, "env": {"PYTHONPATH": sandbox_pythonpath(cfg)},
                "ctrl": theirs.fileno()}
        args = bwrap_args(cfg, profile, mode) + [sys.executable, "-m", "grader.worker", json.dumps(conf)]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     pass_fds=(theirs.fileno(),))
        theirs.close()
        self.buf = b""
        self.ready = threading.Event()
        self.failed: str | None = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = self.ctrl.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                with self.cond:
                    self.failed = self.failed or "the sandbox template ended"
                    self.ready.set()
                    self.cond.notify_all()
                return
            self.buf += data
            while len(self.buf) >= 4 and len(self.buf) >= 4 + struct.unpack("<I", self.buf[:4])[0]:
                n = struct.unpack("<I", self.buf[:4])[0]
                msg, self.buf = json.loads(self.buf[4: 4 + n]), self.buf[4 + n:]
                with self.cond:
                    ev = msg.get("event")
                    if ev == "ready":
                        self.ready.set()
                    elif ev == "spawned":
                        self.spawned.add(msg["id"])
                    elif ev == "exit":
                        self.exits[msg["id"]] = msg["status"]
                    self.cond.notify_all()

    def alive(self) -> bool:
        return self.proc.poll() is None and self.failed is None

    def wait_ready(self, timeout: float) -> None:
        if not self.ready.wait(timeout) or self.failed:
            self.log.flush()
            self.log.seek(0)
            tail = self.log.read()[-2000:].decode("utf-8", "replace").strip()
            self.close()
            within = "" if self.failed else f" within {timeout:.0f} s"
            raise SetupError(f"the {self.profile} sandbox (bubblewrap, {self.mode}) did not start{within}: "
                             f"{tail or self.failed}")

    def spawn(self, request: dict, conn_fd: int, out_fd: int, timeout: float) -> int:
        self.wait_ready(timeout)
        with self.lock:
            ident = self.next_id
            self.next_id += 1
            body = json.dumps(dict(request, id=ident)).encode()
            fds = array.array("i", [conn_fd, out_fd])
            try:
                self.ctrl.sendmsg([struct.pack("<I", len(body)) + body],
                                  [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())])
            except OSError as e:
                raise SetupError(f"the {self.profile} sandbox template is gone ({e})") from None
        return ident

    def kill(self, ident: int) -> None:
        body = json.dumps({"op": "kill", "id": ident}).encode()
        with self.lock:
            try:
                self.ctrl.sendall(struct.pack("<I", len(body)) + body)
            except OSError:
                pass

    def exit_status(self, ident: int, timeout: float) -> int | None:
        deadline = time.time() + timeout
        with self.cond:
            while ident not in self.exits and time.time() < deadline and self.failed is None:
                self.cond.wait(max(0.0, deadline - time.time()))
            return self.exits.pop(ident, None)

    def close(self) -> None:
        try:
            self.ctrl.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.log.close()


def _rust_toolchain() -> list[str]:
    """What the compile sandbox needs to build lesson 05's Rust exercise, where this machine has cargo: the
    toolchain (rustup's, or the system's under /usr) and the workbook's crate, read-only; cargo first on ``PATH``,
    its home and jobs in the worker's own ``/tmp``. Without cargo, nothing (the exercise is "not graded")."""
    from kernels.export.rust_exercise import cargo

    exe = cargo()
    if exe is None:
        return []
    rustc = pathlib.Path(exe).with_name("rustc")
    try:
        sysroot = subprocess.run([str(rustc) if rustc.exists() else "rustc", "--print", "sysroot"],
                                 capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return []
    if not sysroot or not (pathlib.Path(sysroot) / "bin" / "cargo").is_file():
        return []
    a = [] if sysroot.startswith("/usr/") or sysroot == "/usr" else ["--ro-bind", sysroot, sysroot]
    crate = _ROOT / "rust"
    for part in ("Cargo.toml", "Cargo.lock", "src", "exercise", "tests/fixtures"):
        a += ["--ro-bind-try", str(crate / part), str(crate / part)]
    return a + ["--setenv", "PATH", f"{sysroot}/bin:/usr/local/bin:/usr/bin:/bin", "--setenv", "CARGO_HOME",
                "/tmp/.cargo", "--setenv", "CARGO_BUILD_JOBS", "2"]


def _with_parents(args: list[str]) -> list[str]:
    """bubblewrap creates the missing parents of a mount point private to root (0700): declare them 0755 first,
    so the sandbox uid can reach what is bound below them (and nothing else is in them)."""
    made: set[str] = {"/", "/usr", "/proc", "/dev", "/tmp", "/etc"}
    parents: list[str] = []
    dests = [args[i + 2] for i, x in enumerate(args) if x in ("--ro-bind", "--ro-bind-try", "--bind", "--dev-bind")]
    dests += [args[i + 1] for i, x in enumerate(args) if x == "--tmpfs"]
    for d in dests:
        for anc in reversed(pathlib.PurePosixPath(d).parents):
            if str(anc) not in made:
                made.add(str(anc))
                parents += ["--perms", "0755", "--dir", str(anc)]
    # after the private /tmp: declared before it, the folders of a checkout under /tmp would be hidden by it and
    # made again by bubblewrap, private to root
    at = next((i + 2 for i, x in enumerate(args) if x == "--tmpfs" and args[i + 1] == "/tmp"), 1)
    return args[:at] + parents + args[at:]


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


def _memory(uid: int) -> int:
    """Resident memory of every process of ``uid``, plus what its private /tmp and /dev/shm hold (files there
    are memory too, whether or not a process maps them)."""
    total, seen = 0, False
    for pid in _pids_of(uid):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            if not seen:
                for d in ("tmp", "dev/shm"):
                    st = os.statvfs(f"/proc/{pid}/root/{d}")
                    total += (st.f_blocks - st.f_bfree) * st.f_frsize
                seen = True
        except (OSError, ValueError):
            continue
    return total


class Worker:
    """One sandboxed worker process: ``request`` sends a message, ``events`` yields its replies.

    ``kind`` is ``kernel`` (runs rebuilt kernels), ``compile`` (the sm_90 compile) or ``notebook`` (the
    notebook's code, in a sandbox without ``kernels.checks``)."""

    def __init__(self, cfg: SandboxConfig, *, uid: int, mode: str, name: str, kind: str | None = None,
                 startup_timeout: float = 120, cache: str | None = None):
        self.cfg = cfg
        self.uid = uid
        self.mode = mode
        self.kind = kind or ("compile" if mode == "compile" else "kernel")
        self.name = name
        sweep(uid)
        self.template = cfg.template(self.kind, mode)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe()
        request = {"uid": uid, "tmp_size": cfg.tmp_size, "shm_size": cfg.shm_size,
                   "address_space": cfg.memory_limit + (8 << 30) if mode != "gpu" else None,
                   "gpu_memory_fraction": cfg.gpu_memory_fraction, "profile": self.kind, "cache": cache,
                   "under_tmp": _under_tmp(cfg)}
        self.started = time.time()
        try:
            self.ident = self.template.spawn(request, theirs.fileno(), out_w, startup_timeout)
        finally:
            theirs.close()
            os.close(out_w)
        self._out = bytearray()
        self._out_total = 0
        self._drain = threading.Thread(target=self._read_output, args=(out_r,), daemon=True)
        self._drain.start()
        self.conn = ours
        self._exit: int | None = None
        self._dead = False
        self.hello = self.recv(startup_timeout, what="starting the sandbox")
        self.isolation = self.hello.get("isolation", "?")

    def send(self, message: dict) -> None:
        try:
            wire.send_frame(self.conn, wire.encode(message))
        except (OSError, EOFError, BrokenPipeError):
            raise WorkerDied(self._death("while receiving its inputs")) from None

    def _status(self, wait: float) -> int | None:
        if self._exit is None:
            self._exit = self.template.exit_status(self.ident, wait)
        return self._exit

    def recv(self, timeout: float, *, what: str = "", cap: int | None = None) -> dict:
        """The next message, within ``timeout`` seconds; kills the worker on a timeout, a crash, too much memory
        or a message over ``cap`` bytes (``message_cap`` by default)."""
        import select

        deadline = time.time() + timeout
        cap = cap or self.cfg.message_cap
        while True:
            left = deadline - time.time()
            if left <= 0:
                self.kill()
                raise WorkerTimeout(f"stopped after {timeout:.0f} s{' ' + what if what else ''}: an infinite loop, "
                                    "a hung kernel or far too much work (the worker was killed)")
            ready, _, _ = select.select([self.conn], [], [], min(0.25, left))
            if ready:
                self.conn.settimeout(max(5.0, left))
                try:
                    data = wire.recv_frame(self.conn, cap)
                except wire.TooLarge as e:
                    self.kill()
                    raise WorkerDied(f"sent {e} (the worker was killed; results are small: return only what the "
                                     "exercise asks for)") from None
                except (EOFError, OSError):
                    raise WorkerDied(self._death(what)) from None
                finally:
                    self.conn.settimeout(None)
                try:
                    return wire.decode(data)
                except wire.WireError as e:
                    self.kill()
                    raise WorkerDied(f"sent a malformed message ({e})") from None
            if self._status(0) is not None:
                raise WorkerDied(self._death(what))
            if self.cfg.memory_limit and _memory(self.uid) > self.cfg.memory_limit:
                self.kill()
                raise WorkerDied(f"ran out of host memory: more than {self.cfg.memory_limit / 2**30:.1f} GiB "
                                 f"resident or in /tmp and /dev/shm{' ' + what if what else ''} (the worker was "
                                 "killed)")

    def _death(self, what: str) -> str:
        code = self._status(5)
        self.kill()
        where = f" {what}" if what else ""
        if code is None:
            return f"the worker stopped answering{where}"
        if code < 0:
            sig = signal.Signals(-code)
            return f"the process died of {_SIGNALS.get(sig, sig.name)}{where}"
        tail = ""
        if not hasattr(self, "hello"):
            lines = self.output_tail(3)
            tail = f": {' | '.join(lines)}" if lines else ""
        return f"the process exited with code {code}{where} (os._exit, sys.exit or a fatal error){tail}"

    def _read_output(self, fd: int) -> None:
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
        os.close(fd)

    def output(self) -> str:
        """What the student's code printed, stdout and stderr together, capped at ``output_cap`` bytes."""
        text = bytes(self._out).decode("utf-8", "replace")
        if self._out_total > len(self._out):
            text += f"\n[... {self._out_total - len(self._out)} more bytes of output not kept]"
        return text

    def output_tail(self, n: int) -> list[str]:
        """The last ``n`` non-blank lines of ``output()``, once the worker's output has drained (2 s at most)."""
        self._drain.join(timeout=2)
        return [ln for ln in self.output().splitlines() if ln.strip()][-n:]

    def alive(self) -> bool:
        return not self._dead and self._status(0) is None

    def kill(self) -> None:
        self._dead = True
        self.template.kill(self.ident)
        sweep(self.uid)

    def close(self) -> None:
        if self.alive():
            try:
                self.send({"op": "stop"})
                self._status(5)
            except WorkerDied:
                pass
        self.kill()
        try:
            self.conn.close()
        except OSError:
            pass
