"""The sandbox: what student code in a worker can and cannot do, and how the grader stops it."""

import pathlib
import sys

import pytest
import torch

from grader import wire
from grader.sandbox import SandboxConfig, Worker, WorkerDied, WorkerTimeout, _pids_of

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_wire_roundtrip_without_pickle():
    t = torch.arange(12.0).view(3, 4).t()
    msg = {"a": [1, 2.5, None, "x", float("inf")], "t": t, "b": torch.ones(3, dtype=torch.bfloat16)}
    back = wire.decode(wire.encode(msg))
    assert torch.equal(back["t"], t) and back["t"].stride() == t.stride()
    assert back["b"].dtype == torch.bfloat16 and back["a"][4] == float("inf")
    for bad in (b"", b"\x05\x00\x00\x00{oops", wire.encode({"t": torch.ones(2)})[:-1]):
        with pytest.raises(wire.WireError):
            wire.decode(bad)
    with pytest.raises(wire.WireError):
        wire.encode({"f": object()})
    buf = torch.zeros(40, dtype=torch.bfloat16)
    for view in (buf[1:33], buf[3:35].view(4, 8).t(), torch.ones(5)):  # off by 2 and 6 bytes; aligned
        back = wire.decode(wire.encode({"v": view}))["v"]
        assert torch.equal(back, view) and back.stride() == view.stride()
        assert back.data_ptr() % 64 == view.data_ptr() % 64, "a tensor keeps its address modulo 64 on the wire"
    head = wire.encode({"v": buf[1:33]})
    with pytest.raises(wire.WireError):
        wire.decode(head.replace(b'"misalign": 2', b'"misalign": 3'))


