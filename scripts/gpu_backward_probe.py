"""Where forward + backward time goes, at B=4 H=16 D=128 bf16: the fused forward, the dq pass alone, the dk/dv pass
alone, both, the whole autograd step (forward + backward through ``chunk_linear_attn``), fla's forward and fla's
forward + backward, at T = 4k, 16k, 64k (median ms, CUDA-event timing, inputs larger than L2); each again as GPU
time alone (``*_graph_ms``: calls recorded in a CUDA graph and replayed, no host work in the timing), and the host's
time to issue a step or a backward (``*_host_us``): where a step's host time exceeds its GPU time, the timing above
measures the host; then the two passes
at other warps, stages and blocks, each variant's gradients compared with the default's before it is timed (a variant
that differs is reported, not timed). ``--budget`` seconds bound the run; results/gpu/backward-probe.json is
rewritten after every row, so a run cut short keeps what it measured.
"""

import argparse
import importlib.util
import json
import pathlib
import time

import torch
import triton.testing

from kernels.device import machine
from kernels.linear_attention import chunk_linear_attn
from kernels.linear_attention.chunked_bwd import chunked_backward
from kernels.linear_attention.fused import fused_forward

# 8 warps at the default 2 stages take 140 registers in the dk/dv pass, so one program an SM and two waves; capped at
# 128 (no spill there, 366 bytes in the dq pass: scripts/sm90_backward.py) two fit, 16 warps an SM in one wave
# "block 128 warps 8 stages 3": the dk/dv pass with whole heads (one dk and one dv program a head, loads a chunk
# ahead; 6-7% slower than the default as a whole step on the H200); "block 64 warps 4 stages 2" is the default
# spelled out. In the dq pass whole heads leave one program a head, 64 SMs busy: both are meant for the dk/dv pass.
VARIANTS = {"warps 8": dict(num_warps=8), "stages 3": dict(num_stages=3),
            "warps 8 maxnreg 128": dict(num_warps=8, maxnreg=128),
            "block 64 warps 4 stages 2": dict(block=64, num_warps=4, num_stages=2),
            "block 128 warps 8 stages 3": dict(block=128, num_warps=8, num_stages=3)}


