"""Round trip on a GPU: export kernels, launch them through the Rust and the Python driver-API launchers, compare
with torch, and time what a launch costs on the host.

    python -m kernels.export.roundtrip --rust rust/target/release/workbook-launch [--out DIR] [--quick]

Correctness: each case's inputs are seeded random tensors written as raw files; every launcher's output is
checked against the float64 oracle within the dtype's tolerance and against the package's own Triton launch of
the same kernel. Overhead: the median host time per launch of a one-program vector add over many back-to-back
launches, for the Rust CLI, the Python launcher (packed once, and packed per call) and Triton's ``kernel[grid]``.
Without a GPU everything up to the first launch runs (exports, manifests, argument files, the Rust CLI's checks,
which then stop at the missing driver) and the rest is reported as skipped.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from ..device import ON_GPU, machine
from ..testing import randn, rel_error, tolerance
from .cli import export_many
from .manifest import ManifestError, resolve
from .ptx import PtxVersionError

__all__ = ["CASES", "run", "main"]

_TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_INT_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}

#: name -> (kernel, export options, sizes, free scalars). Sizes avoid multiples of the blocks.
CASES: dict[str, tuple[str, dict, dict, dict]] = {
    "vector_add_fp32": ("vector_add", {}, {"n_elements": 1_000_003}, {}),
    "matmul_fp16": ("matmul", {"dtype": "fp16"}, {"M": 1000, "N": 777, "K": 513}, {}),
    "matmul_fp32_tf32": ("matmul", {"dtype": "fp32", "constexprs": {"BLOCK_N": 128, "BLOCK_K": 32}},
                         {"M": 515, "N": 300, "K": 257}, {}),
    "linear_attention_bf16": ("linear_attention", {"dtype": "bf16"},
                              {"B": 2, "T": 1000, "H": 4, "K": 128, "V": 128}, {"scale": 128 ** -0.5}),
    "linear_attention_fp16_odd": ("linear_attention", {"dtype": "fp16"},
                                  {"B": 1, "T": 333, "H": 3, "K": 100, "V": 72}, {"scale": 0.1}),
    "matmul_fp16_aligned": ("matmul", {"dtype": "fp16", "hint16": ["aligned"]}, {"M": 1000, "N": 784, "K": 528}, {}),
    "linear_attention_bf16_aligned": ("linear_attention", {"dtype": "bf16", "hint16": ["aligned"]},
                                      {"B": 2, "T": 1000, "H": 4, "K": 128, "V": 128}, {"scale": 128 ** -0.5}),
}
_QUICK = ("vector_add_fp32", "matmul_fp16", "linear_attention_bf16", "linear_attention_bf16_aligned")
#: Kernel timings at the course's GPU sizes: (case whose exports to time, sizes, scalars).
_PERF = {
    "linear_attention": (("linear_attention_bf16", "linear_attention_bf16_aligned"),
                         {"B": 4, "T": 4096, "H": 16, "K": 128, "V": 128}, {"scale": 128 ** -0.5}),
    "matmul": (("matmul_fp16", "matmul_fp16_aligned"), {"M": 4096, "N": 4096, "K": 4096}, {}),
}


def _inputs(kernel: str, dtype: torch.dtype, s: dict, seed: int) -> dict[str, torch.Tensor]:
    if kernel == "vector_add":
        return {"x_ptr": randn(s["n_elements"], dtype=dtype, seed=seed, device="cpu"),
                "y_ptr": randn(s["n_elements"], dtype=dtype, seed=seed + 1, device="cpu")}
    if kernel == "matmul":
        return {"a_ptr": randn(s["M"], s["K"], dtype=dtype, seed=seed, device="cpu"),
                "b_ptr": randn(s["K"], s["N"], dtype=dtype, seed=seed + 1, device="cpu")}
    B, T, H, K, V = (s[n] for n in "BTHKV")
    return {"q_ptr": randn(B, T, H, K, dtype=dtype, seed=seed, device="cpu"),
            "k_ptr": randn(B, T, H, K, dtype=dtype, seed=seed + 1, device="cpu"),
            "v_ptr": randn(B, T, H, V, dtype=dtype, seed=seed + 2, device="cpu")}


def _out_shape(kernel: str, s: dict) -> tuple[int, ...]:
    if kernel == "vector_add":
        return (s["n_elements"],)
    if kernel == "matmul":
        return (s["M"], s["N"])
    return (s["B"], s["T"], s["H"], s["V"])


def _reference(kernel: str, x: dict, scalars: dict) -> torch.Tensor:
    d = {k: v.double() for k, v in x.items()}
    if kernel == "vector_add":
        return d["x_ptr"] + d["y_ptr"]
    if kernel == "matmul":
        return d["a_ptr"] @ d["b_ptr"]
    from ..linear_attention.reference import reference_linear_attention

    o, _ = reference_linear_attention(d["q_ptr"], d["k_ptr"], d["v_ptr"], scalars["scale"], normalize=False)
    return o


def _triton_launch(kernel: str, g: dict, scalars: dict, manifest: dict) -> torch.Tensor:
    """The package's own wrapper on GPU tensors, with the export's tiles: Triton's launcher on the same kernel."""
    cx = manifest["constexprs"]
    if kernel == "vector_add":
        from ..vector_add.naive import naive_vector_add

        return naive_vector_add(g["x_ptr"], g["y_ptr"], block_size=cx["BLOCK_SIZE"])
    if kernel == "matmul":
        from ..matmul.tiled import tiled_matmul

        return tiled_matmul(g["a_ptr"], g["b_ptr"], block_m=cx["BLOCK_M"], block_n=cx["BLOCK_N"],
                            block_k=cx["BLOCK_K"], group_m=cx["GROUP_M"], num_warps=manifest["num_warps"],
                            num_stages=manifest["num_stages"])
    from ..linear_attention.chunked import chunked_linear_attention

    o, _ = chunked_linear_attention(g["q_ptr"], g["k_ptr"], g["v_ptr"], scalars["scale"], chunk_size=cx["BT"])
    return o


