"""One row of the targets set, called a few times, for a profiler to attach to (GPU only):

    ncu --clock-control none --set full -k regex:_fused -c 1 python3 scripts/profile_row.py packed

rows: ``packed`` (eight packed sequences, 64k tokens, bf16 K=V=128 H=16, normalising: the targets set's
``norm bf16 K128V128 varlen8``), ``dense`` (the same tokens as B4H16 T=16k), ``long`` (B1H8 T=256k)."""
from __future__ import annotations

import sys

import torch

from kernels.linear_attention import chunk_linear_attn
from kernels.linear_attention.bench_general import PACKED


def inputs(row: str, normalize: bool = True):
    B, T, H = {"packed": (1, sum(PACKED), 16), "dense": (4, 16384, 16), "long": (1, 262144, 8)}[row]
    gen = torch.Generator("cuda").manual_seed(0)
    q, k = (torch.nn.functional.elu(torch.randn(B, T, H, 128, generator=gen, device="cuda")) + 1 for _ in range(2))
    v = torch.randn(B, T, H, 128, generator=gen, device="cuda")
    cu = None
    if row == "packed":
        cu = torch.tensor([0, *torch.tensor(PACKED).cumsum(0).tolist()], device="cuda")
    return q.bfloat16(), k.bfloat16(), v.bfloat16(), cu


def main(argv: list[str]) -> None:
    row = argv[0] if argv else "packed"
    normalize = "raw" not in argv
    q, k, v, cu = inputs(row, normalize)
    for _ in range(3):
        chunk_linear_attn(q, k, v, normalize=normalize, cu_seqlens=cu)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1:])