def test_a_numpy_scalar_returned_from_the_sandbox_is_its_number():
    import numpy as np

    from grader.worker import _outgoing

    back = wire.decode(wire.encode({"v": _outgoing([np.int64(98304), np.float32(0.5), True], {})}))["v"]
    assert back == [98304, 0.5, True] and type(back[0]) is int


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_tensor_moved_to_the_sandbox_device_keeps_its_layout_and_alignment(device):
    """The notebook worker puts a tensor the grader holds on the GPU there too: a view one element in (lesson 05's
    misaligned tensor, which build_launch must refuse) must not arrive as a fresh, aligned allocation."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    buf = torch.randn(80).to(torch.bfloat16)
    for view in (buf[1:33], buf[3:35].view(4, 8).t(), buf[:32], buf[2:8].view(2, 3)):
        sent = wire.decode(wire.encode({"v": view}))["v"]
        back = wire.moved(sent, device)
        assert back.device.type == device and back.data_ptr() != sent.data_ptr(), "a copy"
        assert back.stride() == view.stride()
        assert torch.equal(back.cpu(), view)
        assert back.data_ptr() % 64 == view.data_ptr() % 64, (view.stride(), view.storage_offset())


@pytest.fixture(scope="module")
def cfg():
    box = SandboxConfig(mode="interpreter", memory_limit=1 << 30, output_cap=4096, shm_size=64 << 20)
    yield box
    box.close()


def _notebook(cfg, source, uid=90, timeout=60):
    w = Worker(cfg, uid=cfg.uid_base + uid, mode="interpreter", kind="notebook", name=f"t{uid}")
    w.send({"op": "notebook", "cells": [{"index": 0, "source": source}]})
    while True:
        m = w.recv(timeout)
        if m["event"] == "ready":
            return w


def _value(w, name):
    w.send({"op": "value", "name": name})
    return w.recv(30).get("value")


PROBE = f'''
import os, socket, glob
facts = {{"uid": os.getuid(), "gid": os.getgid(), "root_listing": sorted(os.listdir({str(ROOT)!r})),
         "grader_listing": sorted(os.listdir({str(ROOT / "grader")!r})), "tmp_listing": sorted(os.listdir("/tmp")),
         "top": sorted(os.listdir("/")), "shm": sorted(os.listdir("/dev/shm")),
         "caches": []}}
try:
    facts["caches"] = sorted(os.listdir("/grader/cache"))
except OSError as e:
    facts["caches"] = type(e).__name__
for path in ("{ROOT}/solutions/00_setup.py", "{ROOT}/grader/gradebook.db", "{ROOT}/.git/HEAD",
             "{ROOT}/grader/fixture_lesson/90_grader_fixture.py", "/root/.bashrc", "/work", "{ROOT}/grader/grade.py",
             "{ROOT}/kernels/checks/engine.py", "{ROOT}/kernels/checks/lessons/l00_setup.py"):
    try:
        open(path).read(10)
        facts[path] = "read"
    except OSError as e:
        facts[path] = type(e).__name__
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    facts["network"] = "connected"
except OSError as e:
    facts["network"] = type(e).__name__
try:
    open({str(ROOT / "kernels" / "x.py")!r}, "w")
    facts["write_kernels"] = "wrote"
except OSError as e:
    facts["write_kernels"] = type(e).__name__
try:
    import kernels.checks.engine
    facts["engine"] = "imported"
except ImportError as e:
    facts["engine"] = type(e).__name__
open("/dev/shm/left-behind", "w").write("x" * 1000)
open("/tmp/left-behind", "w").write("x")
'''


def test_worker_sees_only_its_allowlist(cfg):
    """bubblewrap's allowlist: the environment and ``kernels`` (without the checks, for the notebook's code), the
    worker's own three files of ``grader``; no other folder of the checkout, no other student, no network, and a
    /tmp and /dev/shm that start empty for every worker."""
    facts = [None, None]
    for i in range(2):
        w = _notebook(cfg, PROBE)
        facts[i] = _value(w, "facts")
        w.close()
        assert w.isolation == "bubblewrap", w.isolation
    first, second = facts
    assert first["uid"] == cfg.uid_base + 90 and first["gid"] == cfg.uid_base + 90
    assert set(first["root_listing"]) <= {".venv", "kernels", "grader"}, first["root_listing"]
    assert first["grader_listing"] == ["__init__.py", "wire.py", "worker.py"], first["grader_listing"]
    ours = {".ipython", ".triton"}  # IPython's and Triton's folders, made by the worker itself
    if ROOT.is_relative_to("/tmp"):  # a checkout under /tmp: its folder holds what the sandbox shows of it
        ours.add(ROOT.relative_to("/tmp").parts[0])
    assert set(first["tmp_listing"]) <= ours and first["shm"] == [], first
    assert set(second["tmp_listing"]) <= ours and second["shm"] == [], second  # nothing the first worker left
    for path, what in first.items():
        if path.startswith("/"):
            assert what != "read", path
    assert first["write_kernels"] != "wrote" and first["engine"] == "ModuleNotFoundError"
    assert first["network"] != "connected"
    # no Triton cache of a kernel worker (or of another submission) in the notebook's sandbox
    assert first["caches"] in ([], "PermissionError", "FileNotFoundError"), first["caches"]


def test_a_notebooks_triton_cache_outlives_its_worker_and_only_its_own(cfg):
    """The notebook's code compiles what its function answers launch (an autograd Function's kernels); the next
    problem's fresh worker of the same submission finds it in its cache (lesson 07 compiled it again for each),
    and sees no other cache: not the kernel workers' (their folder is not bound) nor another submission's."""
    import os
    import shutil

    uid = cfg.uid_base + 93
    mine, other = (cfg.notebook_caches / name for name in ("slot9-notebook", "slot8-notebook"))
    for d, owner in ((mine, uid), (other, uid + 1)):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        os.chown(d, owner, owner)
        os.chmod(d, 0o700)
    (other / "theirs").write_text("x")
    probe = ("import os\nbefore = sorted(os.listdir('/tmp/.triton'))\n"
             "open('/tmp/.triton/compiled', 'w').write('x')\n"
             "try:\n    seen = sorted(os.listdir('/grader/cache'))\nexcept OSError as e:\n"
             "    seen = type(e).__name__\n")
    got = []
    for _ in range(2):
        w = Worker(cfg, uid=uid, mode="interpreter", kind="notebook", name="t93", cache=mine.name)
        w.send({"op": "notebook", "cells": [{"index": 0, "source": probe}]})
        while w.recv(60)["event"] != "ready":
            pass
        got.append((_value(w, "before"), _value(w, "seen")))
        w.close()
    assert "compiled" not in got[0][0] and "compiled" in got[1][0], got
    for _, seen in got:
        assert seen in ([], "PermissionError"), seen
    assert (mine / "compiled").exists() and not (cfg.caches / "slot9-notebook").exists()
    for d in (mine, other):
        shutil.rmtree(d, ignore_errors=True)


def test_shared_memory_is_capped(cfg):
    src = ("try:\n    for i in range(4):\n        open(f'/dev/shm/big{i}', 'wb').write(b'x' * (30 << 20))\n"
           "    shm = 'wrote'\n"
           "except OSError as e:\n    shm = type(e).__name__ + str(e.errno)\n")
    w = _notebook(cfg, src, uid=95)
    got = _value(w, "shm")
    w.close()
    assert got == "OSError28", got  # ENOSPC: the 64 MiB /dev/shm is full


def test_a_large_message_is_refused_unread(cfg):
    w = _notebook(cfg, "big = 'x' * (20 << 20)", uid=96)
    w.send({"op": "value", "name": "big"})
    with pytest.raises(WorkerDied, match="MiB, more than the 8.0 MiB allowed"):
        w.recv(30)
    assert _pids_of(cfg.uid_base + 96) == []


GRAD_ANSWER = """
import torch
import triton
import triton.language as tl

