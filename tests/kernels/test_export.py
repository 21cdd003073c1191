"""The PTX exporter, the manifest rules both launchers follow, and (on a GPU) the Python driver-API launcher."""

import hashlib
import json
import pathlib
import re
import subprocess
import sys

import pytest
import torch

from kernels.export import export, expr
from kernels.export.aot import ExportError
from kernels.export.manifest import ManifestError, image_path, load, resolve
from kernels.export.ptx import PtxVersionError, check_loadable, max_isa_for_cuda, parse_isa, ptx_entry, ptx_isa
from kernels.testing import check_bad_input

# one pytest-xdist worker runs this module, so that its module-scoped fixture (the export through the command
# line) is built once, not once per worker
pytestmark = pytest.mark.xdist_group("test_export")

ROOT = pathlib.Path(__file__).resolve().parents[2]
KERNELS = ("vector_add", "matmul", "linear_attention")


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "kernels.export", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """All three kernels, exported once through the command line for a CUDA 13.0 driver."""
    out = tmp_path_factory.mktemp("export")
    proc = _cli(*KERNELS, "--out", str(out), "--driver-cuda", "13.0")
    assert proc.returncode == 0, proc.stderr
    for k in KERNELS:
        assert f"{k}: .entry" in proc.stdout
    return out


def _manifest(exported, name):
    return load(exported / f"{name}.json", triton_version=__import__("triton").__version__)


def _check_common(m, exported, n_params):
    ptx = (exported / m["images"]["ptx"]).read_text()
    cubin = (exported / m["images"]["cubin"]).read_bytes()
    assert cubin[:4] == b"\x7fELF"
    assert m["sha256"] == {"ptx": hashlib.sha256(ptx.encode()).hexdigest(), "cubin": hashlib.sha256(cubin).hexdigest()}
    entry, decls = ptx_entry(ptx)
    assert entry == m["entry"]
    assert len(m["params"]) == n_params
    assert len(decls) == n_params + 2, "Triton appends the global and profile scratch pointers"
    assert all(".u64" in d for d in decls[-2:])
    assert [s["name"] for s in m["scratch"]] == ["global_scratch", "profile_scratch"]
    assert all(s["bytes_per_program"] == 0 for s in m["scratch"])
    assert m["threads_per_block"] == 32 * m["num_warps"]
    assert f".reqntid {m['threads_per_block']}" in ptx
    assert m["ptx_isa"] == ptx_isa(ptx) and parse_isa(m["ptx_isa"]) <= (9, 0)
    assert (m["max_ptx_isa"], m["driver_cuda"], m["prefer"]) == ("9.0", "13.0", "ptx")
    assert m["target"] == {"backend": "cuda", "arch": 90, "warp_size": 32, "ptx_target": "sm_90a"}
    assert ptx.count(".entry") == 1
    for p, d in zip(m["params"], decls):
        want = ".u64" if p["kind"] == "pointer" else {"i32": ".u32", "fp32": ".f32"}.get(p["type"], "?")
        assert want in d, (p, d)
    return ptx


def test_vector_add_manifest(exported):
    m = _manifest(exported, "vector_add")
    _check_common(m, exported, 4)
    assert [(p["name"], p["type"]) for p in m["params"]] == [
        ("x_ptr", "*fp32"), ("y_ptr", "*fp32"), ("out_ptr", "*fp32"), ("n_elements", "i32")]
    assert [p["role"] for p in m["params"][:3]] == ["in", "in", "out"]
    assert (m["constexprs"], m["threads_per_block"], m["shared_bytes"]) == ({"BLOCK_SIZE": 1024}, 128, 0)
    assert m["grid"] == ["cdiv(n_elements, BLOCK_SIZE)", "1", "1"]
    plan = resolve(m, {"n_elements": 1000})
    assert (plan.grid, plan.numel["out_ptr"], plan.scalars) == ((1, 1, 1), 1000, {"n_elements": 1000})
    assert resolve(m, {"n_elements": 2049}).grid == (3, 1, 1)


