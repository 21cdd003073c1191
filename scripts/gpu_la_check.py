"""Every family of the fused linear-attention forward against float64, each case in a process of its own.

A family is (normalize, dtype and fp32 precision, K, V) at a small and a large number of chains (B·H), plus
packed sequences, initial and final states, and chained segments forced short. Each case runs in its own
process, so a CUDA fault (an illegal address poisons the whole CUDA context) costs that case alone and is
reported as CRASH with the error's last lines; a case that hangs is killed at its time limit (TIMEOUT). With
``--sanitize N`` the first N small cases also run under ``compute-sanitizer --tool memcheck`` (PyTorch's caching
allocator off, so a read past a tensor's end is past an allocation's). Writes the results after every finished
case (default ``results/gpu/la-check.json``).

On a GPU: ``python3 scripts/gpu_la_check.py [--budget 130] [--jobs 8] [--sanitize 4] [--only TEXT ...]``.
Without one, ``--tiny`` runs the same families at interpreter sizes (K, V of 16-40, tens of tokens).
One case here, printing its result as the last line: ``--case NAME``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

__all__ = ["cases", "run_case", "run_all", "main"]

RESULT = "LA-CHECK-RESULT "  # the prefix of the line a child prints its result on
DTYPES = ("bf16", "fp16", "fp32-highest", "fp32-high")
#: (K, V) per dtype: every pair of {64, 128, 256} that a dispatch table row or a K != V path serves.
PAIRS = {"bf16": [(64, 64), (128, 128), (256, 256), (128, 64), (64, 256), (256, 128)],
         "fp16": [(128, 128), (256, 256), (64, 256)],
         "fp32-highest": [(64, 64), (128, 128), (256, 128)],
         "fp32-high": [(128, 128), (256, 256), (64, 128)]}
#: (B, H, T) few chains (the dispatch chains segments) and many (whole sequences a program); T no chunk multiple.
SHAPES = {"small": (1, 8, 20000 - 3), "large": (4, 16, 4096 + 5)}
#: Interpreter sizes: head sizes that are no powers of two, a few chunks of 16.
TINY_HEAD = {64: 16, 128: 24, 256: 40}
TINY_SHAPES = {"small": (1, 2, 77), "large": (2, 3, 37)}
#: Eight packed sequences, empty ones among them (a batch of one).
PACKED = [0, 1, 4095, 63, 0, 8192, 6000, 3001]
TINY_PACKED = [0, 1, 33, 0, 17, 40]


_MMA_SUFFIX = {"": "", "both": " mma", "qz": " mma-qz", "ksum": " mma-ksum", "wide": " mma-wide", "qzt": " mma-qzt"}


@dataclasses.dataclass(frozen=True)
class Case:
    """One check: the family, the shape, what states go in and come out, and the launch (``None``: the dispatch's,
    through ``chunk_linear_attn`` as users call it; an int: chained segments of that many tokens; 0: whole
    sequences)."""

    norm: bool
    dtype: str
    K: int
    V: int
    shape: str  # "small", "large" or "packed"
    states: bool = False  # initial state (and key sum) in
    L: int | None = None
    seed: int = 0
    mma: str = ""  # which of the normaliser's sums run on the tensor cores (Launch.norm_mma)
    tried: str = ""  # a launch change not yet the dispatch's default (dispatch.CANDIDATES)

    @property
    def name(self) -> str:
        launch = "" if self.L is None else (" whole" if self.L == 0 else f" L{self.L}")
        return (f"{'norm' if self.norm else 'raw'} {self.dtype} K{self.K}V{self.V} {self.shape}"
                f"{' states' if self.states else ''}{launch}{_MMA_SUFFIX[self.mma]}"
                f"{' try-' + self.tried if self.tried else ''}")


def cases() -> dict[str, Case]:
    """The grid: every (normalize, dtype, (K, V)) family at few and many chains, initial states in half the cases
    (at both shapes across the pairs); packed sequences through both launches; chained segments forced short
    (256 and 512 tokens); each normalising case also with the normaliser's sums on the tensor cores."""
    out: list[Case] = []
    i = 0
    for dtype in DTYPES:
        for K, V in PAIRS[dtype]:
            for norm in (True, False):
                for shape in ("large", "small"):
                    out.append(Case(norm, dtype, K, V, shape, states=(i + i // 4) % 2 == 1, seed=i))
                    i += 1
    for dtype, norm in (("bf16", True), ("fp16", True), ("fp32-highest", False), ("fp32-high", True)):
        for L in (0, 1024):
            out.append(Case(norm, dtype, 128, 128, "packed", states=True, L=L, seed=i))
            i += 1
    for dtype, K, V, L in (("bf16", 128, 128, 256), ("bf16", 128, 128, 512), ("bf16", 256, 256, 256),
                           ("fp16", 64, 256, 512), ("fp32-high", 128, 128, 256)):
        out.append(Case(True, dtype, K, V, "small", states=True, L=L, seed=i))
        i += 1
    for norm in (True, False):  # K=256 with V <= 64: one V block a head, so few chains even at B=4 H=16
        for shape in ("large", "small"):
            out.append(Case(norm, "fp16", 256, 64, shape, states=shape == "large", seed=i))
            i += 1
    # every case a candidate launch change applies to, again with it (dispatch.CANDIDATES, dispatch.applies): the
    # tensor-core normaliser with a 64-column q · z operand on every 16-bit normalising case, the second kᵀ load on
    # fp32 TF32, the D=256 tiles (an adopted one is the default, which the plain cases check)
    from kernels.linear_attention.dispatch import ADOPTED, CANDIDATES, applies

    kinds = {"bf16": "16", "fp16": "16", "fp32-high": "tf32", "fp32-highest": "tf32x3"}
    base = list(out)
    for name in CANDIDATES:
        if name not in ADOPTED:
            out += [dataclasses.replace(c, tried=name) for c in base if applies(name, c.K, kinds[c.dtype], c.norm, c.V)
                    and _changes_launch(name, c, kinds[c.dtype])]
    # the other tensor-core forms on a few families: the key sum alone (the product the H200 computed right), and
    # q · z as zᵀ qᵀ (z the register operand); "both" and "qz" (a 16-column q · z operand) gave wrong outputs
    for dtype, K, V, shape, L in (("bf16", 128, 128, "large", 0), ("bf16", 128, 128, "small", 512),
                                  ("fp16", 256, 256, "large", 0), ("fp32-high", 128, 128, "large", 0)):
        for part in ("ksum", "qzt"):
            out.append(Case(True, dtype, K, V, shape, states=True, L=L, seed=i, mma=part))
            i += 1
    # the candidates first, then the other tensor-core forms: the CUDA-core and raw cases all passed on the H200
    # (2026-12-04)
    return {c.name: c for c in sorted(out, key=lambda c: (not c.tried, not c.mma))}


def _changes_launch(name: str, case: Case, kind: str) -> bool:
    """Whether candidate ``name`` changes the launch of ``case`` on a GPU of 132 SMs: a change of how segments find
    their prefix (``Launch.prefix``) changes nothing where the launch walks whole sequences, and stored prefixes
    nothing for packed sequences."""
    from kernels.linear_attention import dispatch

    prefixes = {change.get("prefix") for change in dispatch.CANDIDATES[name].values()}
    if prefixes == {None}:
        return True
    if case.shape == "packed" and 3 in prefixes:  # no states pass for packed sequences: they keep the chain
        return False
    if case.L is not None:  # the case's own launch: chained segments, or whole sequences
        return case.L > 0
    B, H, T, _, _ = _sizes(case, False, False)
    lens = _lengths(case, False, False)
    N, lengths = (B, [T]) if lens is None else (len(lens), lens)
    precision = None if kind == "16" else kind
    with dispatch.trying(name):
        tried = dispatch.plan(case.K, case.V, _dtype(case), N, H, lengths, 132, precision)
    return tried != dispatch.plan(case.K, case.V, _dtype(case), N, H, lengths, 132, precision)


def _dtype(case: Case):
    """The case's input dtype (fp32 for both of fp32's precision modes)."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(case.dtype, torch.float32)


#: Small cases run again under compute-sanitizer (``--sanitize N`` takes the first N): both launches, states,
#: packed sequences, the widest heads.
SANITIZE = ["norm bf16 K128V128 small states L256", "raw fp32-high K128V128 small states try-fp32-kt",
            "raw fp32-high K256V256 large states",
            "norm fp16 K64V256 small states L512", "norm bf16 K128V128 packed states L1024",
            "norm bf16 K256V256 small states", "norm bf16 K256V256 small states try-d256-states-s64"]
SANITIZE_SHAPES = {"small": (1, 2, 1000 + 7), "large": (2, 3, 300 + 1)}
SANITIZE_PACKED = [0, 1, 300, 0, 700, 65]


def _lengths(case: Case, tiny: bool, sanitize: bool) -> list[int] | None:
    if case.shape != "packed":
        return None
    return TINY_PACKED if tiny else SANITIZE_PACKED if sanitize else PACKED


def _sizes(case: Case, tiny: bool, sanitize: bool) -> tuple[int, int, int, int, int]:
    K, V = (TINY_HEAD[case.K], TINY_HEAD[case.V]) if tiny else (case.K, case.V)
    lens = _lengths(case, tiny, sanitize)
    if lens is not None:
        return 1, 2 if tiny else 8, sum(lens), K, V
    B, H, T = (TINY_SHAPES if tiny else SANITIZE_SHAPES if sanitize else SHAPES)[case.shape]
    return B, H, T, K, V


@contextlib.contextmanager
def _matmul_precision(mode: str | None):
    import torch

    old = torch.get_float32_matmul_precision()
    if mode:
        torch.set_float32_matmul_precision(mode)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def run_case(case: Case, *, tiny: bool = False, sanitize: bool = False) -> dict:
    """Run one case in this process: its output, final state and key sum against the float64 oracle."""
    import torch

    from kernels.device import DEVICE, ON_GPU
    from kernels.linear_attention import chunk_linear_attn, dispatch
    from kernels.linear_attention.fused import Launch, fused_forward
    from kernels.linear_attention.reference import reference_linear_attention
    from kernels.testing import rel_error, tolerance

    dtype = _dtype(case)
    mode = case.dtype.removeprefix("fp32-") if case.dtype.startswith("fp32") else None
    B, H, T, K, V = _sizes(case, tiny, sanitize)
    lens = _lengths(case, tiny, sanitize)
    N = B if lens is None else len(lens)
    gen = torch.Generator().manual_seed(1000 + case.seed)

    def draw(*shape):
        return torch.randn(*shape, generator=gen)

    qk = [draw(B, T, H, K) for _ in range(2)]
    if case.norm:  # positive features, as models feed a normalised linear attention
        qk = [torch.nn.functional.elu(x) + 1 for x in qk]
    q, k = (x.to(DEVICE, dtype) for x in qk)
    v = draw(B, T, H, V).to(DEVICE, dtype)
    h0 = draw(N, H, K, V).to(DEVICE) if case.states else None
    z0 = (torch.rand(N, 1, H, K, generator=gen) * 4).to(DEVICE) if case.states and case.norm else None
    cu = None if lens is None else torch.tensor([0, *lens]).cumsum(0).to(DEVICE)
    scale = K ** -0.5
    init = (h0, z0) if case.norm else h0

    result: dict = {"sizes": dict(B=B, H=H, T=T, K=K, V=V, N=N), "mode": mode}
    t0 = time.perf_counter()
    with _matmul_precision(mode):
        if case.L is None:
            with dispatch.normaliser_on_tensor_cores(bool(case.mma), parts=case.mma or "both"), \
                    dispatch.trying(case.tried):
                result["launch"] = dataclasses.asdict(dispatch.launch_for(q, v, lens))
                o, final = chunk_linear_attn(q, k, v, scale, init, True, case.norm, cu)
            ht, zt = final if case.norm else (final, None)
        else:
            precision = dispatch.launch_for(q, v, lens).precision
            key = (max(64, 1 << (K - 1).bit_length()), precision if dtype == torch.float32 else "16")
            if tiny:
                launch = Launch(32 if case.L else None, 16, 16, 4, 1, precision=precision)
            elif case.L:  # packed sequences: the tables without the states kernels, which take none
                launch = dataclasses.replace((dispatch.PACKED_CHAINED if lens else dispatch.CHAINED)[key], L=case.L)
            else:
                launch = (dispatch.PACKED_ONE_PASS if lens else dispatch.ONE_PASS)[key]
            launch = dataclasses.replace(launch, norm_mma=case.mma)
            if case.tried:  # the case's own segment length (or whole sequences) stays
                change = dispatch.change_of(case.tried, key, case.V, packed=bool(lens))
                launch = dataclasses.replace(launch, **{f: x for f, x in change.items()
                                                        if f != "L" and (f != "BV" or not tiny)})
            result["launch"] = dataclasses.asdict(launch)
            f = fused_forward(q, k, v, scale, h0, z0, True, case.norm, cu, launch=launch)
            o, ht, zt = f.o, f.final_state, f.z_state
        if ON_GPU:
            torch.cuda.synchronize()
    result["kernel_s"] = round(time.perf_counter() - t0, 2)

    d = (lambda x: None if x is None else x.double())
    ro, rfinal = reference_linear_attention(q.double(), k.double(), v.double(), scale,
                                            (d(h0), d(z0)) if case.norm else d(h0), True, case.norm, cu,
                                            chunk_size=256 if not tiny else 16)
    rht, rzt = rfinal if case.norm else (rfinal, None)
    # fp32 at "highest" runs 3xTF32 (error near fp32's), at "high" TF32; bf16 and fp16 their own tolerance
    tol = 2e-5 if mode == "highest" else tolerance(dtype, tf32=mode == "high")
    errors = {"o": rel_error(o, ro), "final_state": rel_error(ht, rht)}
    if case.norm:
        errors["z_state"] = rel_error(zt, rzt)
    want = torch.promote_types(dtype, z0.dtype) if z0 is not None else dtype
    problems = [f"{n}: relative error {e:.2e} > {tol:.1e}" for n, e in errors.items() if not e <= tol]
    if o.dtype != want:
        problems.append(f"o is {o.dtype}, fla-core gives {want}")
    result.update(errors=errors, tol=tol, status="pass" if not problems else "FAIL", problems=problems)
    return result


def _child(name: str, tiny: bool, sanitize: bool) -> int:
    if name == "selftest-abort":  # what a CUDA fault looks like to the parent: no result line, a signal
        print("aborting on purpose", file=sys.stderr, flush=True)
        os.abort()
    case = cases()[name]
    r = run_case(case, tiny=tiny, sanitize=sanitize)
    print(RESULT + json.dumps(r), flush=True)
    return 0


def _sanitizer() -> str | None:
    for path in (shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer"):
        if path and os.path.exists(path):
            return path
    return None


def _spawn(name: str, *, tiny: bool, sanitize: bool, timeout: float) -> dict:
    """Run one case in a child process; its result, or what killed it."""
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--case", name] + (["--tiny"] if tiny else [])
    env = dict(os.environ)
    if sanitize:
        tool = _sanitizer()
        if tool is None:
            return {"status": "SKIPPED", "problems": ["compute-sanitizer not found"]}
        cmd = [tool, "--tool", "memcheck", "--leak-check", "no", "--error-exitcode", "99", *cmd, "--sanitized"]
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        tail = (e.stderr or b"")[-1500:]
        return {"status": "TIMEOUT", "seconds": round(time.perf_counter() - t0, 1),
                "problems": [f"no result in {timeout:.0f} s"],
                "stderr_tail": tail.decode(errors="replace") if isinstance(tail, bytes) else tail}
    lines = [x for x in p.stdout.splitlines() if x.startswith(RESULT)]
    r = json.loads(lines[-1][len(RESULT):]) if lines else {}
    r["seconds"] = round(time.perf_counter() - t0, 1)
    r["returncode"] = p.returncode
    if sanitize:
        # what memcheck decides is the status; the numbers (slowed down, chained waits may run out) are kept aside
        summary = [x for x in (p.stdout + p.stderr).splitlines() if "ERROR SUMMARY" in x]
        r["sanitizer"] = summary[-1].strip("= ") if summary else "no summary"
        r["sanitizer_errors"] = [x for x in (p.stdout + p.stderr).splitlines() if "Invalid" in x][:8]
        r["numeric_status"], r["numeric_problems"] = r.pop("status", None), r.pop("problems", [])
        clean = p.returncode == 0 and "ERROR SUMMARY: 0 errors" in r["sanitizer"]
        r["status"], r["problems"] = ("pass", []) if clean else ("SANITIZER", r["sanitizer_errors"] or [r["sanitizer"]])
    if not lines or p.returncode != 0:
        r["status"] = "SANITIZER" if sanitize and p.returncode == 99 else "CRASH"
        r["stderr_tail"] = (p.stderr[-2000:] or p.stdout[-2000:])
    return r


def run_all(names: list[str], *, out: pathlib.Path, tiny: bool = False, jobs: int = 8, budget: float | None = None,
            sanitize: list[str] = (), timeout: float = 150.0, grace: float = 20.0) -> dict:
    """Every named case in a child process (``jobs`` at a time), the ``sanitize`` ones under memcheck too; the
    JSON at ``out`` rewritten after each; no case starts after ``budget`` seconds, and every child is stopped
    ``grace`` seconds after it."""
    env: dict = {"python": sys.version.split()[0], "tiny": tiny}
    with contextlib.suppress(Exception):
        from kernels.device import machine

        env.update({"gpu": None, **machine()})
    known = cases()
    result = {"env": env, "cases": {}, "sanitized": {}, "not_started": [], "complete": False}
    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)

    def save():
        counts: dict[str, int] = {}
        for r in [*result["cases"].values(), *result["sanitized"].values()]:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        result["summary"] = counts
        out.write_text(json.dumps(result, indent=1) + "\n")

    def one(name: str, sanitized: bool) -> None:
        if budget is not None and time.perf_counter() - t0 > budget:
            result["not_started"].append(("sanitize: " if sanitized else "") + name)
            return
        # no child outlives the run: a case started late gets what is left of the budget and its grace
        left = float("inf") if budget is None else t0 + budget + grace - time.perf_counter()
        r = _spawn(name, tiny=tiny, sanitize=sanitized, timeout=max(5.0, min(timeout * (4 if sanitized else 1), left)))
        if name in known:
            r["case"] = dataclasses.asdict(known[name])
        (result["sanitized"] if sanitized else result["cases"])[name] = r
        errs = ", ".join(f"{k} {v:.1e}" for k, v in r.get("errors", {}).items())
        extra = r.get("sanitizer", "") + " " + " | ".join(r.get("problems", []))
        print(f"[{time.perf_counter() - t0:.0f}s] {'memcheck ' if sanitized else ''}{name}: {r['status']} "
              f"({errs}; {r.get('seconds')} s) {extra}".rstrip(), flush=True)
        save()

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        # the memcheck runs first: they are the slowest, and run beside the plain cases
        futures = [pool.submit(one, n, True) for n in sanitize] + [pool.submit(one, n, False) for n in names]
        for f in futures:
            f.result()
    result["complete"] = not result["not_started"]
    save()
    return result


def families(result: dict) -> str:
    """One line per family (normalize, dtype, K, V, where the normaliser's sums run): how its cases ended."""
    rows: dict[tuple, dict[str, int]] = {}
    for r in result["cases"].values():
        c = r.get("case")
        if not c:
            continue
        mma = {True: "both", False: "", None: ""}.get(c.get("mma"), c.get("mma"))
        mma = (r.get("launch") or {}).get("norm_mma", mma) if c["norm"] else ""  # what the launch ran
        fam = ("norm" if c["norm"] else "raw", c["dtype"], f"K{c['K']}V{c['V']}",
               ("tensor cores" + ("" if mma == "both" else f" ({mma})")) if mma else "CUDA cores" if c["norm"]
               else "", f"try {c['tried']}" if c.get("tried") else "")
        counts = rows.setdefault(fam, {})
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    lines = ["family (normaliser's sums on): cases by status"]
    for fam, counts in sorted(rows.items()):
        lines.append(f"  {' '.join(x for x in fam if x)}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", help="run this one case here and print its result (what each child runs)")
    ap.add_argument("--sanitized", action="store_true", help=argparse.SUPPRESS)  # sizes of a memcheck run
    ap.add_argument("--tiny", action="store_true", help="interpreter sizes (the CPU path)")
    ap.add_argument("--only", nargs="*", help="cases whose name contains one of these")
    ap.add_argument("--jobs", type=int, default=8, help="cases at a time")
    ap.add_argument("--budget", type=float, help="seconds after which no case starts")
    ap.add_argument("--sanitize", type=int, default=0, help="how many small cases to run under memcheck too")
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds a case may take (memcheck: 4x)")
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "results/gpu/la-check.json")
    ap.add_argument("--list", action="store_true", help="print the case names and stop")
    args = ap.parse_args(argv)
    if args.case:
        return _child(args.case, args.tiny, args.sanitized)
    names = [n for n in cases() if not args.only or any(s in n for s in args.only)]
    if args.list:
        print("\n".join(names))
        return 0
    r = run_all(names, out=args.out, tiny=args.tiny, jobs=args.jobs, budget=args.budget,
                sanitize=SANITIZE[:args.sanitize], timeout=args.timeout)
    print(families(r))
    print(f"la-check: {r['summary']}; not started: {len(r['not_started'])}; {args.out}")
    return 0 if set(r["summary"]) <= {"pass", "SKIPPED"} and r["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
