"""Bandwidths the lesson-01 views plot: measured on this GPU, or the labelled H200 reference numbers.

``working_set()`` times a kernel that re-reads a buffer of each size many times (loads marked ``.cg``: cached in
L2 only, so a buffer that fits in L2 is served from it and a bigger one streams from HBM). ``strided()`` times
reading every ``s``-th fp32 element: one 32-byte sector per element once ``s >= 8``, so useful bandwidth drops.
Both need a GPU; without one, :func:`reference` gives the numbers measured on the project's H200.
"""

from __future__ import annotations

import datetime
import json
import pathlib

import torch
import triton
import triton.language as tl

from ..device import ON_GPU

__all__ = ["working_set", "strided", "reference", "record_reference", "REFERENCE_FILE"]

#: Numbers measured on the project's H200 by ``scripts/measure_viz_reference.py`` (committed with their date).
REFERENCE_FILE = pathlib.Path(__file__).with_name("reference_h200.json")

# Facts about the H200 that hold without a measurement of the curve (docs: /work/shared/gpu/README.md).
_README_REFERENCE = {
    "label": "reference: NVIDIA H200, measured on the project's GPU (not this machine)",
    "device": "NVIDIA H200",
    "copy_bandwidth": 4.26e12,
    "l2_bytes": 60 * 2**20,
}


@triton.jit
def _reread_kernel(x_ptr, out_ptr, n, REPEAT: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for _ in range(REPEAT):
        for start in range(pid * BLOCK, n, programs * BLOCK):
            offs = start + tl.arange(0, BLOCK)  # [BLOCK]
            acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0, cache_modifier=".cg")
    tl.store(out_ptr + pid, tl.sum(acc))


@triton.jit
def _strided_kernel(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride, mask=mask), mask=mask)


def _need_gpu(what: str):
    if not ON_GPU:
        raise RuntimeError(f"{what} measures a GPU; without one use kernels.viz.measure.reference()")


#: Powers of two from 1 MiB to 2 GiB, and every 8 MiB between 16 and 128 MiB, where L2 sizes and the cliff lie.
DENSE_SIZES = sorted({2**p for p in range(20, 32)} | {m * 2**20 for m in range(16, 129, 8)})


def working_set(sizes: list[int] | None = None, *, target_bytes: int = 2 * 2**30) -> dict:
    """Re-read bandwidth (bytes/s) for each working-set size in bytes (:data:`DENSE_SIZES`), on this GPU."""
    _need_gpu("working_set()")
    from triton.testing import do_bench

    sizes = sizes or DENSE_SIZES
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bw = []
    for size in sizes:
        n = size // 4
        x = torch.randn(n, device="cuda")
        repeat = max(1, min(64, target_bytes // size))
        grid = (min(4 * sms, triton.cdiv(n, 1024)),)
        out = torch.empty(grid[0], device="cuda")
        run = lambda g=grid, x=x, out=out, n=n, r=repeat: _reread_kernel[g](x, out, n, REPEAT=r, BLOCK=1024)
        ms = do_bench(run, return_mode="median")
        bw.append(repeat * n * 4 / (ms * 1e-3))
    return {"bytes": list(sizes), "bandwidth": bw, **_where()}


def strided(strides: list[int] | None = None, *, n: int = 2**24) -> dict:
    """Useful bandwidth (bytes read + written per second) of a gather with element stride ``s``, on this GPU."""
    _need_gpu("strided()")
    from triton.testing import do_bench

    strides = strides or [1, 2, 4, 8, 16, 32]
    x = torch.randn(n * max(strides), device="cuda")
    out = torch.empty(n, device="cuda")
    bw = []
    for s in strides:
        grid = (triton.cdiv(n, 1024),)
        run = lambda g=grid, s=s: _strided_kernel[g](x, out, n, s, BLOCK=1024)
        ms = do_bench(run, return_mode="median")
        bw.append(2 * n * 4 / (ms * 1e-3))
    return {"stride": list(strides), "bandwidth": bw, **_where()}


def _where() -> dict:
    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, "l2_bytes": int(getattr(props, "L2_cache_size", 0)) or None,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "label": f"measured on this GPU ({props.name})"}


def reference() -> dict:
    """The H200 reference numbers: the measured curves when ``reference_h200.json`` exists, else the copy
    bandwidth and L2 size alone. Always labelled as reference numbers, not this machine's."""
    ref = dict(_README_REFERENCE)
    if REFERENCE_FILE.exists():
        ref.update(json.loads(REFERENCE_FILE.read_text()))
        ref["label"] = f"reference: {ref.get('device', 'H200')} measured {ref.get('date', '')[:10]} " \
                       "(not this machine)"
    return ref


def record_reference(path: str | pathlib.Path) -> dict:
    """Measure everything :func:`reference` holds on this GPU and write it to ``path`` as JSON."""
    _need_gpu("record_reference()")
    from ..bench import copy_bandwidth

    ws = working_set(DENSE_SIZES)
    st = strided([1, 2, 4, 8, 16, 32])
    record = {"device": ws["device"], "date": ws["date"], "l2_bytes": ws["l2_bytes"],
              "copy_bandwidth": copy_bandwidth(), "source": "kernels.viz.measure.record_reference",
              "working_set": {"bytes": ws["bytes"], "bandwidth": ws["bandwidth"]},
              "strided": {"stride": st["stride"], "bandwidth": st["bandwidth"]}}
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return record
