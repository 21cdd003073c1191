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

import contextlib
import ctypes
import ctypes.util
import json
import numbers
import os
import resource
import signal
import sys
import time
import traceback

import torch

from . import wire

__all__ = ["template"]

_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REMOUNT, _MS_REC, _MS_PRIVATE = 1, 2, 4, 4096, 32, 16384, 1 << 18
_PR_SET_NO_NEW_PRIVS, _PR_SET_PDEATHSIG = 38, 1
#: Where the grader binds the Triton cache it warmed (GPU mode), read-only; every worker starts from a copy.
TRITON_SEED = "/grader/triton-seed"
#: Where the grader binds its folder of per-submission Triton caches (one a worker kind, each its own uid's).
CACHES = "/grader/cache"
#: Where the grader binds the lesson specs its own fixtures add (read-only).
LESSONS = "/grader/lessons"


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _mount_tmpfs(libc, where: str, size: int, uid: int) -> None:
    data = f"size={int(size)},mode=0700,uid={uid},gid={uid}".encode()
    if libc.mount(b"tmpfs", where.encode(), b"tmpfs", ctypes.c_ulong(_MS_NOSUID | _MS_NODEV), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {where}: {os.strerror(err)}")


def _confine(cfg: dict, keep_fd: int, out_fd: int) -> str:
    """In a child just forked from the template (root inside bubblewrap's allowlist, nothing of the course
    visible but the environment): give it a /tmp and /dev/shm of its own, size-capped, then drop to its uid for
    good. Nothing another problem left there is visible, and nothing it leaves outlives it."""
    os.setsid()
    libc = _libc()
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    uid = gid = int(cfg["uid"])
    if libc.unshare(_CLONE_NEWNS) != 0 or libc.mount(None, b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE),
                                                       None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"a private mount namespace: {os.strerror(err)}")
    under = [p for p in cfg.get("under_tmp") or [] if os.path.isdir(p)]  # the environment's folders in /tmp
    handles = {p: os.open(p, os.O_PATH) for p in under}
    _mount_tmpfs(libc, "/tmp", cfg["tmp_size"], uid)
    for p, fd in handles.items():  # bound back read-only over the fresh /tmp (its parents stay root's, 0755)
        os.makedirs(p, mode=0o755, exist_ok=True)
        for flags in (_MS_BIND | _MS_REC, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_REC):
            src = f"/proc/self/fd/{fd}".encode() if not flags & _MS_REMOUNT else None
            if libc.mount(src, p.encode(), None, ctypes.c_ulong(flags), None) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"binding {p} back: {os.strerror(err)}")
        os.close(fd)
    _mount_tmpfs(libc, "/dev/shm", cfg["shm_size"], uid)
    if os.path.isdir(CACHES):
        name = str(cfg.get("cache") or "")
        if name and "/" not in name and not name.startswith("."):  # Triton's cache, kept for this submission
            os.makedirs("/tmp/.triton", exist_ok=True)
            src = os.path.join(CACHES, name).encode()
            if libc.mount(src, b"/tmp/.triton", None, ctypes.c_ulong(_MS_BIND), None) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"binding the Triton cache {name}: {os.strerror(err)}")
        _mount_tmpfs(libc, CACHES, 1 << 20, 0)  # the other submissions' caches are gone from this worker
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
    os.setuid(uid)  # from uid 0 to another: every capability is gone, and cannot come back (no_new_privs)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    os.chdir("/tmp")
    os.makedirs("/tmp/.triton", exist_ok=True)
    if os.path.isdir(TRITON_SEED) and os.listdir(TRITON_SEED):
        import shutil

        shutil.copytree(TRITON_SEED, "/tmp/.triton", dirs_exist_ok=True)
    return "bubblewrap"

class _Channel:
    def __init__(self, conn):
        self.conn = conn

    def send(self, message: dict) -> None:
        wire.send_frame(self.conn, wire.encode(message))

    def recv(self) -> dict:
        return wire.decode(wire.recv_frame(self.conn))