@triton.jit
def double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        dx = torch.empty_like(g)
        double_kernel[(1,)](g, dx, g.numel(), BLOCK=8)
        return dx

def double(x):
    return Double.apply(x)
"""


def test_a_differentiable_answer_runs_its_backward_in_the_sandbox(cfg):
    """A call with ``grad`` runs the answer and its backward in the notebook's sandbox (``kernels.gradcall``,
    importable there beside the ``kernels.checks`` stub): the output, the gradient, the saved inputs and the
    backward's Triton launches come back."""
    w = _notebook(cfg, GRAD_ANSWER, uid=97)
    x = torch.randn(5, dtype=torch.float64)
    g = torch.randn(5, dtype=torch.float64)
    w.send({"op": "call", "name": "double", "args": [{"__cpu__": x, "ptr": x.data_ptr()}], "kwargs": {},
            "forbid": [], "grad": {"requires": [0], "output": {"__cpu__": g, "ptr": g.data_ptr()}}})
    m = w.recv(60)
    w.close()
    assert m["event"] == "returned", m
    r = m["value"]
    assert r["__grad_call__"] and r["custom"], r
    assert r["saved"] == [{"input": 0, "shape": [5], "where": "ctx.save_for_backward"}], r
    assert r["launches_backward"] == 1, r
    assert torch.equal(r["output"], 2 * x) and torch.equal(r["grads"][0], 2 * g)


def test_packages_installed_under_tmp_stay_importable(request):
    """Python packages on sys.path inside the temp folder (a ``pip install --target /tmp/site``, as on a machine
    without a writable environment) are bound back read-only over the worker's private /tmp, so workers can
    import them; the rest of /tmp stays hidden."""
    import shutil
    import tempfile
    import uuid

    from grader.sandbox import _environment

    site = pathlib.Path(tempfile.mkdtemp(prefix="site-probe-"))
    name = f"probe_{uuid.uuid4().hex[:8]}"
    (site / f"{name}.py").write_text("VALUE = 42\n")
    secret = pathlib.Path(tempfile.mkdtemp(prefix="not-kept-"))
    for d in (site, secret):  # world-readable, as pip leaves them: only the sandbox may keep a worker out
        d.chmod(0o755)
        request.addfinalizer(lambda d=d: shutil.rmtree(d, ignore_errors=True))
    box = SandboxConfig(mode="interpreter", environment=_environment() + [str(site)], memory_limit=1 << 30)
    request.addfinalizer(box.close)
    src = (f"import os, sys\nsys.path.append({str(site)!r})\nimport {name}\nfound = {name}.VALUE\n"
           f"secret_visible = os.path.exists({str(secret)!r})\n")
    w = _notebook(box, src, uid=94)
    found, visible = _value(w, "found"), _value(w, "secret_visible")
    w.close()
    assert found == 42 and visible is False, (found, visible)