def _tol(kernel: str, manifest: dict, dtype: torch.dtype) -> float:
    tf32 = kernel == "matmul" and manifest["constexprs"].get("DOT_PRECISION") == "tf32"
    return tolerance(dtype, tf32=tf32)


def _to_bytes(t: torch.Tensor) -> bytes:
    t = t.contiguous().cpu()
    return t.view(_INT_VIEW[t.dtype]).numpy().tobytes()


def _from_bytes(data: bytes, dtype: torch.dtype, shape) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=_INT_VIEW[dtype]).view(dtype).reshape(shape)


def _driver_cuda() -> str | None:
    try:
        from cuda.bindings import driver as cu

        err, v = cu.cuDriverGetVersion()
        return f"{v // 1000}.{(v % 1000) // 10}" if err == cu.CUresult.CUDA_SUCCESS else None
    except ImportError:
        return None


def _rust_cmd(rust: str, manifest_path: pathlib.Path, sizes: dict, scalars: dict, files: dict, out: dict,
              image: str | None) -> list[str]:
    cmd = [rust, "run", "--manifest", str(manifest_path)]
    if image:
        cmd += ["--image", image]
    for k, v in sizes.items():
        cmd += ["--size", f"{k}={v}"]
    for k, v in scalars.items():
        cmd += ["--scalar", f"{k}={v!r}"]
    for k, f in files.items():
        cmd += ["--in", f"{k}={f}"]
    for k, f in out.items():
        cmd += ["--out", f"{k}={f}"]
    return cmd


def _time_loop(fn, launches: int, repeat: int, warmup: int) -> dict:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(launches):
            fn()
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t0) * 1e6 / launches)
    return {"median_us": statistics.median(per), "min_us": min(per), "launches": launches, "repeat": repeat}