def _error(e: BaseException) -> dict:
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return {"type": type(e).__name__, "message": str(e)[:4000], "traceback": "".join(tb)[-6000:]}


def _flush():
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except (OSError, ValueError):
            pass


def _cuda_broken(e: BaseException) -> bool:
    text = f"{type(e).__name__} {e}"
    return any(s in text for s in ("CUDA error", "cudaError", "illegal memory access", "CUDA_ERROR",
                                   "device-side assert", "misaligned address"))


def _sync() -> None:
    from kernels.device import sync  # imported late: importing kernels decides the interpreter

    sync()


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


def _cubin_args(ex, req, ch):
    """The graded kernels as :class:`~kernels.checks.cubin.CubinKernel` stand-ins: each specialisation a launch
    needs is asked of the grader (which has the sandboxed compiler build it) and comes back as a cubin. The
    student's source is never imported here: its parameters are read from the text with ``ast``."""
    from kernels.checks.cubin import CubinError, CubinKernel, check_reply, kernel_params
    from kernels.checks.spec import CheckFailed

    def compiler(i):
        def ask(spec):
            ch.send({"event": "compile", "kernel": i, "spec": spec})
            reply = ch.recv()
            if reply.get("op") != "cubin":
                raise CubinError("the grader sent no cubin")
            if reply.get("error"):
                raise CheckFailed(str(reply["error"])[:4000])
            return check_reply(reply)
        return ask

    args = []
    for i, (kind, ks, value) in enumerate(zip(ex.args, req["kernels"], req["values"])):
        args.append(CubinKernel(kernel_params(ks["text"], ks["entry"]), compiler(i)) if kind == "kernel" else value)
    return tuple(args)


def _serve_precheck(ch: _Channel, req: dict) -> None:
    """The interpreter's bounds-checked run of the small cases (out-of-bounds accesses named before they can fault
    on the device, the exercise's traffic rule): on a GPU with cubins, the only place the kernel's Python runs."""
    from kernels.checks.engine import _small, precheck
    from kernels.checks.spec import get
    from kernels.device import INTERPRET

    ex = get(req["exercise"])
    args = _kernel_args(ex, req, "/tmp/graded", INTERPRET)
    for item in req["cases"]:
        case = ex.cases(item["hidden"])[item["index"]] if item.get("index") is not None else ex.performance.case
        if not _small(ex, case, item["inputs"]):
            continue
        ch.send({"event": "case", "label": case.label})
        problems, traffic = precheck(ex, args, case, item["inputs"])
        _flush()
        ch.send({"event": "prechecked", "index": item.get("index"), "problems": problems, "traffic": traffic})
    ch.send({"event": "done"})


def _serve_kernel(ch: _Channel, req: dict) -> None:
    from kernels.checks.engine import run_case, time_performance
    from kernels.checks.spec import get
    from kernels.device import INTERPRET

    ex = get(req["exercise"])
    cubin = bool(req.get("cubin"))
    args = _cubin_args(ex, req, ch) if cubin else _kernel_args(ex, req, "/tmp/graded", INTERPRET)
    for item in req["cases"]:
        case = ex.cases(item["hidden"])[item["index"]] if item.get("index") is not None else ex.performance.case
        ch.send({"event": "case", "label": case.label})
        try:
            outs, result = run_case(ex, args, case, item["inputs"], check_first=False if cubin else None)
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
                target = req.get("target")
                timing = time_performance(ex, args, int(item["time"]), tuple(target) if target else None)
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
    from kernels.checks.dry_run import dry_run
    from kernels.checks.spec import CheckFailed

    try:
        n = dry_run(req["exercise"], req["hidden"], req["kernels"], req["values"],
                    "/tmp/aot")
        ch.send({"event": "compiled", "ok": True, "compiled": n})
    except CheckFailed as e:
        ch.send({"event": "compiled", "ok": False, "message": str(e)})
    except BaseException as e:
        ch.send({"event": "compiled", "ok": False, "message": f"compiling for sm_90 failed: {type(e).__name__}: {e}"})


