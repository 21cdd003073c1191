"""Validate-then-time ladder benchmarks: ``python -m kernels.bench <topic> [--quick] [--out DIR]``.

Each topic package has a ``bench`` module defining ``problems(quick: bool) -> list[Problem]`` and
``versions() -> list[Version]``, and optionally ``sets()``: more named ``(problems, versions)`` pairs, picked with
``--set`` (rows filtered by their parameters with ``--where``, a run bounded with ``--budget``). For every
problem size the runner first measures the two ceilings on this machine (device copy bandwidth; dense matmul
rate for the problem's dtype), then, for each version, checks the
result against the float64 oracle on fresh inputs and only then times it: ``triton.testing.do_bench`` medians
after warm-up, rotating among input sets larger than L2. A wrong result is reported as WRONG and never timed.
It prints a table and writes JSON and a PNG; the JSON is rewritten after every problem (``"complete": false``
until the last), so a run stopped by a time limit keeps what it finished.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import json
import math
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .device import DEVICE, MODE, ON_GPU, machine
from .device import sync as _sync
from .testing import rel_error

__all__ = ["Problem", "Version", "copy_bandwidth", "float32_matmul_precision", "matmul_rate", "time_ms",
           "graph_launch_us", "parse_where", "run", "main"]

_L2_BYTES = 60 * 2**20


@dataclass
class Problem:
    """One size of a topic's problem."""

    label: str
    make_inputs: Callable[[int], dict]  # seed -> keyword arguments for every version
    reference: Callable[..., torch.Tensor]  # float64 oracle, same keyword arguments
    bytes: int  # fewest bytes any version must move through HBM
    flops: int  # arithmetic the algorithm needs
    tol: float  # relative-error tolerance
    params: dict = field(default_factory=dict)
    dtype: torch.dtype = torch.float16  # for the matmul-rate ceiling
    validate: bool = True  # False where the oracle is too big to run (the caller checks a smaller size)


@dataclass
class Version:
    """One rung of the ladder: ``fn(**inputs) -> output``; ``skip(problem)`` returns a reason or None;
    ``extras(inputs)`` measures more of one call (a dict added to the version's row; on the CPU too, so it
    records only what the device it runs on can measure)."""

    name: str
    fn: Callable[..., torch.Tensor]
    skip: Callable[[Problem], str | None] = lambda p: None
    output: Callable[[object], torch.Tensor] = lambda r: r
    extras: Callable[[dict], dict] | None = None


def time_ms(fn: Callable[[], object], *, warmup: int = 25, rep: int = 100) -> float:
    """Median milliseconds of ``fn()`` (CUDA events through ``do_bench`` on a GPU, wall clock otherwise)."""
    if ON_GPU:
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))
    import time

    fn()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[1]


def copy_bandwidth(nbytes: int | None = None) -> float:
    """Measured device-to-device copy bandwidth in bytes/s (bytes read plus bytes written)."""
    nbytes = nbytes or (2 * 2**30 if ON_GPU else 64 * 2**20)
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=DEVICE).normal_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))
    return 2 * nbytes / (ms * 1e-3)


@contextlib.contextmanager
def float32_matmul_precision(precision: str | None):
    """``torch.set_float32_matmul_precision(precision)`` for the block ("high" is TF32, "highest" IEEE fp32), the
    setting before it restored after; None leaves the setting as it is."""
    old = torch.get_float32_matmul_precision()
    if precision:
        torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def matmul_rate(dtype=torch.bfloat16, precision: str | None = None) -> float:
    """Measured dense matmul rate in FLOP/s for ``dtype`` (8192^3 on a GPU, small on the CPU); fp32 at
    ``precision`` (:func:`float32_matmul_precision`) when given, at the current setting otherwise."""
    n = 8192 if ON_GPU else 512
    dt = dtype if ON_GPU else torch.float32
    a = torch.randn(n, n, device=DEVICE).to(dt)
    b = torch.randn(n, n, device=DEVICE).to(dt)
    with float32_matmul_precision(precision):
        ms = time_ms(lambda: a @ b)
    return 2 * n**3 / (ms * 1e-3)


