"""Where forward + backward time goes, at B=4 H=16 D=128 bf16: the fused forward, the dq pass alone, the dk/dv pass
alone, both, the whole autograd step (forward + backward through ``chunk_linear_attn``), fla's forward and fla's
forward + backward, at T = 4k, 16k, 64k (median ms, CUDA-event timing, inputs larger than L2); then the two passes
at other warps and stages, each variant's gradients compared with the default's before it is timed (a variant
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

VARIANTS = {"warps 8": dict(num_warps=8), "stages 1": dict(num_stages=1), "stages 3": dict(num_stages=3)}


def _time(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def _fla():
    if importlib.util.find_spec("fla") is None:
        return None
    from fla.ops.linear_attn import chunk_linear_attn as fla_attn

    return fla_attn


def _row(T: int, B: int, H: int, D: int, fla) -> dict:
    scale = D ** -0.5
    gen = torch.Generator("cuda").manual_seed(T)
    q, k, v, do = (torch.randn(B, T, H, D, generator=gen, device="cuda").bfloat16() for _ in range(4))
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]

    def step(fn=chunk_linear_attn):
        for x in leaves:
            x.grad = None
        o, _ = fn(*leaves, scale, None, False, normalize=False)
        o.backward(do)

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
    ref = bwd()
    for label, kw in VARIANTS.items():
        got = bwd(**kw)
        r[f"{label}_max_diff"] = max(((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
                                     for a, b in zip(got[:3], ref[:3]))
        if r[f"{label}_max_diff"] > 1e-2:
            continue
        for name in ("dq", "dkdv"):
            r[f"{label}_{name}_ms"] = _time(lambda kw=kw, name=name: bwd(passes=(name,), **kw))
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
        print(f"T={T}: " + "  ".join(f"{n} {x:.3f}" for n, x in r.items()), flush=True)
        path.write_text(json.dumps(out, indent=1))
        torch.cuda.empty_cache()
    path.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