def _serve_rule(ch: _Channel, req: dict) -> None:
    """The rule of an exercise graded with a toolchain (:attr:`kernels.checks.spec.Exercise.toolchain`): it builds
    and runs the student's code here, in the sandbox; only the verdict goes back."""
    from kernels.checks import engine
    from kernels.checks.spec import NotGradedHere, get

    try:
        why = engine.check_value(get(req["exercise"]), tuple(req["values"]), bool(req["hidden"]))
        ch.send({"event": "rule", "why": why})
    except NotGradedHere as e:
        ch.send({"event": "rule", "needs": str(e)})
    except BaseException as e:
        ch.send({"event": "rule", "why": f"the check could not run: {type(e).__name__}: {e}"})


def _serve_cubin(ch: _Channel, req: dict) -> None:
    """Compile the graded kernels' specialisations that the grader asks for, one at a time, and send back each
    cubin and its metadata (this is where compiling runs the kernel's Python: never beside the launch)."""
    from kernels.checks.cubin import compile_spec, metadata
    from kernels.checks.provenance import KernelSource, load
    from kernels.checks.spec import CheckFailed

    fns = {}
    for i, ks in enumerate(req["kernels"]):
        if ks is not None:
            try:
                fns[i] = load(KernelSource(ks["entry"], ks["text"]), "/tmp/graded", interpret=False)
            except BaseException as e:
                fns[i] = e
    while True:
        msg = ch.recv()
        if msg.get("op") != "spec":
            return
        fn = fns.get(int(msg.get("kernel", -1)))
        try:
            if isinstance(fn, BaseException) or fn is None:
                raise CheckFailed(f"the kernel could not be loaded: {type(fn).__name__}: {fn}")
            compiled = compile_spec(fn, msg["spec"])
            blob = compiled.asm["cubin"]
            ch.send({"event": "cubin", "cubin": torch.frombuffer(bytearray(blob), dtype=torch.uint8),
                     "meta": metadata(compiled)})
        except CheckFailed as e:
            ch.send({"event": "cubin", "error": str(e)})
        except BaseException as e:
            ch.send({"event": "cubin", "error": f"compiling for the GPU failed: {type(e).__name__}: {e}"})
        _flush()


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


class _Ops(torch.overrides.TorchFunctionMode):
    """Counts the torch calls a function makes and keeps the result shape with the widest trailing block: the
    grader's side turns these into the exercise's rules (a T x T matrix, a loop over tokens)."""

    def __init__(self):
        super().__init__()
        self.calls = 0
        self.widest = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.dim() >= 2:
                if self.widest is None or min(t.shape[-2:]) > min(self.widest[-2:]):
                    self.widest = list(t.shape)
        return out


