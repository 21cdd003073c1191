"""The sandboxed side: a worker confines itself, then runs student objects on the grader's inputs.

A worker is forked (from a server that has imported torch and nothing of the course) as root, and before it
touches any student code it: starts its own session (so the grader can kill its whole process group), hides the
course folder behind an empty file system in a private mount namespace (keeping only the Python environment and
the ``kernels`` package, read-only), sets resource limits, drops to an unprivileged uid of its own with no
supplementary groups and ``no_new_privs``, closes every inherited descriptor but its channel, sends stdout and
stderr to a capped file and scrubs the environment. Then it imports Triton in its mode and serves one of:

- ``kernel``: rebuilt kernels (source text the grader built from the notebook) launched by the exercise's own
  ``run`` on inputs the grader sends; the raw output buffers go back, guard bands included, to be judged there;
- ``compile``: the ahead-of-time sm_90 compile of every launch a check makes (interpreter mode only);
- ``notebook``: the notebook's cells that the graded names need, executed in IPython, then values and calls.

It never sees a reference output, a hidden test's source, the gradebook or another student's files.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import resource
import signal
import sys
import time
import traceback

import torch

from . import wire

__all__ = ["main"]

_CLONE_NEWNS, _CLONE_NEWNET = 0x00020000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REMOUNT, _MS_REC, _MS_PRIVATE = 1, 2, 4, 4096, 32, 16384, 1 << 18
_PR_SET_NO_NEW_PRIVS, _PR_SET_PDEATHSIG = 38, 1


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _mount(libc, src, dst, fstype, flags, data=None) -> None:
    r = libc.mount(src.encode() if src else None, dst.encode(), fstype.encode() if fstype else None,
                   ctypes.c_ulong(flags), data.encode() if data else None)
    if r != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} -> {dst}: {os.strerror(err)}")


def _hide(cfg: dict) -> str:
    """Cover ``cfg['hide']`` with empty file systems, binding ``cfg['keep']`` back (read-only but for
    ``cfg['writable']``, the worker's own folder); report how."""
    hide, keep, writable = cfg.get("hide") or [], cfg.get("keep") or [], cfg.get("writable") or []
    os.chdir("/")
    if not hide:
        return "none"
    libc = _libc()
    how = "mount and network namespaces"
    if libc.unshare(_CLONE_NEWNS | _CLONE_NEWNET) != 0:
        how = "mount namespace"
        if libc.unshare(_CLONE_NEWNS) != 0:
            return "permissions"
    handles = {p: os.open(p, os.O_PATH) for p in keep if os.path.exists(p)}
    done = []
    try:
        _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE)
        for h in hide:
            if os.path.isdir(h):
                _mount(libc, "tmpfs", h, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
                done.append(h)
        for p, fd in handles.items():
            os.makedirs(p, exist_ok=True)
            _mount(libc, f"/proc/self/fd/{fd}", p, None, _MS_BIND | _MS_REC)
            done.append(p)
            if p not in writable:
                _mount(libc, None, p, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_REC)
    except OSError:
        for p in reversed(done):
            libc.umount2(p.encode(), 2)
        return "permissions"
    finally:
        for fd in handles.values():
            os.close(fd)
    return how


def _confine(cfg: dict, keep_fd: int, out_fd: int) -> str:
    os.setsid()
    libc = _libc()
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    box = cfg["sandbox"]
    uid = gid = int(cfg["uid"])
    for d in (box, os.path.join(box, "tmp"), os.path.join(box, ".triton")):
        os.makedirs(d, exist_ok=True)
        os.chown(d, uid, gid)
        os.chmod(d, 0o700)
    how = _hide(dict(cfg, keep=list(cfg.get("keep") or []) + list(cfg.get("paths") or []) + [box], writable=[box]))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.closerange(3, keep_fd)
    os.closerange(keep_fd + 1, 65536)
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, int(cfg.get("nproc", 256))),
              (resource.RLIMIT_FSIZE, int(cfg.get("fsize", 64 << 20))), (resource.RLIMIT_NOFILE, 4096)]
    if cfg.get("address_space"):
        limits.append((resource.RLIMIT_AS, int(cfg["address_space"])))
    for which, value in limits:
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    os.chdir(box)
    keep_env = {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "PATH") if k in os.environ}
    os.environ.clear()
    os.environ.update(keep_env)
    os.environ.update(HOME=box, TMPDIR=os.path.join(box, "tmp"), TRITON_CACHE_DIR=os.path.join(box, ".triton"),
                      OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg", KERNELS_GRADING="1",
                      PYTHONDONTWRITEBYTECODE="1", PYTORCH_NVML_BASED_CUDA_CHECK="1")
    if cfg["mode"] in ("interpreter", "compile"):
        os.environ["TRITON_INTERPRET"] = "1" if cfg["mode"] == "interpreter" else "0"
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    sys.path[:] = [p for p in sys.path if p] + [p for p in cfg.get("paths", []) if p not in sys.path]
    return how