def test_a_broken_notebook_runner_is_reported_by_name(monkeypatch):
    """If the worker cannot import IPython (a grading machine missing a package), it sends a message naming the
    error, and the grader reports it as the machine's problem: not a bare exit code that reads like a crash of
    the student's notebook."""
    import sys
    import types

    from grader import worker
    from grader.grade import _Fail, _Session

    sent = []
    monkeypatch.setitem(sys.modules, "IPython.core.interactiveshell", None)  # import fails: ModuleNotFoundError
    worker._serve_notebook(types.SimpleNamespace(send=sent.append), {"cells": [{"index": 0, "source": "x = 1"}]})
    assert [m["event"] for m in sent] == ["setup_error"] and "IPython" in sent[0]["error"]["message"], sent

    class FakeWorker:
        def send(self, message):
            pass

        def recv(self, timeout, what=""):
            return sent[0]

        def kill(self):
            pass

    session = _Session.__new__(_Session)
    session.code, session.names, session.bad_cells = ["x = 1"], [], {}
    session.s = types.SimpleNamespace(cell_timeout=5.0)
    session.budget = lambda want: want
    fake = FakeWorker()
    session.workers = {"notebook": fake}
    with pytest.raises(_Fail, match="could not start its notebook runner.*ModuleNotFoundError.*not the notebook"):
        session._run_cells(fake)
    assert "notebook" not in session.workers


def test_a_machine_that_cannot_run_notebooks_stops_before_grading(monkeypatch):
    """The grader's first worker imports the notebook runner as the sandbox uid; if that fails (packages only
    root can read, say), the run stops at once with the reason and the fix, instead of scoring every function
    problem 0. The real probe passes on this machine."""

    from grader import grade

    g = grade.Grader(grade.Settings())
    g.sandbox.close()

    class Unreadable(grade.Worker):
        def recv(self, timeout, *, what=""):
            m = super().recv(timeout, what=what)
            if m.get("event") == "probe":
                return {"event": "probe", "error": {"type": "PermissionError",
                                                    "message": "[Errno 13] Permission denied: '/tmp/site/IPython'"}}
            return m

    monkeypatch.setattr(grade, "Worker", Unreadable)
    import tempfile

    from grader import sandbox

    made, mkdtemp = [], tempfile.mkdtemp
    monkeypatch.setattr(sandbox.tempfile, "mkdtemp", lambda **kw: made.append(mkdtemp(**kw)) or made[-1])
    with pytest.raises(grade.SetupError, match=r"uid \d+.*PermissionError.*/tmp/site/IPython.*chmod -R a\+rX"):
        grade.Grader(grade.Settings())
    assert made and not any(pathlib.Path(p).exists() for p in made)  # its folder is removed


def test_hang_is_killed_with_its_leftover_processes(cfg):
    src = ("import subprocess, sys\n"
           "subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(1)'], "
           "start_new_session=True)\nwhile True:\n    pass\n")
    w = Worker(cfg, uid=cfg.uid_base + 91, mode="interpreter", kind="notebook", name="hang")
    w.send({"op": "notebook", "cells": [{"index": 0, "source": src}]})
    with pytest.raises(WorkerTimeout, match="stopped after 3 s"):
        while True:
            w.recv(3)
    assert _pids_of(cfg.uid_base + 91) == []


@pytest.mark.parametrize("src, match", [
    ("import ctypes\nctypes.string_at(0)", "segmentation fault"),
    ("import os\nos._exit(7)", "exited with code 7"),
])
def test_crash_reason_is_named(cfg, src, match):
    w = Worker(cfg, uid=cfg.uid_base + 92, mode="interpreter", kind="notebook", name="crash")
    w.send({"op": "notebook", "cells": [{"index": 0, "source": src}]})
    with pytest.raises(WorkerDied, match=match):
        while True:
            w.recv(30)


