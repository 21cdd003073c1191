"""Where the initial/final-state row's extra time goes: the chunked kernel at B=4 T=16k H=16 D=128 bf16 with and
without an initial state and a final state (median ms, CUDA-event timing), and the drop-in on the same calls.
Writes results/gpu/state-probe.json."""

import json
import pathlib

import torch
import triton.testing

from kernels.linear_attention import chunk_linear_attn
from kernels.linear_attention.chunked import chunked_linear_attention


def main() -> None:
    B, T, H, D = 4, 16384, 16, 128
    gen = torch.Generator("cuda").manual_seed(0)
    q, k, v = (torch.randn(B, T, H, D, generator=gen, device="cuda").bfloat16() for _ in range(3))
    h0 = torch.randn(B, H, D, D, generator=gen, device="cuda")
    rows = {}
    for name, init, final in (("neither", None, False), ("h0", h0, False), ("ht", None, True), ("both", h0, True),
                              ("both, zero h0", torch.zeros_like(h0), True)):
        def ours(init=init, final=final):
            return chunked_linear_attention(q, k, v, D ** -0.5, init, final)

        def api(init=init, final=final):
            return chunk_linear_attn(q, k, v, None, init, final, normalize=False)

        ms = triton.testing.do_bench(ours, warmup=50, rep=300, return_mode="median")
        api_ms = triton.testing.do_bench(api, warmup=50, rep=300, return_mode="median")
        rows[name] = {"chunked_ms": ms, "chunk_linear_attn_ms": api_ms}
        print(f"{name:14s} chunked {ms:.3f} ms   chunk_linear_attn {api_ms:.3f} ms", flush=True)
    out = pathlib.Path("results/gpu/state-probe.json")
    out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "B": B, "T": T, "H": H, "D": D,
                               "dtype": "bfloat16", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