def _rate_key(p: Problem) -> tuple[torch.dtype, str | None]:
    """The matmul rate a row's FLOP floor takes: its dtype's, and for fp32 at the precision the row runs under
    (its ``precision`` parameter, if it has one): a TF32 row's floor is TF32's, not IEEE fp32's."""
    precision = p.params.get("precision") if p.dtype == torch.float32 else None
    return p.dtype, precision


def graph_launch_us(fn: Callable[[], object], launches: int = 200) -> dict:
    """Microseconds per launch of ``launches`` calls of ``fn``, issued one by one and replayed as one CUDA graph
    (GPU only). Issued one by one, each call pays its Python and driver launch cost, hidden only while the GPU is
    still busy with earlier work; the graph is recorded once and replayed with one call."""
    if not ON_GPU:
        raise RuntimeError("graph_launch_us needs a GPU: CUDA graphs record launches on a CUDA stream")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (and compile) outside the capture, as capture requires
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()

    def eager():
        for _ in range(launches):
            fn()

    eager_ms, graph_ms = time_ms(eager, warmup=5, rep=50), time_ms(graph.replay, warmup=5, rep=50)
    return {"launches": launches, "eager_us": eager_ms * 1e3 / launches, "graph_us": graph_ms * 1e3 / launches}


def _tensor_bytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (tuple, list)):
        return sum(_tensor_bytes(y) for y in x)
    if isinstance(x, dict):
        return sum(_tensor_bytes(y) for y in x.values())
    return 0


def _rotating(version: Version, problem: Problem, first: dict) -> Callable[[], object]:
    """A closure cycling through input sets whose total size exceeds twice the L2 (GPU only)."""
    size = _tensor_bytes(first)
    sets = [first]
    if ON_GPU and size < 2 * _L2_BYTES:
        n = min(8, math.ceil(2 * _L2_BYTES / max(size, 1)))
        sets += [problem.make_inputs(1000 + i) for i in range(n - 1)]
    cyc = itertools.cycle(sets)
    return lambda: version.fn(**next(cyc))


def _memory(version: Version, inputs: dict) -> dict:
    """Device memory of one call after a first one (autotuning and caches settled): the peak above what was
    allocated before it (``extra_peak_bytes``), and that peak less the tensors it returns (``scratch_bytes``:
    the intermediates it kept in HBM), beside the inputs' size (``input_bytes``)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = version.fn(**inputs)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    returned = _tensor_bytes(out)
    del out
    return {"extra_peak_bytes": peak, "scratch_bytes": max(0, peak - returned), "input_bytes": _tensor_bytes(inputs)}


def parse_where(text: str | None) -> dict[str, set[str]]:
    """``"dtype=float32,K=64|128"`` -> ``{"dtype": {"float32"}, "K": {"64", "128"}}``: a row is kept when every
    named parameter's value, written as text, is one of those listed."""
    where: dict[str, set[str]] = {}
    for part in filter(None, (text or "").split(",")):
        key, sep, values = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--where wants key=value[|value...], comma-separated; got {part!r}")
        where[key.strip()] = {v.strip() for v in values.split("|")}
    return where


def _selected(p: Problem, where: dict[str, set[str]]) -> bool:
    for key, values in where.items():
        if key not in p.params:
            raise ValueError(f"--where names {key!r}, which is not a parameter of these problems "
                             f"({', '.join(p.params)})")
        if str(p.params[key]) not in values:
            return False
    return True


def _warm(topic: str, problem_set: str, quick: bool, problems: list[Problem], names: list[str], key, jobs: int,
          seconds: float | None) -> dict:
    """Call every version once on every problem, in child processes (``jobs`` at a time), one per group of
    problems with the same ``key(problem)`` (rows whose first calls compile or autotune the same kernels, in the
    run's order): the compile caches on disk are then warm, and the timed run compiles nothing (an autotuner
    still tunes in it, on a quiet GPU, from cached binaries). Children still running after ``seconds`` are
    stopped. Returns each group's labels, exit status and seconds."""
    groups: dict = {}
    for p in problems:
        groups.setdefault(key(p), []).append(p.label)
    pending, running, done = list(groups.values()), [], []
    t0 = time.perf_counter()
    while pending or running:
        while pending and len(running) < jobs:
            labels = pending.pop(0)
            cmd = [sys.executable, "-m", "kernels.bench", topic, "--set", problem_set, "--rows", ",".join(labels),
                   "--warm-only", *(["--quick"] if quick else []), "--only", *names]
            running.append((labels, time.perf_counter(), subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                                                          stderr=subprocess.DEVNULL)))
        time.sleep(0.2)
        for item in list(running):
            labels, start, proc = item
            late = seconds is not None and time.perf_counter() - t0 > seconds
            if proc.poll() is None and not late:
                continue
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            running.remove(item)
            done.append({"rows": labels, "returncode": proc.returncode,
                         "seconds": round(time.perf_counter() - start, 1)})
    print(f"[warm] {len(done)} groups in {time.perf_counter() - t0:.0f} s, {jobs} at a time", file=sys.stderr,
          flush=True)
    return {"groups": done, "seconds": round(time.perf_counter() - t0, 1)}


