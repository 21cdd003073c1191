"""One row of the targets set, called a few times, for a profiler to attach to; or (``--time``) its time a call
back to back and the host's time of one call, as one JSON line (GPU only):

    ncu --clock-control none -k regex:_fused -s 2 -c 1 --section SpeedOfLight python3 scripts/profile_row.py packed
    python3 scripts/profile_row.py packed --time

rows: ``packed`` (eight packed sequences, 64k tokens, bf16 K=V=128 H=16, normalising: the targets set's
``norm bf16 K128V128 varlen8``), ``dense`` (the same tokens as B4H16 T=16k), ``long`` (B1H8 T=256k),
``fp32-d256`` (fp32 K=V=256 B4H16 T=4k under torch's "high" precision, TF32: the states kernels); ``raw`` for
``normalize=False``. ``--kernels`` prints the ncu filter and count of the kernels one call of the row launches
(``regex:_fused_linear 1``, or ``regex:_states 2``), which ``scripts/gpu_batch.sh profile`` reads. The
back-to-back time of a packed call holds the host's work after it reads its offsets (which waits for the GPU):
PERF.md, "The packed row's missing 0.18 ms"."""
from __future__ import annotations

import json
import statistics
import sys
import time

import torch

from kernels.linear_attention import chunk_linear_attn
from kernels.linear_attention.bench_general import PACKED

# row -> (B, T, H, D, dtype)
ROWS = {"packed": (1, sum(PACKED), 16, 128, torch.bfloat16), "dense": (4, 16384, 16, 128, torch.bfloat16),
        "long": (1, 262144, 8, 128, torch.bfloat16), "fp32-d256": (4, 4096, 16, 256, torch.float32)}
#: the kernels one call of a row launches, as ncu's filter and count: the fused kernel, or the states launch's two
KERNELS = {"fp32-d256": ("regex:_states", 2)}


def inputs(row: str):
    B, T, H, D, dtype = ROWS[row]
    gen = torch.Generator("cuda").manual_seed(0)
    q, k = (torch.nn.functional.elu(torch.randn(B, T, H, D, generator=gen, device="cuda")) + 1 for _ in range(2))
    v = torch.randn(B, T, H, D, generator=gen, device="cuda")
    cu = None
    if row == "packed":
        cu = torch.tensor([0, *torch.tensor(PACKED).cumsum(0).tolist()], device="cuda")
    return q.to(dtype), k.to(dtype), v.to(dtype), cu


def timing(call, *, groups: int = 7, calls: int = 20) -> dict:
    """Medians: ms a call over ``groups`` runs of ``calls`` back to back (events), and µs of host time a call
    started with the GPU idle."""
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    per = []
    for _ in range(groups):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            call()
        end.record()
        torch.cuda.synchronize()
        per.append(start.elapsed_time(end) / calls)
    host = []
    for _ in range(21):
        torch.cuda.synchronize()
        t = time.perf_counter()
        call()
        host.append(time.perf_counter() - t)
    torch.cuda.synchronize()
    return {"ms_back_to_back": round(statistics.median(per), 4), "host_us": round(statistics.median(host) * 1e6, 1)}


def main(argv: list[str]) -> None:
    row = next((a for a in argv if a in ROWS), "packed")
    if "--kernels" in argv:
        print(*KERNELS.get(row, ("regex:_fused_linear", 1)))
        return
    normalize = "raw" not in argv
    if ROWS[row][4] == torch.float32:
        torch.set_float32_matmul_precision("high")
    q, k, v, cu = inputs(row)

    def call():
        return chunk_linear_attn(q, k, v, normalize=normalize, cu_seqlens=cu)

    if "--time" in argv:
        print(json.dumps({"row": row, "normalize": normalize, "gpu": torch.cuda.get_device_name(0), **timing(call)}))
        return
    for _ in range(3):
        call()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1:])
