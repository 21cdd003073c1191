"""The cubin path: a graded kernel crosses from its sandbox as machine code, bound and launched by the grader's
side without importing its source. The compile runs here for sm_90 (no GPU needed); the launch needs a GPU."""

import pathlib

import pytest
import torch

from kernels.checks.cubin import CubinError, check_reply, kernel_params, manifest, specialize, wire_spec

ADD = '''import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr, SCALE: "tl.constexpr" = 1.0):
    offs = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, (x + tl.load(y_ptr + offs, mask=mask)) * SCALE, mask=mask)
'''
ROOT = pathlib.Path(__file__).resolve().parents[2]
TORCH_IN_KERNEL = ADD.replace("    mask = offs", "    torch.ones(3)\n    mask = offs")


def test_parameters_are_read_not_run():
    p = kernel_params(ADD, "add_kernel")
    assert [(q["name"], q["constexpr"]) for q in p["params"]] == [
        ("x_ptr", False), ("y_ptr", False), ("out_ptr", False), ("n_elements", False), ("BLOCK_SIZE", True),
        ("SCALE", True)]
    assert p["params"][-1]["default"] == 1.0
    with pytest.raises(CubinError, match="not a literal"):
        kernel_params(ADD.replace("= 1.0", "= float('1')"), "add_kernel")
    with pytest.raises(CubinError, match="no function"):
        kernel_params(ADD, "other")


def test_a_launch_is_specialised_as_the_jit_does():
    p = kernel_params(ADD, "add_kernel")
    x = torch.zeros(1024)
    s = specialize(p, (x, x[1:], x, 64), {"BLOCK_SIZE": 128, "num_warps": 2})
    assert s["signature"] == {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32",
                              "BLOCK_SIZE": "constexpr", "SCALE": "constexpr"}
    assert set(s["attrs"]) == {"x_ptr", "out_ptr", "n_elements"}  # x[1:] is not 16-byte aligned
    assert s["constexprs"] == {"BLOCK_SIZE": 128, "SCALE": 1.0} and s["options"] == {"num_warps": 2}
    one = specialize(p, (x, x, x, 1), {"BLOCK_SIZE": 128})
    assert one["constexprs"]["n_elements"] == 1 and one["runtime"] == ["x_ptr", "y_ptr", "out_ptr"]
    assert one["key"] != s["key"] and specialize(p, (x, x[1:], x, 64), {"BLOCK_SIZE": 128, "num_warps": 2})["key"] \
        == s["key"]
    with pytest.raises(CubinError, match="no parameter 'BLOCK'"):
        specialize(p, (x, x, x, 64), {"BLOCK": 128})
    with pytest.raises(CubinError, match="nothing is passed for 'BLOCK_SIZE'"):
        specialize(p, (x, x, x, 64), {})


RULE = '''import triton
import triton.language as tl


@triton.jit(do_not_specialize=["m"], do_not_specialize_on_alignment=[1, "k"])
def rule_kernel(x_ptr, y_ptr, n, m, k, flag, scale, BLOCK: tl.constexpr):
    pass
'''


def test_the_source_and_the_function_are_specialised_alike():
    """The parameters read from text and a ``JITFunction`` of the same kernel give the same specialisation: both
    go through kernels.compile.specialise_arg."""
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    from kernels.compile import bind, specialise

    def rule_kernel(x_ptr, y_ptr, n, m, k, flag, scale, BLOCK: tl.constexpr):
        pass

    jit = JITFunction(rule_kernel, do_not_specialize=["m"], do_not_specialize_on_alignment=[1, "k"])
    p = kernel_params(RULE, "rule_kernel")
    x = torch.zeros(64)
    launches = [(x, x, 64, 64, 64, True, 0.5), (x[1:], x[1:], 1, 1, 1, False, 2.0), (x, x, 17, 32, 2**40, 0, 1),
                (x.bool(), x.half(), 2**63, -2**31 - 16, 0, None, 3)]
    for n, args in enumerate(launches):
        s = specialize(p, args, {"BLOCK": 32})
        sig, const, attrs = specialise(jit, bind(jit, args, {"BLOCK": 32}), specialize=True)
        assert s["signature"] == sig and s["constexprs"] == const, f"launch {n}"
        assert set(s["attrs"]) == {jit.params[i].name for (i,) in attrs}, f"launch {n}"
    s = specialize(p, (x, x, 64, 64, 64, True, 0.5), {"BLOCK": 32})
    assert set(s["attrs"]) == {"x_ptr", "n"} and s["signature"]["flag"] == "u1"
    with pytest.raises(CubinError, match="64 bits"):
        specialize(p, (x, x, 2**64, 0, 0, 0, 0.0), {"BLOCK": 32})