class _Channel:
    def __init__(self, conn):
        self.conn = conn

    def send(self, message: dict) -> None:
        self.conn.send_bytes(wire.encode(message))

    def recv(self) -> dict:
        return wire.decode(self.conn.recv_bytes())


def _error(e: BaseException) -> dict:
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return {"type": type(e).__name__, "message": str(e)[:4000], "traceback": "".join(tb)[-6000:]}


def _flush():
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except (OSError, ValueError):
            pass


def _sync():
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _cuda_broken(e: BaseException) -> bool:
    text = f"{type(e).__name__} {e}"
    return any(s in text for s in ("CUDA error", "cudaError", "illegal memory access", "CUDA_ERROR",
                                   "device-side assert", "misaligned address"))


def _cuda_health(err: BaseException | None) -> str | None:
    """Why this process can no longer use the GPU, or None. A faulting kernel (an illegal address, a trap)
    leaves a sticky error in the CUDA context: every later call fails with it, so a notebook cell that caught
    the error itself (``try: kernel[grid](...) except Exception: ...``) would still break every problem after
    it. The synchronize surfaces the error of launches still in flight, too."""
    if err is not None and _cuda_broken(err):
        return f"{type(err).__name__}: {str(err)[:300]}"
    try:
        _sync()
    except BaseException as e:  # noqa: BLE001 (whatever the context raises, it is unusable)
        return f"{type(e).__name__}: {str(e)[:300]}"
    return None


# ---- kernel problems ---------------------------------------------------------------------------------------

def _kernel_args(ex, req, folder, interpret):
    from kernels.checks.provenance import KernelSource, load

    args = []
    for kind, ks, value in zip(ex.args, req["kernels"], req["values"]):
        if kind == "kernel":
            args.append(load(KernelSource(ks["entry"], ks["text"]), folder, interpret=interpret))
        else:
            args.append(value)
    return tuple(args)


def _serve_kernel(ch: _Channel, req: dict) -> None:
    from kernels.checks.engine import run_case, time_performance
    from kernels.checks.spec import get
    from kernels.device import INTERPRET

    ex = get(req["exercise"])
    args = _kernel_args(ex, req, os.path.join(os.getcwd(), "kernels"), INTERPRET)
    for item in req["cases"]:
        case = ex.cases(item["hidden"])[item["index"]] if item.get("index") is not None else ex.performance.case
        ch.send({"event": "case", "label": case.label})
        try:
            outs, result = run_case(ex, args, case, item["inputs"])
        except BaseException as e:  # the student's kernel may raise anything
            _flush()
            ch.send({"event": "error", "label": case.label, "error": _error(e), "cuda": _cuda_broken(e)})
            return
        _flush()
        ch.send({"event": "result", "label": case.label,
                 "outputs": {k: {"buffer": p.buffer, "guard": p.guard} for k, p in outs.items()},
                 "result": result})
        if item.get("time"):
            ch.send({"event": "timing", "label": ex.performance.case.label})
            if ch.recv().get("op") != "go":
                return
            try:
                timing = time_performance(ex, args, int(item["time"]))
            except BaseException as e:
                ch.send({"event": "error", "label": ex.performance.case.label, "error": _error(e),
                         "cuda": _cuda_broken(e)})
                return
            ch.send({"event": "timed", "timing": timing})
    broken = _cuda_health(None)  # an error of an asynchronous launch surfaces here, inside this problem
    if broken:
        ch.send({"event": "error", "label": "after the last case", "cuda": True,
                 "error": {"type": "CUDA error", "message": broken, "traceback": ""}})
        return
    ch.send({"event": "done"})


def _serve_compile(ch: _Channel, req: dict) -> None:
    from kernels.checks.aot import dry_run
    from kernels.checks.spec import CheckFailed

    try:
        n = dry_run(req["exercise"], req["hidden"], req["kernels"], req["values"],
                    os.path.join(os.getcwd(), "aot"))
        ch.send({"event": "compiled", "ok": True, "compiled": n})
    except CheckFailed as e:
        ch.send({"event": "compiled", "ok": False, "message": str(e)})
    except BaseException as e:
        ch.send({"event": "compiled", "ok": False, "message": f"compiling for sm_90 failed: {type(e).__name__}: {e}"})


# ---- notebook problems -------------------------------------------------------------------------------------