def _warm_only(problems: list[Problem], versions: list[Version]) -> dict:
    for p in problems:
        inputs = p.make_inputs(0)
        for v in versions:
            if v.skip(p):
                continue
            try:
                v.fn(**inputs)
                _sync()
            except Exception as e:  # the timed run reports it
                print(f"[warm] {p.label} / {v.name}: {type(e).__name__}: {e}"[:300], file=sys.stderr)
    return {}


def run(topic: str, *, quick: bool = False, out: pathlib.Path | None = None, only: list[str] | None = None,
        extra: list[Version] | None = None, labels: list[str] | None = None, problem_set: str = "ladder",
        where: dict[str, set[str]] | None = None, budget: float | None = None, warm: int = 0,
        warm_only: bool = False, resume: pathlib.Path | None = None) -> dict:
    """Benchmark one topic; return (and write) the results. ``extra``: more versions (a lesson's own kernel);
    ``labels``: only the problems with these labels; ``problem_set``: one of the topic's ``sets()``; ``where``:
    only problems whose parameters match (:func:`parse_where`); ``budget``: seconds after which no new problem
    is started (the rows done are kept, the run is marked incomplete). ``warm``: first call every version on
    every problem in that many child processes at a time (:func:`_warm`, grouped by the topic's ``warm_key``;
    at most half the budget); ``warm_only``: only call them, nothing checked, timed or written. ``resume``: an
    earlier run's JSON of the same set on the same GPU model: its rows that hold every version asked are kept and
    not run again, the others run, and the results written hold both (a grid too long for one run, in slices)."""
    mod = importlib.import_module(f"kernels.{topic}.bench")
    sets = mod.sets() if hasattr(mod, "sets") else {"ladder": (mod.problems, mod.versions)}
    if problem_set not in sets:
        raise ValueError(f"{topic} has no problem set {problem_set!r} (sets: {', '.join(sets)})")
    make_problems, make_versions = sets[problem_set]
    problems: list[Problem] = [p for p in make_problems(quick) if (not labels or p.label in labels)
                               and _selected(p, where or {})]
    versions: list[Version] = [v for v in [*make_versions(), *(extra or [])] if not only or v.name in only]
    kept, slices = _resumed(resume, topic, problem_set, [v.name for v in versions]) if resume else ([], [])
    done = {r["problem"] for r in kept}
    problems = [p for p in problems if p.label not in done]
    if resume is not None:
        print(f"resuming {resume}: {len(kept)} rows kept, {len(problems)} to run", flush=True)
    if warm_only:
        return _warm_only(problems, versions)
    t0 = time.perf_counter()
    warmed = None
    if warm > 0 and problems and not extra:
        warmed = _warm(topic, problem_set, quick, problems, [v.name for v in versions],
                       getattr(mod, "warm_key", lambda p: p.label), warm, None if budget is None else budget / 2)
    bw = copy_bandwidth()
    rates: dict[tuple[torch.dtype, str | None], float] = {}
    rows = list(kept)
    out = out or pathlib.Path("bench-results")
    out.mkdir(parents=True, exist_ok=True)
    stem = out / (f"{topic}-{MODE}" if problem_set == "ladder" else f"{topic}-{problem_set}-{MODE}")
    result = {"topic": topic, "set": problem_set, "env": machine(), "copy_bandwidth_Bps": bw, "matmul_rate_flops": {},
              "rows": rows, "complete": False, **({"warm": warmed} if warmed else {})}
    if resume is not None:  # which run measured which rows
        result["slices"] = [*slices, {"date": result["env"].get("date"), "rows": []}]
    for p in problems:
        if budget is not None and time.perf_counter() - t0 > budget:
            result["stopped"] = (f"budget of {budget:.0f} s spent; {len(problems) + len(kept) - len(rows)} problems "
                                 "not started")
            print(result["stopped"], flush=True)
            break
        rate = _rate_key(p)
        if rate not in rates:
            rates[rate] = matmul_rate(*rate)
        floor_hbm = p.bytes / bw * 1e3
        floor_flop = p.flops / rates[rate] * 1e3
        row = {"problem": p.label, **p.params, "bytes": p.bytes, "flops": p.flops,
               "hbm_floor_ms": floor_hbm, "flop_floor_ms": floor_flop, "versions": {}}
        inputs = p.make_inputs(0)
        ref = p.reference(**inputs) if p.validate else None
        for v in versions:
            reason = v.skip(p)
            if reason:
                row["versions"][v.name] = {"status": "skipped", "reason": reason}
                continue
            entry: dict = {}
            try:
                got = v.fn(**inputs)
                _sync()
                if ref is not None:  # a row too big to check is run once, its outputs not gathered for a comparison
                    err = rel_error(v.output(got), ref)
                    entry["rel_error"] = err
                    if not err <= p.tol:
                        row["versions"][v.name] = {"status": "WRONG", **entry}
                        continue
                del got
                if ON_GPU:
                    entry.update(_memory(v, inputs))
                if v.extras is not None:
                    entry.update(v.extras(inputs))
                # 200 ms of the call itself before timing: the first row of a fresh process read 2x the same
                # row timed later (T=4k forward + backward, both fla's and ours), where 25 ms of warm-up followed
                # a minute of compiling with the GPU idle
                ms = time_ms(_rotating(v, p, inputs), warmup=200)
                entry.update(status="ok", ms=ms, x_floor=ms / max(floor_hbm, floor_flop),
                             gbps=p.bytes / (ms * 1e-3) / 1e9)
            except torch.cuda.OutOfMemoryError as e:  # what it asked for and what the device held say why
                entry = {"status": "skipped", "reason": "out of memory",
                         "detail": " ".join(str(e).split())[:400],
                         "allocated_gib": round(torch.cuda.memory_allocated() / 2**30, 2)}
            except Exception as e:  # one failing version must not cost the rest of the run
                entry = {"status": "ERROR", "reason": f"{type(e).__name__}: {e}"[:500]}
                print(f"{p.label} / {v.name}: {entry['reason']}", flush=True)
            row["versions"][v.name] = entry
            _sync()
            shown = f"{entry['ms']:.3f} ms" if entry.get("status") == "ok" else entry.get("reason", "")
            print(f"[{time.perf_counter() - t0:.0f}s] {p.label} / {v.name}: {entry.get('status')} {shown}",
                  flush=True)
        rows.append(row)
        if resume is not None:
            result["slices"][-1]["rows"].append(p.label)
        del inputs, ref
        if ON_GPU:
            torch.cuda.empty_cache()
        # after every problem, so a run cut off by a time limit still leaves the rows it finished
        result["matmul_rate_flops"] = {str(dt) + (f" {prec}" if prec else ""): v for (dt, prec), v in rates.items()}
        stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    result["complete"] = "stopped" not in result
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    _plot(result, stem.with_suffix(".png"))
    print(format_table(result))
    if hasattr(mod, "report"):
        print(mod.report(result))
    return result