@pytest.fixture(scope="module")
def box():
    from grader.sandbox import SandboxConfig

    cfg = SandboxConfig(mode="interpreter", memory_limit=1 << 30)
    yield cfg
    cfg.close()


def _compile_worker(box, text, uid=97):
    from grader.sandbox import Worker

    w = Worker(box, uid=box.uid_base + uid, mode="compile", kind="compile", name=f"cubin{uid}")
    w.send({"op": "cubin", "kernels": [{"entry": "add_kernel", "text": text}]})
    return w


def test_the_sandbox_compiles_a_cubin_the_grader_can_check(box):
    p = kernel_params(ADD, "add_kernel")
    x = torch.zeros(1000)
    spec = specialize(p, (x, x, x, 1000), {"BLOCK_SIZE": 256, "num_warps": 4}, arch=90)
    w = _compile_worker(box, ADD)
    try:
        w.send({"op": "spec", "kernel": 0, "spec": wire_spec(spec)})
        reply = w.recv(120, what="compiling")
        blob, meta = check_reply(reply)
        assert blob[:4] == b"\x7fELF" and meta["name"] == "add_kernel" and meta["num_warps"] == 4
        m = manifest("add_kernel", spec, meta)
        assert [q["name"] for q in m["params"]] == ["x_ptr", "y_ptr", "out_ptr", "n_elements"]
        assert m["params"][0]["align"] == 16 and m["threads_per_block"] == 128 and len(m["scratch"]) == 2
    finally:
        w.close()
    w = _compile_worker(box, TORCH_IN_KERNEL, uid=98)
    try:
        w.send({"op": "spec", "kernel": 0, "spec": wire_spec(spec)})
        reply = w.recv(120, what="compiling")
        assert "does not compile" in reply.get("error", ""), reply
    finally:
        w.close()


class _Session:
    """What :func:`grader.cubin.relay` uses of a grading session: its workers and budget."""

    def __init__(self, box):
        from types import SimpleNamespace

        self.box, self.workers, self.s = box, {}, SimpleNamespace(compile_timeout=120)

    def worker(self, kind):
        from grader.sandbox import Worker

        assert kind == "compile"
        self.workers[kind] = Worker(self.box, uid=self.box.uid_base + 96, mode="compile", kind="compile", name="relay")
        return self.workers[kind]

    def budget(self, want):
        return want

    def drop(self, kind):
        self.workers.pop(kind).kill()


class _Launcher:
    def __init__(self):
        self.sent = []

    def send(self, m):
        self.sent.append(m)


def test_the_grader_relays_a_checked_cubin(box):
    """The grader's relay between the launch worker's request and the compile worker: a cubin that passed
    check_reply, or the compiler's message; the compile worker is started once per problem."""

    from grader.cubin import relay

    p = kernel_params(ADD, "add_kernel")
    x = torch.zeros(64)
    session, launcher = _Session(box), _Launcher()
    kernels = [{"entry": "add_kernel", "text": ADD}]
    try:
        for n in (64, 65):
            spec = wire_spec(specialize(p, (x, x, x, n), {"BLOCK_SIZE": 64}, arch=90))
            relay(session, launcher, {"event": "compile", "kernel": 0, "spec": spec}, kernels)
        first = session.workers["compile"]
        assert [m["op"] for m in launcher.sent] == ["cubin", "cubin"] and "error" not in launcher.sent[0]
        assert check_reply(launcher.sent[1])[1]["name"] == "add_kernel"
        bad = dict(spec, constexprs={"BLOCK_SIZE": 100, "SCALE": 1.0})  # tl.arange needs a power of two
        relay(session, launcher, {"event": "compile", "kernel": 0, "spec": bad}, kernels)
        assert "does not compile" in launcher.sent[-1]["error"] and session.workers["compile"] is first
    finally:
        for w in session.workers.values():
            w.close()