def _jsonable(value, depth=0):
    if depth > 20:
        raise TypeError("nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    raise TypeError(f"a {type(value).__name__} is not plain data")


class _Forbid(torch.overrides.TorchFunctionMode):
    """Refuse the torch functions an exercise forbids, however they are reached (``torch.cumsum``, ``x.cumsum``)."""

    def __init__(self, forbid):
        super().__init__()
        self.names = {f.rsplit(".", 1)[-1] for f in forbid if f.startswith("torch.")}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.names or name.rstrip("_") in self.names:
            raise RuntimeError(f"this exercise asks for your own implementation: calling {name} is not allowed")
        return func(*args, **(kwargs or {}))


def _notebook_shell():
    """The IPython shell the notebook's cells run in (imported only here, as the sandbox's uid)."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.display_formatter.active_types = ["text/plain"]
    return shell


def _serve_notebook(ch: _Channel, first: dict) -> None:
    try:  # the grading machine's side: a failure here is reported as such, not as the notebook's crash
        shell = _notebook_shell()
        from kernels.checks.spec import get
    except BaseException as e:
        ch.send({"event": "setup_error", "error": _error(e)})
        return
    for cell in first["cells"]:
        ch.send({"event": "cell", "index": cell["index"]})
        result = shell.run_cell(cell["source"], store_history=True, silent=False)
        _flush()
        err = result.error_before_exec or result.error_in_exec
        broken = _cuda_health(err)
        ch.send({"event": "cell_done", "index": cell["index"], "cuda": broken,
                 "error": None if err is None else f"{type(err).__name__}: {str(err)[:500]}"})
        if broken:  # the process's CUDA context is lost for good: the grader starts another without this cell
            return
    ch.send({"event": "ready"})
    ns = shell.user_ns
    while True:
        req = ch.recv()
        op = req.get("op")
        if op == "stop":
            return
        if op == "value":
            name = req["name"]
            if name not in ns:
                ch.send({"event": "value", "missing": True})
                continue
            try:
                ch.send({"event": "value", "value": json.loads(json.dumps(_jsonable(ns[name])))})
            except (TypeError, ValueError) as e:
                ch.send({"event": "value", "invalid": str(e)})
            continue
        if op == "run":
            ex = get(req["exercise"])
            missing = [n for n in req["names"] if n and n not in ns]
            if missing:
                ch.send({"event": "error", "error": {"type": "NameError", "message": f"{missing[0]} is not defined "
                         "(the cell defining it did not run to the end)", "traceback": ""}, "cuda": False})
                continue
            args = tuple(ns[n] if n else v for n, v in zip(req["names"], req["values"]))
            case = ex.cases(req["hidden"])[req["index"]]
            from kernels.checks.engine import run_case

            ch.send({"event": "case", "label": case.label})
            try:
                with _Forbid(ex.forbid):
                    outs, result = run_case(ex, args, case, req["inputs"])
                result = {k: (v if isinstance(v, torch.Tensor) else _jsonable(v)) for k, v in result.items()}
            except BaseException as e:
                _flush()
                ch.send({"event": "error", "error": _error(e), "cuda": _cuda_broken(e)})
                continue
            _flush()
            ch.send({"event": "result", "outputs": {k: {"buffer": p.buffer, "guard": p.guard}
                                                    for k, p in outs.items()}, "result": result})


def main(cfg: dict, conn, out) -> None:
    """Entry point of a forked worker: ``cfg`` from the grader, ``conn`` its end of the channel, ``out`` the
    pipe that stdout and stderr go to (the grader keeps the first ``output_cap`` bytes and drops the rest)."""
    started = time.time()
    how = _confine(cfg, conn.fileno(), out.fileno())
    ch = _Channel(conn)
    import triton  # noqa: F401

    import kernels  # noqa: F401  (decides GPU or interpreter, before Triton; then the mode is fixed)

    torch.set_num_threads(1)
    if cfg["mode"] == "gpu" and cfg.get("gpu_memory_fraction"):
        torch.cuda.set_per_process_memory_fraction(float(cfg["gpu_memory_fraction"]))
    ch.send({"event": "hello", "isolation": how, "uid": os.getuid(), "startup_s": time.time() - started})
    while True:
        try:
            req = ch.recv()
        except EOFError:
            return
        kind = req.get("op")
        if kind == "stop":
            return
        if kind == "warm":
            from kernels.memory.copy import copy_memory

            copy_memory(torch.ones(4096, device="cuda"))
            _sync()
            ch.send({"event": "warm"})
        elif kind == "kernel":
            _serve_kernel(ch, req)
        elif kind == "compile":
            _serve_compile(ch, req)
        elif kind == "probe":  # can this uid, in this sandbox, start everything a grading run needs?
            try:
                import kernels.checks.engine  # noqa: F401

                _notebook_shell()
                ch.send({"event": "probe"})
            except BaseException as e:
                ch.send({"event": "probe", "error": _error(e)})
            return
        elif kind == "notebook":
            _serve_notebook(ch, req)
            return
        _sync()
