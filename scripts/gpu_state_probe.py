"""Where the initial/final-state row's extra time goes: the chunked kernel at B=4 T=16k H=16 D=128 bf16 with and
without an initial state and a final state, with 4 warps (its default at D=128) and with 8 (median ms, CUDA-event
timing), the drop-in on the same calls, and how far 8 warps' output and final state are from 4 warps'.
Writes results/gpu/state-probe.json."""

import json
import pathlib

import torch
import triton.testing

from kernels.linear_attention import chunk_linear_attn
from kernels.linear_attention.chunked import chunked_linear_attention


def _time(fn) -> float:
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def main() -> None:
    B, T, H, D = 4, 16384, 16, 128
    gen = torch.Generator("cuda").manual_seed(0)
    q, k, v = (torch.randn(B, T, H, D, generator=gen, device="cuda").bfloat16() for _ in range(3))
    h0 = torch.randn(B, H, D, D, generator=gen, device="cuda")
    rows = {}
    for name, init, final in (("neither", None, False), ("h0", h0, False), ("ht", None, True), ("both", h0, True)):
        def run(warps, init=init, final=final):
            return chunked_linear_attention(q, k, v, D ** -0.5, init, final, num_warps=warps)

        def api(init=init, final=final):
            return chunk_linear_attn(q, k, v, None, init, final, normalize=False)

        (o4, ht4), (o, ht) = run(4), run(8)
        diff = max((o.float() - o4.float()).abs().max().item(),
                   0.0 if ht is None else ((ht - ht4).abs().max() / ht4.abs().max()).item())
        rows[name] = {"w4_ms": _time(lambda run=run: run(4)), "w8_ms": _time(lambda run=run: run(8)),
                      "chunk_linear_attn_ms": _time(api), "w8_max_diff_vs_w4": diff}
        r = rows[name]
        print(f"{name:8s} 4 warps {r['w4_ms']:.3f} ms  8 warps {r['w8_ms']:.3f} ms  chunk_linear_attn "
              f"{r['chunk_linear_attn_ms']:.3f} ms  8 vs 4 warps max diff {diff:.2e}", flush=True)
    out = pathlib.Path("results/gpu/state-probe.json")
    out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "triton": triton.__version__, "B": B, "T": T,
                               "H": H, "D": D, "dtype": "bfloat16", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