def test_matmul_manifest(exported):
    m = _manifest(exported, "matmul")
    _check_common(m, exported, 9)
    assert m["dtype"] == "fp16" and m["params"][0]["type"] == "*fp16"
    assert m["constexprs"]["UPCAST"] is False and m["constexprs"]["DOT_PRECISION"] == "tf32"
    assert {k: m["constexprs"][k] for k in ("stride_ak", "stride_bn", "stride_cn")} == dict.fromkeys(
        ("stride_ak", "stride_bn", "stride_cn"), 1), "unit strides are compiled in, as a JIT launch does"
    assert m["threads_per_block"] == 256 and m["shared_bytes"] > 0
    plan = resolve(m, {"M": 1000, "N": 777, "K": 513})
    cx = m["constexprs"]
    assert plan.grid == (-(-1000 // cx["BLOCK_M"]) * -(-777 // cx["BLOCK_N"]), 1, 1)
    assert plan.scalars == {"M": 1000, "N": 777, "K": 513, "stride_am": 513, "stride_bk": 777, "stride_cm": 777}
    assert plan.numel == {"a_ptr": 1000 * 513, "b_ptr": 513 * 777, "c_ptr": 1000 * 777}


def test_linear_attention_manifest(exported):
    m = _manifest(exported, "linear_attention")
    _check_common(m, exported, 24)
    params = {p["name"]: p for p in m["params"]}
    assert [p["name"] for p in m["params"][:7]] == ["q_ptr", "k_ptr", "v_ptr", "o_ptr", "h0_ptr", "ht_ptr", "cu_ptr"]
    assert [params[n]["role"] for n in ("h0_ptr", "ht_ptr", "cu_ptr")] == ["unused"] * 3
    assert params["scale"]["type"] == "fp32" and params["scale"]["value"] is None
    assert m["dtype"] == "bf16" and m["shared_bytes"] > 48 * 1024
    assert m["constexprs"]["PRECISION"] is None and m["constexprs"]["UPCAST"] is False
    plan = resolve(m, dict(B=2, T=100, H=3, K=32, V=96))
    assert plan.grid == (-(-96 // m["constexprs"]["BV"]), 6, 1)
    assert plan.scalars["scale"] is None
    assert (plan.scalars["stride_qb"], plan.scalars["stride_qt"], plan.scalars["stride_qh"]) == (9600, 96, 32)
    assert (plan.scalars["stride_ob"], plan.scalars["stride_ot"], plan.scalars["stride_oh"]) == (28800, 288, 96)
    assert plan.numel["h0_ptr"] == 0 and plan.numel["o_ptr"] == 2 * 100 * 3 * 96
    with pytest.raises(ManifestError, match=r"K <= BK.*K=300"):
        resolve(m, dict(B=1, T=10, H=1, K=300, V=8))
    with pytest.raises(ManifestError, match="grid axis y"):
        resolve(m, dict(B=700, T=1, H=100, K=8, V=8))


def test_manifest_resolution_errors(exported):
    m = _manifest(exported, "vector_add")
    check_bad_input(resolve, m, {}, match="missing sizes ['n_elements']")
    check_bad_input(resolve, m, {"n_elements": 10, "n": 3}, match="unknown sizes ['n']")
    check_bad_input(resolve, m, {"n_elements": 2**31}, match="n_elements <= 2147483647 - BLOCK_SIZE")
    check_bad_input(resolve, m, {"n_elements": 0}, match="n_elements >= 1")
    check_bad_input(resolve, m, {"n_elements": 1.5}, match="must be an integer")
    with pytest.raises(ManifestError, match="exported by Triton"):
        load(exported / "vector_add.json", triton_version="0.0.1")
    bad = json.loads((exported / "vector_add.json").read_text())
    bad["format_version"] = 2
    path = exported / "v2.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ManifestError, match="format version 2"):
        load(path)
    with pytest.raises(ManifestError, match="no manifest at"):
        load(exported / "missing.json")


def test_ptx_isa_rules():
    assert (max_isa_for_cuda("13.0"), max_isa_for_cuda("12.6"), max_isa_for_cuda("12.8"), max_isa_for_cuda("13")) == (
        "9.0", "8.5", "8.7", "9.0")
    check_bad_input(max_isa_for_cuda, "14.7", match="no PTX ISA known for CUDA '14.7'")
    assert parse_isa("9.4") == (9, 4) == parse_isa("94")
    check_bad_input(parse_isa, "nine", match="looks like 9.0")
    newer = "//\n.version 9.4\n.target sm_90a\n.address_size 64\n"
    assert ptx_isa(newer) == "9.4"
    with pytest.raises(PtxVersionError, match=r"\.version 9\.4.*at most 9\.0.*--fallback cubin.*--ptx-version 90"):
        check_loadable(newer, "9.0", what="a CUDA 13.0 driver")
    assert check_loadable(newer, "9.4") == "9.4"
    check_bad_input(ptx_isa, ".target sm_90\n", match="no '.version")


def test_refuses_ptx_the_driver_cannot_load(tmp_path):
    proc = _cli("vector_add", "--out", str(tmp_path), "--max-ptx", "7.0")
    assert proc.returncode == 3, proc.stderr
    assert "at most 7.0" in proc.stderr and "--fallback cubin" in proc.stderr
    assert not list(tmp_path.iterdir()), "nothing is written when the PTX is refused"
    m = export("vector_add", tmp_path, max_ptx="7.0", fallback="cubin")
    assert m["prefer"] == "cubin" and "ptx" not in m["images"] and "at most 7.0" in m["ptx_refused"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vector_add.cubin", "vector_add.json"]
    with pytest.raises(ManifestError, match="no ptx image.*at most 7.0"):
        image_path(load(tmp_path / "vector_add.json"), "ptx")


def test_bad_export_requests(tmp_path):
    check_bad_input(export, "softmax", tmp_path, match="no exportable kernel 'softmax'; known: vector_add")
    check_bad_input(export, "vector_add", tmp_path, dtype="fp8", match="dtype 'fp8' not supported")
    check_bad_input(export, "vector_add", tmp_path, constexprs={"BLOCK_SIZE": 1000}, match="power of two")
    check_bad_input(export, "vector_add", tmp_path, driver_cuda="9.9", match="no PTX ISA known for CUDA")
    check_bad_input(export, "vector_add", tmp_path, max_ptx="9.0", driver_cuda="13.0", match="not both")
    check_bad_input(export, "vector_add", tmp_path, fallback="sass", match="fallback must be")
    check_bad_input(export, "linear_attention", tmp_path, hint16=["scale"], match="--hint16 scale: only integer")
    check_bad_input(export, "linear_attention", tmp_path, hint16=["T2"], match="--hint16 T2: only integer")
    with pytest.raises(TypeError, match="unknown export options"):
        export("vector_add", tmp_path, warps=4)
    check_bad_input(export, "vector_add", tmp_path, constexprs={"BLOCK": 64}, match="not constexprs")


def test_cli_list_and_usage(capsys):
    from kernels.export.cli import main

    assert main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(k in listed for k in KERNELS)
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2 and "name at least one kernel" in capsys.readouterr().err


def test_a_spec_that_does_not_match_its_kernel_is_refused():
    """A broken twin of the vector-add spec: one parameter untyped, one typed that the kernel lacks."""
    import dataclasses

    from kernels.export.aot import _types
    from kernels.export.registry import get

    spec = get("vector_add")

    class Param:
        def __init__(self, name, is_constexpr=False):
            self.name, self.is_constexpr = name, is_constexpr

    class Fn:
        params = [Param("x_ptr"), Param("y_ptr"), Param("out_ptr"), Param("n_elements"), Param("BLOCK_SIZE", True)]

    _types(spec, Fn, "fp32", {"BLOCK_SIZE": 1024})
    untyped = dataclasses.replace(spec, signature={k: v for k, v in spec.signature.items() if k != "y_ptr"})
    with pytest.raises(ExportError, match="parameter 'y_ptr' .* has no type"):
        _types(untyped, Fn, "fp32", {"BLOCK_SIZE": 1024})
    extra = dataclasses.replace(spec, signature={**spec.signature, "alpha": "fp32"})
    with pytest.raises(ExportError, match=r"types \['alpha'\]"):
        _types(extra, Fn, "fp32", {"BLOCK_SIZE": 1024})
    with pytest.raises(ExportError, match="constexpr 'BLOCK_SIZE' has no value"):
        _types(spec, Fn, "fp32", {})


def test_size_expressions():
    env = dict(n=1000, B=128, x=-7)
    assert expr.evaluate("cdiv(n, B) * 2 + max(3, -x)", env) == 23
    assert expr.evaluate("-7 // 2", {}) == -4 and expr.evaluate("-7 % 2", {}) == 1
    assert expr.evaluate("n <= 2147483647 - B", env) == 1
    assert expr.names("cdiv(M, BM) * cdiv(N, BN)") == {"M", "BM", "N", "BN"}
    for text, want in [("cdiv(1)", "takes 2 arguments"), ("1 +", "expected a value"), ("foo(1, 2)", "unknown function"),
                       ("1 $ 2", "unexpected '$'"), ("a b", "unexpected 'b'"), ("1 < 2 < 3", "after a complete")]:
        check_bad_input(expr.parse, text, match=want)
    check_bad_input(expr.evaluate, "zz + 1", {"a": 1}, match="needs 'zz'")
    check_bad_input(expr.evaluate, "a // 0", {"a": 1}, match="division by zero")


@pytest.mark.slow
def test_gpu_script_logic_without_a_gpu(tmp_path):
    """The GPU round trip as far as it goes here: exports, refusal, argument files and the Rust CLI's checks."""
    rust = ROOT / "rust" / "target" / "release" / "workbook-launch"
    if torch.cuda.is_available():
        pytest.skip("covered by the GPU run itself (scripts/gpu_export.sh)")
    from kernels.export.roundtrip import main

    args = ["--out", str(tmp_path), "--quick"]
    if rust.is_file():
        args += ["--rust", str(rust)]
    assert main(args) == 0
    r = json.loads((tmp_path / "export.json").read_text())
    assert r["ok"] and all(c["ok"] for c in r["checks"]) and len(r["checks"]) == 3, r["checks"]
    assert set(r["exports"]) == {"vector_add_fp32", "matmul_fp16", "linear_attention_bf16",
                                 "linear_attention_bf16_aligned"}
    aligned = json.loads((tmp_path / "export" / "linear_attention_bf16_aligned.json").read_text())
    assert "(H*K) % 16 == 0" in aligned["requires"] and aligned["shared_bytes"] > r["exports"][
        "linear_attention_bf16"]["shared_bytes"], "the hints let Triton pipeline the loads through shared memory"
    assert "cp.async" in (tmp_path / "export" / "linear_attention_bf16_aligned.ptx").read_text()
    if rust.is_file():
        rust_rows = [c for c in r["cases"] if c["launcher"] == "rust"]
        assert rust_rows and all("host-side checks passed" in c.get("reason", "") for c in rust_rows), rust_rows
    assert "overall: ok" in (tmp_path / "export-table.txt").read_text()
    assert re.search(r"\.version \d+\.\d+", (tmp_path / "export" / "matmul_fp16.ptx").read_text())


# --- on a GPU: the Python driver-API launcher --------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu_exports(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-export")
    for k in KERNELS:
        export(k, out)
    export("vector_add", out, fallback="cubin", max_ptx="7.0", stem="vector_add_cubin")
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("image", ["ptx", "cubin"])
def test_python_launcher_vector_add(gpu_exports, image):
    from kernels.export.launch import Launcher
    from kernels.testing import assert_close, poisoned, randn

    la = Launcher(gpu_exports / "vector_add.json", image=image)
    n = 1_000_003
    x, y = randn(n, seed=1), randn(n, seed=2)
    out = poisoned(n)
    la(x, y, out.out, sizes={"n_elements": n})
    torch.cuda.synchronize()
    out.check("out")
    assert_close("vector_add", x.double() + y.double(), out.out, 1e-6)


@pytest.mark.gpu
def test_python_launcher_cubin_fallback(gpu_exports):
    from kernels.export.launch import Launcher
    from kernels.testing import assert_close, poisoned, randn

    la = Launcher(gpu_exports / "vector_add_cubin.json")
    assert la.image == "cubin"
    x, y, out = randn(5000, seed=3), randn(5000, seed=4), poisoned(5000)
    la(x, y, out.out, sizes={"n_elements": 5000})
    torch.cuda.synchronize()
    assert_close("vector_add (cubin)", x.double() + y.double(), out.out, 1e-6)


@pytest.mark.gpu
def test_python_launcher_matmul_and_linear_attention(gpu_exports):
    from kernels.export.launch import Launcher
    from kernels.linear_attention.reference import reference_linear_attention
    from kernels.testing import assert_close, poisoned, randn, tolerance

    mm = Launcher(gpu_exports / "matmul.json")
    a, b = randn(300, 513, dtype=torch.float16, seed=5), randn(513, 130, dtype=torch.float16, seed=6)
    c = poisoned(300, 130, dtype=torch.float16)
    mm(a, b, c.out, sizes=dict(M=300, N=130, K=513))
    torch.cuda.synchronize()
    c.check("c")
    assert_close("matmul", a.double() @ b.double(), c.out, tolerance(torch.float16))

    la = Launcher(gpu_exports / "linear_attention.json")
    B, T, H, K, V = 2, 333, 3, 100, 72
    q, k = (randn(B, T, H, K, dtype=torch.bfloat16, seed=s) for s in (7, 8))
    v = randn(B, T, H, V, dtype=torch.bfloat16, seed=9)
    o = poisoned(B, T, H, V, dtype=torch.bfloat16)
    la(q, k, v, o.out, scale=0.1, sizes=dict(B=B, T=T, H=H, K=K, V=V))
    torch.cuda.synchronize()
    o.check("o")
    ref, _ = reference_linear_attention(q.double(), k.double(), v.double(), 0.1, normalize=False)
    assert_close("linear_attention", ref, o.out, tolerance(torch.bfloat16))


@pytest.mark.gpu
def test_python_launcher_broken_grid_is_caught(gpu_exports, tmp_path):
    """A broken twin: a manifest whose grid covers half the elements leaves NaN that the poisoned check finds."""
    from kernels.export.launch import Launcher
    from kernels.testing import poisoned, randn

    m = json.loads((gpu_exports / "vector_add.json").read_text())
    m["grid"][0] = "cdiv(n_elements, BLOCK_SIZE) // 2"
    for f in ("vector_add.ptx", "vector_add.cubin"):
        (tmp_path / f).write_bytes((gpu_exports / f).read_bytes())
    (tmp_path / "vector_add.json").write_text(json.dumps(m))
    la = Launcher(tmp_path / "vector_add.json")
    x, y, out = randn(8192, seed=1), randn(8192, seed=2), poisoned(8192)
    la(x, y, out.out, sizes={"n_elements": 8192})
    torch.cuda.synchronize()
    with pytest.raises(AssertionError, match="never written"):
        out.check("out")


@pytest.mark.gpu
def test_python_launcher_bad_input(gpu_exports):
    from kernels.export.launch import Launcher

    la = Launcher(gpu_exports / "vector_add.json")
    x = torch.zeros(100, device="cuda")
    s = {"n_elements": 100}
    check_bad_input(la, x, x, sizes=s, match="missing ['out_ptr']")
    check_bad_input(la, x, x, x, x, sizes=s, match="takes 3 arguments")
    check_bad_input(la, x, x.half(), x, sizes=s, match="dtype torch.float16")
    check_bad_input(la, x, x[:50], x, sizes=s, match="holds 50 elements")
    check_bad_input(la, x, x.cpu(), x, sizes=s, match="is on cpu")
    check_bad_input(la, x, torch.zeros(101, device="cuda")[1:], x, sizes=s, match="16-byte aligned")
    check_bad_input(la, x, x, x, match="missing sizes")
    check_bad_input(la, x, x, x, sizes=s, alpha=1, match="unknown argument 'alpha'")
    check_bad_input(la, x, torch.zeros(200, device="cuda")[::2], x, sizes=s, match="contiguous")


class _FakeDriver:
    """Stands in for ``cuda.bindings.driver`` and records every launch, reading the packed parameters back."""

    class CUresult:
        CUDA_SUCCESS = 0

    class CUfunction_attribute:
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

    def __init__(self, manifest, fail_launch=0):
        self.m, self.fail_launch, self.calls, self.launches = manifest, fail_launch, [], []

    def __getattr__(self, name):
        def call(*args):
            self.calls.append((name, args))
            return (0, f"<{name}>")
        return call

    @staticmethod
    def CUstream(x):  # noqa: N802 (the binding's name)
        return x

    def cuGetErrorName(self, err):  # noqa: N802
        return 0, b"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"

    def cuGetErrorString(self, err):  # noqa: N802
        return 0, b"too many resources requested for launch"

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, addr, extra):  # noqa: N802
        import ctypes

        read = {"i32": ctypes.c_int32, "fp32": ctypes.c_float}
        types = [p["type"] for p in self.m["params"]] + ["*scratch", "*scratch"]
        ptrs = (ctypes.c_void_p * len(types)).from_address(addr)
        args = [(ctypes.c_uint64 if t.startswith("*") else read[t]).from_address(ptrs[i]).value
                for i, t in enumerate(types)]
        self.launches.append({"grid": (gx, gy, gz), "block": (bx, by, bz), "shared": shared, "args": args})
        return (self.fail_launch,)


def _fake_launcher(monkeypatch, path, **kw):
    from kernels.export import launch

    fake = _FakeDriver(load(path), **kw)
    monkeypatch.setattr(launch, "driver", lambda: fake)
    return launch.Launcher(path), fake


def test_python_launcher_packs_from_the_manifest(exported, monkeypatch):
    """The launcher's packing, read back from the argument array it hands the driver (no GPU needed)."""
    la, fake = _fake_launcher(monkeypatch, exported / "linear_attention.json")
    m = la.manifest
    names = [c[0] for c in fake.calls]
    assert names[:4] == ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent"]
    assert ("cuFuncSetAttribute", ("<cuModuleGetFunction>", 8, m["shared_bytes"])) in fake.calls
    sizes = dict(B=2, T=100, H=3, K=32, V=96)
    q, k, v, o = 0x10000, 0x20000, 0x30000, 0x40000
    la(q, k, v, o, scale=0.125, sizes=sizes, stream=7)
    got = fake.launches[-1]
    assert got["grid"] == (-(-96 // m["constexprs"]["BV"]), 6, 1)
    assert got["block"] == (m["threads_per_block"], 1, 1) and got["shared"] == m["shared_bytes"]
    args = dict(zip([p["name"] for p in m["params"]] + ["global_scratch", "profile_scratch"], got["args"]))
    assert (args["q_ptr"], args["k_ptr"], args["v_ptr"], args["o_ptr"]) == (q, k, v, o)
    assert args["h0_ptr"] == args["ht_ptr"] == args["cu_ptr"] == 0
    assert args["global_scratch"] == args["profile_scratch"] == 0
    assert (args["T"], args["H"], args["K"], args["V"], args["scale"]) == (100, 3, 32, 96, 0.125)
    assert (args["stride_qb"], args["stride_qt"], args["stride_qh"]) == (100 * 3 * 32, 3 * 32, 32)
    assert (args["stride_ob"], args["stride_ot"], args["stride_oh"]) == (100 * 3 * 96, 3 * 96, 96)
    check_bad_input(la, q, k, v, o, sizes=sizes, stream=7, match="missing ['scale']")
    check_bad_input(la, q, k, v, o + 8, scale=1.0, sizes=sizes, stream=7, match="16-byte aligned")
    check_bad_input(la, q, k, v, o, scale="x", sizes=sizes, stream=7, match="must be a number")
    check_bad_input(la, q, k, v, o, scale=1.0, sizes={**sizes, "K": 300}, stream=7, match="K <= BK")
    check_bad_input(la, q, k, v, [o], scale=1.0, sizes=sizes, stream=7, match="must be a torch.Tensor")


def test_python_launcher_reports_driver_errors(exported, monkeypatch):
    from kernels.export.launch import LaunchError

    la, fake = _fake_launcher(monkeypatch, exported / "vector_add.json", fail_launch=701)
    with pytest.raises(LaunchError, match=r"cuLaunchKernel\(_naive_vector_add_kernel\) failed: "
                                          r"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES \(too many resources"):
        la(0x1000, 0x2000, 0x3000, sizes={"n_elements": 5000}, stream=0)
    assert fake.launches[-1]["grid"] == (5, 1, 1) and fake.launches[-1]["args"][3] == 5000
    assert not any(c[0] == "cuFuncSetAttribute" for c in fake.calls), "48 KiB or less needs no opt-in"


def test_launchers_refuse_an_image_that_does_not_match_its_manifest(exported, tmp_path, monkeypatch):
    m = json.loads((exported / "vector_add.json").read_text())
    (tmp_path / "vector_add.json").write_text(json.dumps(m))
    (tmp_path / "vector_add.ptx").write_text((exported / "vector_add.ptx").read_text().replace("// ", "//  ", 1))
    (tmp_path / "vector_add.cubin").write_bytes((exported / "vector_add.cubin").read_bytes())
    with pytest.raises(ManifestError, match="vector_add.ptx does not match its manifest"):
        _fake_launcher(monkeypatch, tmp_path / "vector_add.json")
    from kernels.export import launch

    assert launch.Launcher(tmp_path / "vector_add.json", image="cubin").image == "cubin", "the cubin still matches"