def _time(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


_L2 = 60 * 2**20


def _graph_ms(fns: list, calls: int = 24) -> float | None:
    """GPU time alone: median ms per call of ``calls`` calls cycling over ``fns`` (one per input set, the sets
    together larger than twice the L2), recorded as one CUDA graph and replayed, so no host work is timed.
    None where a call cannot be recorded (it waits for the host)."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for f in fns:
                f()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(calls):
                fns[i % len(fns)]()
        graph.replay()
        times = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / calls)
        del graph
        return sorted(times)[2]
    except Exception as e:  # noqa: BLE001 - a call that cannot be recorded is reported, not fatal
        print(f"  (not recorded as a graph: {type(e).__name__}: {str(e)[:120]})", flush=True)
        torch.cuda.synchronize()
        return None


def _host_us(fn, calls: int = 30) -> float:
    """Microseconds of host time to issue one call (the GPU left to run behind): what a step costs when its GPU
    work is shorter than that."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def _fla():
    if importlib.util.find_spec("fla") is None:
        return None
    from fla.ops.linear_attn import chunk_linear_attn as fla_attn

    return fla_attn


def _inputs(B: int, T: int, H: int, D: int, seed: int):
    gen = torch.Generator("cuda").manual_seed(seed)
    q, k, v, do = (torch.randn(B, T, H, D, generator=gen, device="cuda").bfloat16() for _ in range(4))
    return q, k, v, do, [x.detach().requires_grad_() for x in (q, k, v)]


def _step(fn, leaves, do, scale):
    for x in leaves:
        x.grad = None
    o, _ = fn(*leaves, scale, None, False, normalize=False)
    o.backward(do)


def _row(T: int, B: int, H: int, D: int, fla) -> dict:
    scale = D ** -0.5
    q, k, v, do, leaves = _inputs(B, T, H, D, T)

    def step(fn=chunk_linear_attn):
        _step(fn, leaves, do, scale)

    def bwd(**kw):
        return chunked_backward(q, k, v, do, scale, **kw)

    r = {"forward_ms": _time(lambda: fused_forward(q, k, v, scale)),
         "dq_pass_ms": _time(lambda: bwd(passes=("dq",))),
         "dkdv_pass_ms": _time(lambda: bwd(passes=("dkdv",))),
         "backward_ms": _time(bwd),
         "autograd_step_ms": _time(step)}
    if fla is not None:
        r["fla_forward_ms"] = _time(lambda: fla(q, k, v, scale, None, False, normalize=False))
        r["fla_step_ms"] = _time(lambda: step(fla))
    # the same, GPU time alone (CUDA graphs over input sets larger than the L2), and the host's time per call
    size = 4 * q.numel() * q.element_size()
    sets = [(q, k, v, do, leaves)] + [_inputs(B, T, H, D, 1000 + i) for i in range(max(0, -(-2 * _L2 // size) - 1))]
    r["graph_sets"] = len(sets)
    for name, make in (("forward", lambda q, k, v, do, lv: lambda: fused_forward(q, k, v, scale)),
                       ("dq_pass", lambda q, k, v, do, lv: lambda: chunked_backward(q, k, v, do, scale,
                                                                                     passes=("dq",))),
                       ("dkdv_pass", lambda q, k, v, do, lv: lambda: chunked_backward(q, k, v, do, scale,
                                                                                       passes=("dkdv",))),
                       ("backward", lambda q, k, v, do, lv: lambda: chunked_backward(q, k, v, do, scale)),
                       ("autograd_step", lambda q, k, v, do, lv: lambda: _step(chunk_linear_attn, lv, do, scale))):
        r[f"{name}_graph_ms"] = _graph_ms([make(*x) for x in sets])
    r["autograd_step_host_us"] = _host_us(step)
    r["backward_host_us"] = _host_us(bwd)
    if fla is not None:
        r["fla_step_host_us"] = _host_us(lambda: step(fla))
    ref = bwd()
    for label, kw in VARIANTS.items():
        got = bwd(**kw)
        r[f"{label}_max_diff"] = max(((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
                                     for a, b in zip(got[:3], ref[:3]))
        if r[f"{label}_max_diff"] > 1e-2:
            continue
        for name in ("dq", "dkdv"):
            r[f"{label}_{name}_ms"] = _time(lambda kw=kw, name=name: bwd(passes=(name,), **kw))
            r[f"{label}_{name}_graph_ms"] = _graph_ms([
                lambda x=x, kw=kw, name=name: chunked_backward(*x[:4], scale, passes=(name,), **kw) for x in sets])
    if fla is not None:  # last: a call that cannot be recorded leaves nothing else to spoil
        r["fla_step_graph_ms"] = _graph_ms([lambda x=x: _step(fla, x[4], x[3], scale) for x in sets])
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=200.0)
    ap.add_argument("--out", default="results/gpu/backward-probe.json")
    args = ap.parse_args()
    t0 = time.perf_counter()
    B, H, D = 4, 16, 128
    fla = _fla()
    out = {**machine(), "B": B, "H": H, "D": D,
           "dtype": "bfloat16", "rows": {}}
    path = pathlib.Path(args.out)
    for T in (4096, 16384, 65536):
        if time.perf_counter() - t0 > args.budget:
            out["stopped"] = f"budget of {args.budget:.0f} s spent before T={T}"
            break
        r = out["rows"][f"T{T // 1024}k"] = _row(T, B, H, D, fla)
        print(f"T={T}: " + "  ".join(f"{n} {x:.3f}" if isinstance(x, float) else f"{n} {x}" for n, x in r.items()),
              flush=True)
        path.write_text(json.dumps(out, indent=1))
        torch.cuda.empty_cache()
    path.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