def _resumed(path: pathlib.Path, topic: str, problem_set: str, names: list[str]) -> tuple[list[dict], list[dict]]:
    """The rows of an earlier run (``path``, its JSON) to keep, those that hold every version in ``names``, and
    its slices (the date of each run and the rows it measured). The run must be of the same topic and set, on the
    same GPU model (or both in the interpreter); a missing file keeps nothing (the first slice)."""
    if not path.exists():
        return [], []
    old = json.loads(path.read_text())
    if (old.get("topic"), old.get("set")) != (topic, problem_set):
        raise ValueError(f"{path} holds {old.get('topic')}/{old.get('set')}, not {topic}/{problem_set}")
    env = machine()
    then, now = old["env"].get("gpu", old["env"].get("mode")), env.get("gpu", env["mode"])
    if then != now:
        raise ValueError(f"{path} was measured on {then}, this run is on {now}: timings of two machines do not "
                         "belong in one table")
    kept = [r for r in old["rows"] if all(n in r["versions"] for n in names)]
    labels = {r["problem"] for r in kept}
    slices = old.get("slices") or [{"date": old["env"].get("date"), "rows": [r["problem"] for r in old["rows"]]}]
    slices = [dict(sl, rows=[x for x in sl["rows"] if x in labels]) for sl in slices]
    return kept, [sl for sl in slices if sl["rows"]]