def test_output_is_capped(cfg):
    w = _notebook(cfg, "import sys\nprint('x' * 100_000)\nprint('y' * 100_000, file=sys.stderr)")
    w.close()
    out = w.output()
    assert len(out) < 4096 + 200 and "more bytes of output not kept" in out


def test_memory_limit(cfg):
    w = Worker(cfg, uid=cfg.uid_base + 93, mode="interpreter", kind="notebook", name="oom")
    hog = "hog = []\nwhile True:\n    hog.append(bytearray(1 << 26))"
    w.send({"op": "notebook", "cells": [{"index": 0, "source": hog}]})
    events = []
    try:
        while True:
            m = w.recv(60)
            events.append(m)
            if m["event"] == "ready":
                break
    except WorkerDied as e:
        assert "memory" in str(e)
    else:
        assert any("MemoryError" in (m.get("error") or "") for m in events), events
    w.close()


def test_the_sandbox_never_binds_tmp_homes_or_the_checkouts_parents(monkeypatch):
    """``python /tmp/script.py`` puts /tmp first on sys.path: binding it would show the host's /tmp (other runs'
    files) read-only in place of the worker's private one. Only package folders are bound."""
    import tempfile

    from grader.sandbox import _environment

    for p in (tempfile.gettempdir(), str(ROOT.parent), str(pathlib.Path.home()), str(ROOT)):
        monkeypatch.syspath_prepend(p)
    env = _environment()
    assert not {tempfile.gettempdir(), str(ROOT.parent), str(pathlib.Path.home()), str(ROOT)} & set(env), env


def test_a_virtualenv_reached_through_a_symlink_is_bound_under_the_link_s_path(tmp_path, monkeypatch):
    """``.venv -> /elsewhere/.venv``: the interpreter started as ``.venv/bin/python`` finds its packages from
    ``.venv/pyvenv.cfg``, so the link's own path is bound whole, not only its ``bin``."""
    from grader.sandbox import _environment

    real = tmp_path / "real-venv"
    (real / "bin").mkdir(parents=True)
    (real / "pyvenv.cfg").write_text("home = /usr/bin\n")
    link = tmp_path / "project" / ".venv"
    link.parent.mkdir()
    link.symlink_to(real)
    monkeypatch.setattr(sys, "prefix", str(link))
    monkeypatch.setattr(sys, "executable", str(link / "bin" / "python"))
    env = _environment()
    assert str(link) in env and str(real) in env, env