def _notebook_shell():
    """The IPython shell the notebook's cells run in (imported only here, as the sandbox's uid)."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.display_formatter.active_types = ["text/plain"]
    return shell


def _incoming(obj, ch, ptrs):
    """Arguments from the grader: tensors (moved to the GPU where the grader's were), namespaces, and callbacks
    (a call runs on the grader's side, e.g. an allocator), with the grader's tensor addresses remembered."""
    if isinstance(obj, dict):
        if "__cuda__" in obj or "__cpu__" in obj:
            t = obj.get("__cuda__", obj.get("__cpu__"))
            t = wire.moved(t, "cuda") if "__cuda__" in obj else t  # a misaligned view stays one
            ptrs[t.data_ptr()] = int(obj["ptr"])
            return t
        if "__meta__" in obj:
            m = obj["__meta__"]
            dtype = getattr(torch, str(m.get("dtype")), None)
            if not isinstance(dtype, torch.dtype):
                raise TypeError("an argument of unknown dtype")
            t = torch.empty_strided(m["shape"], m["stride"], dtype=dtype, device="meta")
            ptrs[t.data_ptr()] = int(obj["ptr"])
            return t
        if "__ns__" in obj:
            from types import SimpleNamespace

            return SimpleNamespace(**{k: _incoming(v, ch, ptrs) for k, v in obj["__ns__"].items()})
        if "__tuple__" in obj:
            return tuple(_incoming(v, ch, ptrs) for v in obj["__tuple__"])
        if "__callback__" in obj:
            ident = obj["__callback__"]

            def callback(*args):
                ch.send({"event": "callback", "id": ident, "args": _outgoing(list(args), ptrs)})
                reply = ch.recv()
                if "error" in reply:
                    raise _raise_as(reply["error"])
                return _incoming(reply.get("value"), ch, ptrs)
            return callback
        return {k: _incoming(v, ch, ptrs) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_incoming(v, ch, ptrs) for v in obj]
    return obj


def _raise_as(err: dict) -> BaseException:
    import builtins

    cls = getattr(builtins, str(err.get("type")), None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        return cls(err.get("message"))
    return RuntimeError(f"{err.get('type')}: {err.get('message')}")


def _outgoing(obj, ptrs, depth=0):
    """A return value as plain data and tensors; an int that is the address of a tensor the grader sent is
    translated back to the grader's address (a launch plan names its tensors by address)."""
    if depth > 20:
        raise TypeError("nested too deeply")
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu")
    if isinstance(obj, numbers.Number) and not isinstance(obj, (bool, int, float)) and hasattr(obj, "item"):
        obj = obj.item()  # a numpy scalar (np.prod's np.int64) is the number it holds
    if isinstance(obj, bool) or obj is None or isinstance(obj, (float, str)):
        return obj
    if isinstance(obj, int):
        return {"__ptr__": ptrs[obj]} if obj in ptrs else obj
    if isinstance(obj, tuple):
        return {"__tuple__": [_outgoing(v, ptrs, depth + 1) for v in obj]}
    if isinstance(obj, list):
        return [_outgoing(v, ptrs, depth + 1) for v in obj]
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise TypeError("a dict with keys that are not strings")
        return {k: _outgoing(v, ptrs, depth + 1) for k, v in obj.items()}
    if isinstance(obj, torch.dtype):
        return {"__dtype__": str(obj).replace("torch.", "")}
    raise TypeError(f"returned a {type(obj).__name__}; only numbers, strings, tensors, lists, tuples and dicts "
                    "are graded")


def _serve_notebook(ch: _Channel, first: dict) -> None:
    """The notebook's cells, then values and calls of its functions. Nothing of the checks, their references or
    the grader is importable here (``kernels.checks`` is a stub): the grader calls a function through this
    channel, only arguments and return values cross."""
    try:  # the grading machine's side: a failure here is reported as such, not as the notebook's crash
        shell = _notebook_shell()
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
        if op == "call":
            name = req["name"]
            if name not in ns:
                ch.send({"event": "raised", "cuda": False, "error": {
                    "type": "NameError", "message": f"{name} is not defined (the cell defining it did not run to "
                    "the end)", "traceback": ""}})
                continue
            ptrs: dict[int, int] = {}
            ops = _Ops()
            try:
                args = _incoming(req.get("args") or [], ch, ptrs)
                kwargs = _incoming(req.get("kwargs") or {}, ch, ptrs)
                grad = req.get("grad")
                if grad is not None:  # a differentiable answer: its backward must run here, beside its forward
                    from kernels.gradcall import call_and_backward, leaves

                    args = leaves(args, grad["requires"])
                    grad_output = _incoming(grad["output"], ch, ptrs)
                with _Forbid(req.get("forbid") or ()), ops:
                    if grad is None:
                        value = ns[name](*args, **kwargs)
                    else:
                        value = call_and_backward(ns[name], args, kwargs, grad["requires"], grad_output)
                _sync()
                out = _outgoing(value, ptrs)
            except BaseException as e:
                _flush()
                ch.send({"event": "raised", "error": _error(e), "cuda": _cuda_broken(e)})
                continue
            _flush()
            ch.send({"event": "returned", "value": out, "ops": {"calls": ops.calls, "widest": ops.widest}})


def _child(cfg: dict, conn_fd: int, out_fd: int) -> None:
    """A worker forked from the template: confine, greet, then serve requests until told to stop."""
    import socket

    started = time.time()
    how = _confine(cfg, conn_fd, out_fd)
    ch = _Channel(socket.socket(fileno=conn_fd))
    if cfg["mode"] == "gpu":
        import kernels  # noqa: F401  (imported already unless the template had to stop short of it)

        if cfg.get("gpu_memory_fraction"):
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
            _serve_warm(ch, req)
        elif kind == "kernel":
            _serve_kernel(ch, req)
        elif kind == "compile":
            _serve_compile(ch, req)
        elif kind == "rule":
            _serve_rule(ch, req)
        elif kind == "cubin":
            _serve_cubin(ch, req)
            return
        elif kind == "precheck":
            _serve_precheck(ch, req)
        elif kind == "probe":  # can this uid, in this sandbox, start everything a grading run needs?
            try:
                if cfg.get("profile") == "notebook":
                    _notebook_shell()
                else:
                    import kernels.checks.engine  # noqa: F401
                if req.get("cubin"):  # the launcher of the cubin path: NVIDIA's driver bindings
                    from kernels.export.launch import driver

                    driver()
                ch.send({"event": "probe"})
            except BaseException as e:
                ch.send({"event": "probe", "error": _error(e)})
            return
        elif kind == "notebook":
            _serve_notebook(ch, req)
            return
        _sync()


def _serve_warm(ch: _Channel, req: dict) -> None:
    """GPU mode, once per grading run, before any submission: compile a kernel; unless ``performance`` is false,
    run the speed-graded exercises' baselines of ``lessons`` (:func:`kernels.checks.engine.warm_performance`);
    send the Triton cache they filled (every later worker starts from a copy) and the speed targets measured
    after it."""
    from kernels.checks.engine import warm_performance
    from kernels.memory.copy import copy_memory

    copy_memory(torch.ones(4096, device="cuda"))
    _sync()
    files, targets = {}, {}

    def snapshot():
        with contextlib.suppress(Exception):  # a baseline that broke the device: the cache is still good
            _sync()
        files.update(_tree("/tmp/.triton"))

    if req.get("performance", True):
        lessons = req.get("lessons")
        targets = warm_performance(between=snapshot, lessons=None if lessons is None else set(lessons))
    else:
        snapshot()
    ch.send({"event": "warm", "files": files, "targets": targets})


def _tree(root: str, cap: int = 64 << 20) -> dict:
    """The files under ``root`` (relative path -> bytes as a uint8 tensor), for the grader to seed later workers:
    each top-level folder (one Triton cache entry: a kernel's binaries and metadata) whole or not at all, until
    ``cap`` bytes; an entry cut in half would be found by a later worker and fail to load."""
    out, total = {}, 0
    for top in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        entry = {}
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                p = os.path.join(d, f)
                with open(p, "rb") as fh:
                    data = fh.read()
                entry[os.path.relpath(p, root)] = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data \
                    else torch.empty(0, dtype=torch.uint8)
        size = sum(t.numel() for t in entry.values())
        if total + size <= cap:
            out.update(entry)
            total += size
    return out


def _preload(profile: str, mode: str, lite: bool = False) -> None:
    """What every worker of this template needs, imported once (as root, before any student code exists):
    a fork then costs a fraction of a second instead of an interpreter start. In GPU mode nothing may create a
    CUDA context here (a forked child could not use it): ``lite`` imports only torch and Triton, and the caller
    falls back to it when the full preload initialised CUDA."""
    import triton  # noqa: F401
    from triton.runtime.cache import triton_key

    # the hash of Triton's own files that keys every compile and JIT cache entry: a quarter of a second in each
    # fresh process (cached per process), computed here once for every fork
    triton_key()
    if lite:
        if profile == "notebook":
            import IPython.core.interactiveshell  # noqa: F401
        return
    import kernels  # noqa: F401  (decides the interpreter, before any kernel is decorated)

    if mode == "compile":  # kernels built from here on are compiled-mode functions
        from kernels.compile import enter_compile_mode

        enter_compile_mode()
    torch.set_num_threads(1)
    if profile == "notebook":
        import IPython.core.interactiveshell  # noqa: F401
        return
    import importlib

    from kernels.catalog import lesson_ids

    # bounds and interp: the interpreter's bounds-checked runs (the pre-check on a GPU, every run under the
    # interpreter), which import the widgets' tracer and so matplotlib: about a second a worker, paid here once
    from kernels.checks import bounds, dry_run, engine, interp, provenance, spec  # noqa: F401

    for lesson in lesson_ids():  # every lesson's checks module
        importlib.import_module(f"kernels.checks.lessons.l{lesson}")


def template(argv: list[str]) -> int:
    """The template, run by bubblewrap as root inside the allowlist: preload, then fork one child per request.

    Requests arrive on the control socket (``cfg['ctrl']``), each a length-prefixed JSON object with the child's
    channel and output descriptors attached; the template answers ``spawned``, later ``exit`` (the status).
    It never runs student code itself."""
    import array
    import select
    import socket
    import struct

    cfg = json.loads(argv[0])
    os.environ.update(cfg.get("env") or {})
    if cfg["mode"] in ("interpreter", "compile"):
        os.environ["TRITON_INTERPRET"] = "1" if cfg["mode"] == "interpreter" else "0"
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd(), "/tmp")]
    if LESSONS not in sys.path:
        sys.path.append(LESSONS)
    ctrl = socket.socket(fileno=int(cfg["ctrl"]))
    started = time.time()
    _preload(cfg["profile"], cfg["mode"], bool(cfg.get("lite")))
    if cfg["mode"] == "gpu" and torch.cuda.is_initialized():  # start again, importing only what is fork-safe
        os.set_inheritable(ctrl.fileno(), True)
        os.execv(sys.executable, [sys.executable, "-m", "grader.worker", json.dumps(dict(cfg, lite=True))])
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)

    def say(msg: dict) -> None:
        body = json.dumps(msg).encode()
        ctrl.sendall(struct.pack("<I", len(body)) + body)

    say({"event": "ready", "startup_s": time.time() - started})
    children: dict[int, int] = {}
    buf = b""
    while True:
        ready, _, _ = select.select([ctrl, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            while children:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                if pid in children:
                    say({"event": "exit", "id": children.pop(pid), "status": code})
        if ctrl not in ready:
            continue
        fds = array.array("i")
        data, anc, _, _ = ctrl.recvmsg(1 << 16, socket.CMSG_SPACE(2 * fds.itemsize))
        if not data:
            return 0
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        buf += data
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack("<I", buf[:4])[0]:
            n = struct.unpack("<I", buf[:4])[0]
            req, buf = json.loads(buf[4: 4 + n]), buf[4 + n:]
            if req.get("op") == "kill":
                for pid, ident in list(children.items()):
                    if ident == req["id"]:
                        try:
                            os.killpg(pid, signal.SIGKILL)
                        except OSError:
                            pass
                continue
            conn_fd, out_fd = fds[0], fds[1]
            fds = fds[2:]
            pid = os.fork()
            if pid == 0:
                try:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    ctrl.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    _child(dict(cfg, **req), conn_fd, out_fd)
                    _flush()
                    os._exit(0)
                except SystemExit as e:
                    _flush()
                    os._exit(e.code if isinstance(e.code, int) else 1)
                except BaseException:
                    traceback.print_exc()
                    _flush()
                    os._exit(70)
            os.close(conn_fd)
            os.close(out_fd)
            children[pid] = req["id"]
            say({"event": "spawned", "id": req["id"]})


if __name__ == "__main__":
    sys.exit(template(sys.argv[1:]))
