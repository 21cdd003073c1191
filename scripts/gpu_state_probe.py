"""Where the initial/final-state row's extra time goes: the chunked kernel at B=4 T=16k H=16 D=128 bf16 with and
without an initial state and a final state, as it is (4 warps, 64 V columns a program), with 8 warps and with 32 V
columns a program (median ms, CUDA-event timing), the drop-in on the same calls, and how far each variant's output
and final state are from the default's. Writes results/gpu/state-probe.json."""

import json
import pathlib

import torch
import triton.testing

from kernels.device import machine
from kernels.linear_attention import chunk_linear_attn
from kernels.linear_attention.chunked import chunked_linear_attention

VARIANTS = {"8 warps": dict(num_warps=8), "BV 32": dict(block_v=32)}


def _time(fn) -> float:
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def main() -> None:
    B, T, H, D = 4, 16384, 16, 128
    gen = torch.Generator("cuda").manual_seed(0)
    q, k, v = (torch.randn(B, T, H, D, generator=gen, device="cuda").bfloat16() for _ in range(3))
    h0 = torch.randn(B, H, D, D, generator=gen, device="cuda")
    rows = {}
    for name, init, final in (("neither", None, False), ("h0", h0, False), ("ht", None, True), ("both", h0, True)):
        def run(init=init, final=final, **override):
            return chunked_linear_attention(q, k, v, D ** -0.5, init, final, **override)

        def api(init=init, final=final):
            return chunk_linear_attn(q, k, v, None, init, final, normalize=False)

        o_ref, ht_ref = run()
        r = rows[name] = {"default_ms": _time(run), "chunk_linear_attn_ms": _time(api)}
        for label, override in VARIANTS.items():
            o, ht = run(**override)
            r[f"{label}_ms"] = _time(lambda override=override, run=run: run(**override))
            r[f"{label}_max_diff"] = max((o.float() - o_ref.float()).abs().max().item(),
                                         0.0 if ht is None else ((ht - ht_ref).abs().max() / ht_ref.abs().max()).item())
        print(f"{name:8s} default {r['default_ms']:.3f} ms  " + "  ".join(
            f"{label} {r[label + '_ms']:.3f} ms (max diff {r[label + '_max_diff']:.1e})" for label in VARIANTS)
            + f"  chunk_linear_attn {r['chunk_linear_attn_ms']:.3f} ms", flush=True)
    out = pathlib.Path("results/gpu/state-probe.json")
    out.write_text(json.dumps({**machine(), "B": B, "T": T, "H": H, "D": D, "dtype": "bfloat16", "rows": rows},
                              indent=1))


if __name__ == "__main__":
    main()