def test_the_grader_s_pythonpath_reaches_the_sandbox(request, monkeypatch):
    """A checkout that is not pip-installed runs from ``PYTHONPATH`` (the project and carried wheels put there, as on
    a GPU machine whose image holds torch): the sandbox clears the environment, so it must set ``PYTHONPATH`` itself,
    the checkout first (for ``grader.worker``) and the grader's own entries that are bound read-only. Without it
    every worker failed to start there with "No module named 'grader'"."""
    import os
    import shutil
    import tempfile
    import uuid

    from grader.sandbox import _environment

    site = pathlib.Path(tempfile.mkdtemp(prefix="site-path-"))
    site.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(site, ignore_errors=True))
    name = f"probe_{uuid.uuid4().hex[:8]}"
    (site / f"{name}.py").write_text("VALUE = 7\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), "/nonexistent-entry"]))
    box = SandboxConfig(mode="interpreter", environment=_environment() + [str(site)], memory_limit=1 << 30)
    request.addfinalizer(box.close)
    w = _notebook(box, f"import os\nimport {name}\nfound = {name}.VALUE\npath = os.environ['PYTHONPATH']\n", uid=95)
    found, path = _value(w, "found"), _value(w, "path")
    w.close()
    assert found == 7, found
    assert path.split(os.pathsep) == [str(ROOT), str(site)], path


def test_gpu_workers_are_told_where_the_cuda_driver_is(tmp_path, monkeypatch):
    """Triton finds libcuda with ``/sbin/ldconfig -p``, which fails for the worker's uid where the linker cache is
    root's alone (seen on the H200 image): the grader finds the folder and hands it in."""
    from grader import sandbox

    lib = tmp_path / "driver"
    lib.mkdir()
    (lib / "libcuda.so.1").write_bytes(b"")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/nonexistent:{lib}")
    monkeypatch.delenv("TRITON_LIBCUDA_PATH", raising=False)
    monkeypatch.setattr(sandbox.subprocess, "run", lambda *a, **k: type("R", (), {"stdout": ""})())
    assert sandbox.libcuda_dir() == str(lib)
    cfg = sandbox.SandboxConfig(mode="gpu", root=tmp_path / "root")
    try:
        args = sandbox.bwrap_args(cfg, "kernel", "gpu")
        i = args.index("TRITON_LIBCUDA_PATH")
        assert args[i - 1] == "--setenv" and args[i + 1] == str(lib)
        assert any(args[j:j + 3] == ["--ro-bind-try", str(lib), str(lib)] for j in range(len(args)))
        env = {args[j + 1]: args[j + 2] for j in range(len(args) - 2) if args[j] == "--setenv"}
        # the uid has no passwd entry: getpass.getuser() (torch asks it) reads these instead of raising KeyError
        assert env["USER"] == env["LOGNAME"] == "student"
    finally:
        cfg.close()


def test_a_root_only_linker_cache_is_bound_as_a_readable_copy(tmp_path, monkeypatch):
    """Where /etc/ld.so.cache is root's alone, every library opened by name fails inside the sandbox (torch's
    libnvidia-ml on an out-of-memory error asserted on the H100): the worker sees a copy it may read."""
    from grader import sandbox

    cache = tmp_path / "ld.so.cache"
    cache.write_bytes(b"glibc-ld.so.cache1.1 and the rest")
    cfg = sandbox.SandboxConfig(mode="interpreter", root=tmp_path / "root")
    try:
        def bound() -> str:
            args = sandbox.bwrap_args(cfg, "kernel", "interpreter")
            return next(args[j + 1] for j in range(len(args) - 2) if args[j + 2] == "/etc/ld.so.cache")

        monkeypatch.setattr(sandbox, "_LD_CACHE", str(cache))
        cache.chmod(0o644)
        assert bound() == str(cache)  # readable already: the image's own file
        cache.chmod(0o600)
        copy = pathlib.Path(bound())
        assert copy != cache and copy.read_bytes() == cache.read_bytes() and copy.stat().st_mode & 0o777 == 0o644
    finally:
        cfg.close()


def test_a_result_may_carry_its_outputs_past_the_message_allowance():
    """A GPU case's outputs are tens of MiB (vector_add's 64.5 MiB on the H200), over the 8 MiB allowance for
    other messages: the kernel loop's cap adds the bytes of the run's output buffers, guards included."""
    import math
    import types

    from grader.grade import _output_bytes
    from kernels.checks import engine
    from kernels.checks.spec import get

    ex = get("00_setup.vector_add")
    case = ex.hidden[-1]
    inputs = ex.make_inputs(case, torch.Generator().manual_seed(0))
    want = engine.expected_outputs(ex, case, inputs)
    assert want
    n = _output_bytes(ex, types.SimpleNamespace(case=case, inputs=inputs))
    assert n == sum((math.prod(s) + 2 * g) * torch.empty((), dtype=d).element_size() for s, d, g, _ in want.values())


def test_the_checks_stand_in_has_every_name_a_lesson_imports_from_kernels_checks():
    """In the notebook's sandbox ``kernels.checks`` is a stub: a name a lesson's locked cells import from it that the
    stub lacks stops that cell there, and every import after it in the cell with it (lesson 00's setup cell holds
    all of the lesson's imports)."""
    import ast

    from grader.course import SOLUTIONS, lesson_ids, source_text
    from grader.sandbox import _CHECKS_STUB

    stub: dict = {}
    exec(compile(_CHECKS_STUB, "checks-stub", "exec"), stub)
    missing = []
    for lesson in lesson_ids():
        tree = ast.parse(source_text(SOLUTIONS / f"{lesson}.py"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "kernels.checks":
                missing += [f"{lesson}: {a.name}" for a in node.names if a.name not in stub]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kernels.checks."):
                missing.append(f"{lesson}: from {node.module} import ... (only kernels.checks exists there)")
    assert not missing, missing