def test_a_forged_reply_is_refused():
    good = {"name": "k", "num_warps": 4, "num_ctas": 1, "shared": 0, "global_scratch_size": 0,
            "global_scratch_align": 1, "profile_scratch_size": 0, "profile_scratch_align": 1, "tmem_size": 0}
    elf = torch.frombuffer(bytearray(b"\x7fELF" + b"\0" * 60), dtype=torch.uint8)
    assert check_reply({"cubin": elf, "meta": good})[1]["name"] == "k"
    for bad, why in ((dict(good, num_warps=64), "num_warps"), (dict(good, name="k; rm"), "identifier"),
                     (dict(good, shared=-1), "shared"), (dict(good, launch_pdl=True), "launch_pdl")):
        with pytest.raises(CubinError, match=why):
            check_reply({"cubin": elf, "meta": bad})
    with pytest.raises(CubinError, match="ELF"):
        check_reply({"cubin": torch.zeros(8, dtype=torch.uint8), "meta": good})
    with pytest.raises(CubinError, match="at most"):
        check_reply({"cubin": torch.zeros(5 << 20, dtype=torch.uint8), "meta": good})


MIXED = ADD.replace("def add_kernel(x_ptr, y_ptr, out_ptr, n_elements,",
                    "def add_kernel(n_elements, x_ptr, scale, y_ptr, out_ptr,")


class _FakeDriver:
    """Just enough of ``cuda.bindings.driver`` to see what the launcher hands ``cuLaunchKernel``."""

    class CUresult:
        CUDA_SUCCESS = 0

    class CUfunction_attribute:
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

    def __init__(self):
        self.launches, self.loaded = [], []

    def CUstream(self, s):
        return s

    def __getattr__(self, name):  # cuInit, cuDeviceGet, cuCtxSetCurrent, ...: succeed
        return lambda *a: (0, name)

    def cuModuleLoadData(self, addr):
        import ctypes

        self.loaded.append(ctypes.string_at(addr, 4))
        return 0, "module"

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        import ctypes

        ptrs = (ctypes.c_void_p * self.n).from_address(params)  # the values die with the launch: read them now
        self.launches.append({"grid": (gx, gy, gz), "block": bx, "params": [ctypes.string_at(a, 8) for a in ptrs]})
        return (0,)