def _overhead(rust: str | None, manifest_path: pathlib.Path, launches: int, repeat: int) -> dict:
    from ..vector_add.naive import _naive_vector_add_kernel
    from .launch import Launcher

    n = 1024
    x, y = (randn(n, seed=s, device="cuda") for s in (1, 2))
    o = torch.empty_like(x)
    rows: dict[str, dict] = {}
    if rust:
        proc = subprocess.run([rust, "bench", "--manifest", str(manifest_path), "--size", f"n_elements={n}",
                               "--launches", str(launches), "--repeat", str(repeat), "--warmup", "500"],
                              capture_output=True, text=True, timeout=120)
        rows["rust_cli"] = json.loads(proc.stdout) if proc.returncode == 0 else {"error": proc.stderr.strip()}
    la = Launcher(manifest_path)
    packed = la.prepare(x, y, o, sizes={"n_elements": n})
    rows["python_driver_packed"] = _time_loop(packed.launch, launches, repeat, 500)
    rows["python_driver_call"] = _time_loop(lambda: la(x, y, o, sizes={"n_elements": n}), launches, repeat, 500)
    rows["triton_launcher"] = _time_loop(lambda: _naive_vector_add_kernel[(1,)](x, y, o, n, BLOCK_SIZE=1024),
                                         launches, repeat, 500)
    return rows