def format_table(result: dict) -> str:
    """A fixed-width table: one row per problem, one column per version (ms, or why not)."""
    rows = result["rows"]
    names = list(dict.fromkeys(n for r in rows for n in r["versions"]))
    head = ["problem", "HBM floor", "FLOP floor"] + names
    lines = []
    for r in rows:
        cells = [r["problem"], f"{r['hbm_floor_ms']:.3f}", f"{r['flop_floor_ms']:.3f}"]
        for n in names:
            e = r["versions"].get(n, {"status": "-"})
            if e["status"] == "ok":
                cells.append(f"{e['ms']:.3f} ({e['x_floor']:.1f}x)")
            else:
                cells.append(e["status"])
        lines.append(cells)
    widths = [max(len(str(c)) for c in col) for col in zip(head, *lines)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    bw = result["copy_bandwidth_Bps"] / 1e12
    title = (f"{result['topic']} — median ms (x the larger floor); {result['env']['where']}; "
             f"copy {bw:.2f} TB/s")
    return "\n".join([title, fmt.format(*head)] + [fmt.format(*c) for c in lines])


def _plot(result: dict, path: pathlib.Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = result["rows"]
    labels = [r["problem"] for r in rows]
    fig = Figure(figsize=(7, 4))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    names = list(dict.fromkeys(n for r in rows for n in r["versions"]))
    for n in names:
        ys = [r["versions"].get(n, {}).get("ms", float("nan")) for r in rows]
        ax.plot(labels, ys, marker="o", label=n)
    ax.plot(labels, [max(r["hbm_floor_ms"], r["flop_floor_ms"]) for r in rows], "k--", label="floor")
    ax.set_yscale("log")
    ax.set_ylabel("median ms")
    ax.set_title(f"{result['topic']} ({result['env']['mode']})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernels.bench", description=__doc__.splitlines()[0])
    ap.add_argument("topic", help="memory, recurrent, matmul or linear_attention")
    ap.add_argument("--quick", action="store_true", help="fewer, smaller sizes")
    ap.add_argument("--only", nargs="*", help="version names to run")
    ap.add_argument("--rows", help="problem labels to run, comma-separated (default: every row)")
    ap.add_argument("--set", default="ladder", help="the topic's problem set (linear_attention: ladder, general, "
                                                    "targets)")
    ap.add_argument("--where", help="only problems whose parameters match, e.g. 'dtype=float32,K=64|128'")
    ap.add_argument("--budget", type=float, help="seconds after which no new problem starts (the warm-up included)")
    ap.add_argument("--warm", type=int, default=0, metavar="JOBS",
                    help="first call every version on every problem in JOBS child processes at a time (compile "
                         "and autotune caches on disk warm before anything is timed)")
    ap.add_argument("--warm-only", action="store_true", help=argparse.SUPPRESS)  # what each warming child runs
    ap.add_argument("--out", type=pathlib.Path, default=None, help="folder for JSON and PNG (bench-results/)")
    ap.add_argument("--resume", type=pathlib.Path, default=None, metavar="JSON",
                    help="an earlier run's JSON (same set, same GPU model): keep its rows that hold every version "
                         "asked, run the rest, write both")
    args = ap.parse_args(argv)
    run(args.topic, quick=args.quick, out=args.out, only=args.only, labels=args.rows.split(",") if args.rows else None,
        problem_set=args.set, where=parse_where(args.where), budget=args.budget, warm=args.warm,
        warm_only=args.warm_only, resume=args.resume)
    return 0


if __name__ == "__main__":
    sys.exit(main())