def test_a_launch_is_packed_in_the_kernel_s_order(monkeypatch):
    """Without a GPU: the stand-in binds a launch whose pointers and scalars interleave, and the package's launcher
    packs the values the cubin takes (runtime parameters in order, then the two scratch pointers)."""
    import struct

    from kernels.checks.cubin import CubinKernel
    from kernels.export import launch

    fake = _FakeDriver()
    monkeypatch.setattr(launch, "driver", lambda: fake)
    monkeypatch.setattr(launch.Launcher, "_stream", lambda self, s: 0)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    elf = torch.frombuffer(bytearray(b"\x7fELF" + b"\0" * 60), dtype=torch.uint8)
    meta = {"name": "add_kernel", "num_warps": 2, "num_ctas": 1, "shared": 1024, "global_scratch_size": 0,
            "global_scratch_align": 1, "profile_scratch_size": 0, "profile_scratch_align": 1, "tmem_size": 0}
    asked = []

    def compiler(spec):
        asked.append(spec)
        return check_reply({"cubin": elf, "meta": meta})

    k = CubinKernel(kernel_params(MIXED, "add_kernel"), compiler, arch=90)
    x, y, out = torch.zeros(256), torch.zeros(256), torch.zeros(256)
    fake.n = 7  # n_elements, x, scale, y, out and the two scratch pointers
    k[(3,)](1000, x, 0.5, y[1:], out, BLOCK_SIZE=128)
    fake.n = 6  # n_elements = 1 is compiled in
    k[lambda m: (m["BLOCK_SIZE"] // 64, 2)](1, x, 2.0, y, out, BLOCK_SIZE=128)
    k[(0,)](1000, x, 0.5, y, out, BLOCK_SIZE=128)  # an empty grid launches nothing, as in Triton
    assert fake.loaded == [b"\x7fELF"] * 2 and len(asked) == 2
    assert asked[1]["constexprs"]["n_elements"] == 1  # an integer equal to 1 is compiled in, as the JIT does
    first, second = fake.launches
    assert first["grid"] == (3, 1, 1) and first["block"] == 64 and second["grid"] == (2, 2, 1)
    i32, u64, f32 = (lambda b: struct.unpack("<i", b[:4])[0]), (lambda b: struct.unpack("<Q", b)[0]), \
        (lambda b: struct.unpack("<f", b[:4])[0])
    v = first["params"]
    assert (i32(v[0]), u64(v[1]), f32(v[2]), u64(v[3]), u64(v[4])) == (1000, x.data_ptr(), 0.5, y[1:].data_ptr(),
                                                                       out.data_ptr())
    assert u64(v[5]) == u64(v[6]) == 0  # global and profile scratch: none asked for
    v = second["params"]
    assert (u64(v[0]), f32(v[1]), u64(v[2]), u64(v[3])) == (x.data_ptr(), 2.0, y.data_ptr(), out.data_ptr())


def test_the_cubin_is_compiled_with_the_hints_the_jit_would_give(tmp_path):
    """A specialisation names its divisibility hints by parameter; the compile must attach each to its argument.
    Compiled without them, a tiled matmul timed 5x slower on the cubin path than through Triton's JIT on an H100
    (no vector loads, no asynchronous copies), and correct kernels failed their speed checks. The compile runs in
    a process of its own, as in the grader's compile worker: here kernels are built for the interpreter."""
    import json
    import os
    import subprocess
    import sys

    x = torch.zeros(1024)
    s = specialize(kernel_params(ADD, "add_kernel"), (x, x[1:], x, 64), {"BLOCK_SIZE": 128})
    (tmp_path / "spec.json").write_text(json.dumps(wire_spec(s)))
    script = f"""
import json, re
from kernels.checks.cubin import compile_spec
from kernels.checks.provenance import KernelSource, load
from kernels.checks.spec import CheckFailed
fn = load(KernelSource("add_kernel", {ADD!r}), {str(tmp_path)!r}, interpret=False)
spec = json.loads(open({str(tmp_path / "spec.json")!r}).read())
head = next(line for line in compile_spec(fn, spec).asm["ttir"].splitlines() if "tt.func public" in line)
try:
    compile_spec(fn, dict(spec, attrs={{"z_ptr": [["tt.divisibility", 16]]}}))
    refused = ""
except CheckFailed as e:
    refused = str(e)
print(json.dumps({{"hinted": re.findall(r"%(\\w+): [^%]*tt\\.divisibility = 16", head), "refused": refused}}))
"""
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert sorted(got["hinted"]) == ["n_elements", "out_ptr", "x_ptr"], got  # x[1:] is not 16-byte aligned
    assert "'z_ptr', which is not a parameter" in got["refused"]


@pytest.mark.gpu
def test_the_grader_side_launches_the_cubin(tmp_path):
    """On a GPU: compile in this process (a test: no sandbox), launch through the package's launcher."""
    import importlib.util

    from kernels.checks.cubin import CubinKernel, compile_spec, metadata

    path = tmp_path / "cubin_add.py"
    path.write_text(ADD)
    spec = importlib.util.spec_from_file_location("cubin_add", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    asked = []

    def compiler(s):
        asked.append(s["key"])
        c = compile_spec(mod.add_kernel, s)
        return check_reply({"cubin": torch.frombuffer(bytearray(c.asm["cubin"]), dtype=torch.uint8),
                            "meta": metadata(c)})

    k = CubinKernel(kernel_params(ADD, "add_kernel"), compiler)
    for n in (1000, 4096, 4097):
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.full_like(x, float("nan"))
        k[(triton_cdiv(n, 256),)](x, y, out, n, BLOCK_SIZE=256)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, x + y)
        k[lambda meta: (triton_cdiv(meta["n_elements"], meta["BLOCK_SIZE"]),)](x, y, out, n, BLOCK_SIZE=128,
                                                                             SCALE=2.0)
        torch.testing.assert_close(out, 2 * (x + y))
    assert len(asked) == len(set(asked)) == 4  # n=4096 is divisible by 16; each specialisation compiled once


def triton_cdiv(a, b):
    return -(-a // b)


# ---- timing forgery: what the timed launches did is checked, whichever way a kernel tells them apart ---------

def _timed(launch, **kw):
    from kernels.checks.engine import time_fresh
    from kernels.testing import poisoned

    outs = {"out": poisoned(4099, dtype=torch.float32, guard=64, device="cpu")}
    return time_fresh(launch, outs, warmup=0.2, rep=1.0, flush_bytes=0, **kw), outs


def test_work_done_only_on_the_first_launch_is_found():
    x = torch.randn(4099)
    seen = {"launches": 0}

    def first_only(o):  # state kept between launches (on a GPU: a flag in memory the kernel can reach)
        seen["launches"] += 1
        if seen["launches"] == 1:
            o["out"].copy_(2 * x)

    r, _ = _timed(first_only, verify=1e-6)
    assert r["skipped"][0] == seen["launches"] - 2, r["skipped"]  # all but the reference launch and "after"
    assert r["skipped"][1] == 4099 * r["skipped"][0]
    seen["launches"] = 0
    r, _ = _timed(first_only)  # unverified, the same forgery passes every check time_fresh made before
    assert r["skipped"] == (0, 0)


def test_outputs_are_poisoned_before_every_timed_launch():
    x = torch.randn(4099)
    seen = {"launches": 0, "work": 0}

    def skip_if_filled(o):  # "this output already holds a number: the work was done"
        seen["launches"] += 1
        if not torch.isnan(o["out"][0]):
            return
        seen["work"] += 1
        o["out"].copy_(2 * x)

    r, outs = _timed(skip_if_filled, verify=1e-6)
    assert seen["work"] == seen["launches"] and r["skipped"] == (0, 0)
    assert torch.equal(r["after"]["out"].out, 2 * x) and outs["out"].stray_writes() == (0, 0)


def test_a_wrong_or_flaky_launch_while_timed_is_counted():
    x = torch.randn(4099)
    seen = {"launches": 0}

    def every_fifth_wrong(o):
        seen["launches"] += 1
        o["out"].copy_(2 * x if seen["launches"] % 5 else x)

    r, _ = _timed(every_fifth_wrong, verify=1e-3)
    assert 0 < r["skipped"][0] <= seen["launches"] // 5 + 1


def test_the_interpreter_pre_check_runs_apart(grader_run):
    """On a GPU with cubins the kernel's Python runs only in the pre-check (and the compile): the small cases,
    bounds-checked in the interpreter, in the kernel worker, which is stopped before the launch worker starts."""
    from grader import cubin
    from grader.grade import CheckResult, _Session
    from grader.notebook import CheckCall
    from kernels.checks import engine
    from kernels.checks.spec import get

    ex = get("00_setup.vector_add")
    session = _Session(grader_run, "pre", "00_setup", 0, [], [], [])
    call = CheckCall(ex.id, ("add_kernel",), False)
    cases, _ = engine.active_cases(ex, False)
    items = [{"index": i, "case": c, "seed": 5} for i, c in cases]  # as the grader's run_kernel makes them
    request = [{"index": i, "hidden": False, "inputs": engine.case_inputs(ex, c, 5)} for i, c in cases]
    wild = ADD.replace("tl.store(out_ptr + offs,", "tl.store(out_ptr + offs + 1,")
    try:
        assert cubin.precheck(session, ex, call, [{"entry": "add_kernel", "text": wild}], [None], [], []) == {}
        assert cubin.precheck(session, ex, call, [{"entry": "add_kernel", "text": ADD}], [None], request, items) == {}
        assert "kernel" not in session.workers
        found = cubin.precheck(session, ex, call, [{"entry": "add_kernel", "text": wild}], [None], request, items)
        assert isinstance(found, CheckResult) and not found.passed
        assert "out of bounds" in "\n".join(found.lines), found.lines
    finally:
        session.finish()


class _Channel:
    """The launch worker's channel, in this process: a compile request goes through the grader's relay to a real
    sandboxed compile worker, and what the relay sends back is what the next ``recv`` returns."""

    def __init__(self, box, kernels):
        self.session, self.kernels = _Session(box), kernels
        self.sent, self.inbox = [], []

    def send(self, m):  # the worker's side: an event for the grader

        from grader.cubin import relay

        self.sent.append(m)
        if m.get("event") == "compile":
            relay(self.session, _Inbox(self.inbox), m, self.kernels)

    def recv(self):
        return self.inbox.pop(0)


class _Inbox:
    def __init__(self, inbox):
        self.inbox = inbox

    def send(self, m):  # the grader's side: a reply for the worker
        self.inbox.append(m)


@pytest.mark.parametrize("lesson, exercise, name", [("02_naive_hbm_loops", "fused", "fused_kernel"),
                                                     ("07_backward", "dq", "dq_kernel")])
def test_the_launch_worker_grades_a_lesson_kernel_as_cubin(box, monkeypatch, lesson, exercise, name):
    """Without a GPU, everything of the launch worker but the device: a lesson's solution kernel rebuilt from the
    notebook as the grader sends it, each case's specialisation compiled in the sandbox, the cubin checked and
    handed to the package's launcher (a fake driver here), one launch per case on the exercise's own grid."""
    from grader import worker
    from grader.course import SOLUTIONS, source_text
    from grader.notebook import split
    from grader.percent import read_percent
    from kernels.checks import engine, provenance
    from kernels.checks.spec import get
    from kernels.export import launch

    fake = _FakeDriver()
    fake.n = 0
    monkeypatch.setattr(launch, "driver", lambda: fake)
    monkeypatch.setattr(launch.Launcher, "_stream", lambda self, s: 0)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    code, _ = split(read_percent(source_text(SOLUTIONS / f"{lesson}.py")))
    ks = provenance.from_cells(code, name)
    kernels = [{"entry": ks.entry, "text": ks.text}]
    ex = get(f"{lesson}.{exercise}")
    cases, _ = engine.active_cases(ex, False)
    ch = _Channel(box, kernels)
    req = {"exercise": ex.id, "kernels": kernels, "values": [None], "cubin": True,
           "cases": [{"index": i, "hidden": False, "inputs": engine.case_inputs(ex, c, 3)} for i, c in cases]}
    try:
        worker._serve_kernel(ch, req)
    finally:
        for w in ch.session.workers.values():
            w.close()
    events = [m["event"] for m in ch.sent]
    assert events[-1] == "done" and events.count("result") == len(cases), [m for m in ch.sent if "error" in m]
    assert 1 <= events.count("compile") <= len(cases)
    assert len(fake.launches) == len(cases)
    if exercise == "fused":
        assert [launch["grid"] for launch in fake.launches] == [(-(-c["V"] // c["BV"]), c["B"] * c["H"], 1)
                                                                for _, c in cases]


def test_a_kernel_that_works_only_on_its_first_launch_fails_its_speed_check(monkeypatch):
    """The timing faults reach the verdict: a 'kernel' that does the work on the first launch at the timed size
    and skips it afterwards (a flag kept between launches) fails with the launches named, while the same work done
    every launch passes (timed on this CPU, with the wall clock)."""
    from kernels import bench
    from kernels.checks import engine
    from kernels.checks.spec import Case, Exercise, Performance

    monkeypatch.setattr(bench, "copy_bandwidth", lambda *a, **k: 1e15)
    monkeypatch.setattr(bench, "matmul_rate", lambda *a, **k: 1e15)
    case = Case("n=4099", dict(n=4099))

    def run(args, inputs, outputs, case):
        args[0](inputs["x"], outputs["out"])

    ex = Exercise(id="99_timing.double", args=("kernel",), signature="double(x, out)",
                  make_inputs=lambda case, gen: {"x": torch.randn(case["n"], generator=gen)},
                  outputs=lambda case, inputs: {"out": ((case["n"],), torch.float32)}, run=run,
                  reference=lambda inputs, case: {"out": 2 * inputs["x"]}, visible=[case],
                  performance=Performance(case=case, baseline=run, min_speedup=0.01, floor=lambda c: (1, 0),
                                          warmup=1, rep=2))
    seen = {"n": 0}

    def first_only(x, out):
        seen["n"] += 1
        if seen["n"] == 1:
            out.copy_(2 * x)

    def honest(x, out):
        out.copy_(2 * x)

    forged = engine.time_performance(ex, (first_only,), 7)
    assert engine.perf_verdict(ex, forged) and "skips work while timed" in engine.perf_verdict(ex, forged)[0]
    fair = engine.time_performance(ex, (honest,), 7)
    assert fair["faults"] == [] and fair["mismatch"] == []