def run(*, rust: str | None, out: pathlib.Path, quick: bool = False, launches: int = 2000,
        repeat: int = 15) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="roundtrip-"))
    exports = out / "export"
    driver = _driver_cuda() if ON_GPU else None
    limit = {"driver_cuda": driver} if driver else {}
    result: dict = {"gpu": None, **machine(), "driver_cuda": driver, "rust": rust, "exports": {}, "cases": [],
                    "checks": [], "overhead": {}, "kernel_ms": {}}
    names = [n for n in CASES if not quick or n in _QUICK]
    jobs = [{"kernel": CASES[n][0], "out_dir": exports, "stem": n, **CASES[n][1], **limit} for n in names]
    jobs += [{"kernel": "vector_add", "out_dir": work / "refused", "max_ptx": "7.0"},
             {"kernel": "vector_add", "out_dir": exports, "max_ptx": "7.0", "fallback": "cubin",
              "stem": "vector_add_cubin_only"}]
    *answers, refused, fallback = export_many(jobs)
    manifests: dict[str, dict] = {}
    for name, m in zip(names, answers):
        if isinstance(m, Exception):
            result["exports"][name] = {"error": str(m)}
            continue
        manifests[name] = m
        result["exports"][name] = {k: m[k] for k in ("entry", "ptx_isa", "max_ptx_isa", "prefer", "threads_per_block",
                                                     "shared_bytes", "constexprs", "num_warps", "num_stages")}
    result["checks"].append({"check": "PTX newer than --max-ptx 7.0 is refused",
                             "ok": isinstance(refused, PtxVersionError), "message": str(refused)[:300]})
    ok = isinstance(fallback, dict) and fallback["prefer"] == "cubin" and "ptx" not in fallback["images"]
    result["checks"].append({"check": "--fallback cubin writes no PTX and prefers the cubin", "ok": ok})
    if ok and "vector_add_fp32" in manifests:
        names.append("vector_add_cubin_only")
        manifests["vector_add_cubin_only"] = fallback

    for name in names:
        if name not in manifests:
            continue
        m = manifests[name]
        kernel, _, sizes, scalars = CASES["vector_add_fp32" if name == "vector_add_cubin_only" else name]
        dtype = _TORCH[m["dtype"]]
        x = _inputs(kernel, dtype, sizes, seed=len(result["cases"]) * 10)
        files = {}
        for k, t in x.items():
            files[k] = work / f"{name}.{k}.bin"
            files[k].write_bytes(_to_bytes(t))
        outp = next(p["name"] for p in m["params"] if p["kind"] == "pointer" and p["role"] == "out")
        ref = _reference(kernel, x, scalars)
        tol = _tol(kernel, m, dtype)
        triton_out = _triton_launch(kernel, {k: t.cuda() for k, t in x.items()}, scalars, m).cpu() if ON_GPU else None
        images = ["ptx", "cubin"] if "ptx" in m["images"] else [None]
        mpath = exports / f"{name}.json"
        for image in images:
            row = {"case": name, "launcher": "rust", "image": image or m["prefer"], "tol": tol}
            if rust:
                ofile = work / f"{name}.{image}.out.bin"
                cmd = _rust_cmd(rust, mpath, sizes, scalars, files, {outp: ofile}, image)
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                if proc.returncode == 0:
                    got = _from_bytes(ofile.read_bytes(), dtype, _out_shape(kernel, sizes))
                    _score(row, got, ref, tol, triton_out)
                elif not ON_GPU and proc.returncode == 4:
                    row.update(status="skipped", reason="host-side checks passed; no CUDA driver here",
                               message=proc.stderr.strip())
                else:
                    row.update(status="FAILED", ok=False, message=proc.stderr.strip(), command=cmd)
            else:
                row.update(status="skipped", reason="no Rust binary given (--rust)")
            result["cases"].append(row)
            row = {"case": name, "launcher": "python", "image": image or m["prefer"], "tol": tol}
            if ON_GPU:
                try:
                    got = _python_launch(mpath, image, x, outp, dtype, _out_shape(kernel, sizes), sizes, scalars)
                    _score(row, got, ref, tol, triton_out)
                except Exception as e:  # report and go on: one broken path must not hide the others
                    row.update(status="FAILED", ok=False, message=f"{type(e).__name__}: {e}")
            else:
                row.update(status="skipped", reason="no GPU")
            result["cases"].append(row)
    if "linear_attention_bf16_aligned" in manifests:
        try:
            resolve(manifests["linear_attention_bf16_aligned"], {"B": 1, "T": 64, "H": 2, "K": 100, "V": 64})
            result["checks"].append({"check": "an aligned export refuses K=100", "ok": False})
        except ManifestError as e:
            result["checks"].append({"check": "an aligned export refuses K=100", "ok": "% 16 == 0" in str(e),
                                     "message": str(e)})
    if ON_GPU and "vector_add_fp32" in manifests:
        result["checks"] += _python_bad_input(exports / "vector_add_fp32.json")
        result["checks"] += _too_new_ptx(rust, exports / "vector_add_fp32.json", work)
        result["overhead"] = _overhead(rust, exports / "vector_add_fp32.json", launches, repeat)
        result["kernel_ms"] = _kernel_times(rust, exports, manifests)
    failed = [r for r in result["cases"] if r.get("ok") is False] + [c for c in result["checks"] if not c["ok"]]
    failed += [{"export": k, **v} for k, v in result["exports"].items() if "error" in v]
    result["ok"] = not failed
    result["failures"] = failed
    (out / "export.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    table = format_table(result)
    (out / "export-table.txt").write_text(table + "\n")
    print(table)
    return result


def _score(row: dict, got: torch.Tensor, ref: torch.Tensor, tol: float, triton_out) -> None:
    err = rel_error(got, ref)
    row.update(status="ok" if err <= tol else "WRONG", ok=bool(err <= tol), rel_error=err)
    if triton_out is not None:
        diff = (got.double() - triton_out.double()).abs().max().item()
        row["max_abs_diff_vs_triton"] = diff if math.isfinite(diff) else str(diff)


def _python_launch(mpath, image, x, outp, dtype, shape, sizes, scalars) -> torch.Tensor:
    from ..testing import poisoned
    from .launch import Launcher

    la = Launcher(mpath, image=image)
    o = poisoned(*shape, dtype=dtype, device="cuda")
    la(*[t.cuda() for t in x.values()], o.out, sizes=sizes, **scalars)
    torch.cuda.synchronize()
    o.check(f"{outp} ({image})")
    return o.out.cpu()


def _kernel_times(rust: str | None, exports: pathlib.Path, manifests: dict) -> dict:
    """Median ms at the GPU sizes: Triton's JIT launch vs the exports (any size; multiple-of-16 hints)."""
    import triton.testing

    from .launch import Launcher

    out: dict[str, dict] = {}
    for kernel, (names, sizes, scalars) in _PERF.items():
        if not all(n in manifests for n in names):
            continue
        dtype = _TORCH[manifests[names[0]]["dtype"]]
        x = {k: t.cuda() for k, t in _inputs(kernel, dtype, sizes, seed=99).items()}
        o = torch.empty(_out_shape(kernel, sizes), dtype=dtype, device="cuda")
        jit_launch = functools.partial(_triton_launch, kernel, x, scalars, manifests[names[0]])
        jit = jit_launch()
        row = {"sizes": sizes, "triton_jit": triton.testing.do_bench(jit_launch, return_mode="median")}
        for n in names:
            p = Launcher(exports / f"{n}.json").prepare(*x.values(), o, sizes=sizes, **scalars)
            row[n] = triton.testing.do_bench(p.launch, return_mode="median")
            torch.cuda.synchronize()
            row[f"{n}_max_abs_diff_vs_jit"] = (o.double() - jit.double()).abs().max().item()
            if rust:
                cmd = [rust, "bench", "--manifest", str(exports / f"{n}.json"), "--launches", "20", "--repeat", "10",
                       "--warmup", "5"] + [a for k, v in sizes.items() for a in ("--size", f"{k}={v}")]
                cmd += [a for k, v in scalars.items() for a in ("--scalar", f"{k}={v!r}")]
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                row[f"{n}_rust_bench"] = (json.loads(proc.stdout)["median_us"] / 1e3 if proc.returncode == 0
                                          else proc.stderr.strip())
        out[kernel] = row
    return out



def _too_new_ptx(rust: str | None, mpath: pathlib.Path, work: pathlib.Path) -> list[dict]:
    """What the driver says about PTX newer than it knows (the case the exporter's refusal prevents)."""
    import re

    from .launch import Launcher, LaunchError

    d = work / "too-new"
    d.mkdir()
    m = json.loads(mpath.read_text())
    ptx = (mpath.parent / m["images"]["ptx"]).read_text()
    newer = re.sub(r"^\.version \d+\.\d+", ".version 9.4", ptx, count=1, flags=re.M).encode()
    (d / m["images"]["ptx"]).write_bytes(newer)
    (d / m["images"]["cubin"]).write_bytes((mpath.parent / m["images"]["cubin"]).read_bytes())
    sha = {**m["sha256"], "ptx": hashlib.sha256(newer).hexdigest()}
    (d / mpath.name).write_text(json.dumps({**m, "ptx_isa": "9.4", "sha256": sha}))
    rows = []
    want = "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
    try:
        Launcher(d / mpath.name, image="ptx")
        rows.append({"check": f"python launcher reports {want}", "ok": False, "message": "it loaded"})
    except LaunchError as e:
        rows.append({"check": f"python launcher reports {want}", "ok": want in str(e), "message": str(e)})
    if rust:
        x = d / "x.bin"
        x.write_bytes(bytes(4 * 1024))
        proc = subprocess.run([rust, "run", "--manifest", str(d / mpath.name), "--image", "ptx", "--size",
                               "n_elements=1024", "--in", f"x_ptr={x}", "--in", f"y_ptr={x}"],
                              capture_output=True, text=True, timeout=60)
        rows.append({"check": f"rust launcher reports {want}", "ok": proc.returncode == 5 and want in proc.stderr,
                     "message": proc.stderr.strip()})
    return rows


def _python_bad_input(mpath: pathlib.Path) -> list[dict]:
    from .launch import Launcher

    la = Launcher(mpath)
    x = torch.zeros(100, device="cuda")
    sizes = {"n_elements": 100}
    cases = [
        ("wrong argument count", lambda: la(x, x, sizes=sizes), "missing"),
        ("wrong dtype", lambda: la(x, x.half(), x, sizes=sizes), "dtype"),
        ("too small", lambda: la(x, x[:50], x, sizes=sizes), "holds 50 elements"),
        ("CPU tensor", lambda: la(x, x.cpu(), x, sizes=sizes), "is on cpu"),
        ("misaligned", lambda: la(x, torch.zeros(101, device="cuda")[1:], x, sizes=sizes), "aligned"),
        ("missing size", lambda: la(x, x, x), "missing sizes"),
    ]
    rows = []
    for what, fn, want in cases:
        try:
            fn()
            rows.append({"check": f"python launcher refuses: {what}", "ok": False, "message": "no error"})
        except (TypeError, ValueError) as e:
            rows.append({"check": f"python launcher refuses: {what}", "ok": want in str(e), "message": str(e)})
    return rows


def format_table(result: dict) -> str:
    lines = [f"export round trip: {result['gpu'] or 'no GPU'}, driver CUDA {result['driver_cuda']}, "
             f"triton {result['triton']}, torch {result['torch']}"]
    for name, e in result["exports"].items():
        if "error" in e:
            lines.append(f"  export {name}: ERROR {e['error']}")
        else:
            lines.append(f"  export {name}: PTX ISA {e['ptx_isa']} (max {e['max_ptx_isa']}), {e['threads_per_block']} "
                         f"threads, {e['shared_bytes']} B shared, prefer {e['prefer']}")
    lines.append(f"  {'case':28} {'launcher':8} {'image':6} {'status':8} {'rel err':>10} {'tol':>8} {'vs triton':>10}")
    for r in result["cases"]:
        err = f"{r['rel_error']:.2e}" if "rel_error" in r else "-"
        vs = r.get("max_abs_diff_vs_triton", "-")
        vs = f"{vs:.1e}" if isinstance(vs, float) else str(vs)
        lines.append(f"  {r['case']:28} {r['launcher']:8} {r['image']:6} {r['status']:8} {err:>10} "
                     f"{r['tol']:>8.0e} {vs:>10}")
    for c in result["checks"]:
        lines.append(f"  check: {c['check']}: {'ok' if c['ok'] else 'FAILED'}")
    if result["overhead"]:
        lines.append("  launch overhead, one-program vector add, median µs per launch (min):")
        for k, v in result["overhead"].items():
            lines.append(f"    {k:24} " + (f"{v['median_us']:8.2f} ({v['min_us']:.2f})" if "median_us" in v
                                            else f"ERROR {v.get('error')}"))
    for kernel, row in result.get("kernel_ms", {}).items():
        lines.append(f"  {kernel} {row['sizes']}: median ms")
        for k, v in row.items():
            if k != "sizes":
                lines.append(f"    {k:44} {v:.4g}" if isinstance(v, float) else f"    {k:44} {v}")
    lines.append(f"  overall: {'ok' if result['ok'] else 'FAILED'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernels.export.roundtrip", description=__doc__.splitlines()[0])
    ap.add_argument("--rust", help="path to the workbook-launch binary")
    ap.add_argument("--out", type=pathlib.Path, default=None,
                    help="results folder (results/gpu on a GPU, bench-results/export-cpu otherwise)")
    ap.add_argument("--quick", action="store_true", help="three cases instead of five")
    ap.add_argument("--launches", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args(argv)
    rust = args.rust
    if rust and not pathlib.Path(rust).is_file():
        print(f"error: no Rust launcher at {rust}", file=sys.stderr)
        return 2
    out = args.out or pathlib.Path("results/gpu" if ON_GPU else "bench-results/export-cpu")
    result = run(rust=rust, out=out, quick=args.quick, launches=args.launches, repeat=args.repeat)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
