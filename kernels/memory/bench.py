"""Memory-hierarchy benchmark for ``python -m kernels.bench memory``.

One problem per access pattern and parameter; the ``triton`` column runs this topic's kernel for that pattern,
``torch`` the nearest torch operation where one exists. ``x floor`` is time over ``bytes_moved / copy bandwidth``;
:func:`report` then prints GB/s per version against the measured copy bandwidth: HBM bytes (``bytes_moved``) and
the bytes the pattern uses or requests (``useful_bytes``), and TFLOP/s for the on-chip reuse rows.
"""

import torch

from ..bench import Problem, Version
from ..device import ON_GPU, sizes
from ..testing import randn, tolerance
from . import copy, l2_reread, sram_reuse, strided
from .reference import reference_memory

__all__ = ["problems", "versions", "run_pattern", "report"]

_KERNELS = {
    "copy": lambda x: copy.copy_memory(x),
    "strided": lambda x, stride: strided.strided_memory(x, stride=stride),
    "l2_reread": lambda x, reuse, shift: l2_reread.l2_reread_memory(x, reuse=reuse, shift=shift),
    "sram_reuse": lambda x, reuse: sram_reuse.sram_reuse_memory(x, reuse=reuse),
}

_TORCH = {
    "copy": lambda x: x.clone(),
    "strided": lambda x, stride: x[::stride].clone(),
}


def run_pattern(pattern: str, x: torch.Tensor, **params) -> torch.Tensor:
    """This topic's kernel for ``pattern``."""
    return _KERNELS[pattern](x, **params)


def _problem(pattern: str, n: int, dtype=torch.float32, **params) -> Problem:
    size = dtype.itemsize
    if pattern == "copy":
        moved, used, flop = copy.bytes_moved(n, size), copy.bytes_moved(n, size), 0
    elif pattern == "strided":
        moved = strided.bytes_moved(n, params["stride"], size)
        used, flop = strided.useful_bytes(n, params["stride"], size), 0
    elif pattern == "l2_reread":
        params["shift"] = l2_reread.shift_for(n, params["reuse"], 2048)
        moved = l2_reread.bytes_moved(n, size, reuse=params["reuse"], l2_bytes=l2_reread.l2_bytes())
        used, flop = l2_reread.bytes_read(n, params["reuse"], size), params["reuse"] * n
    else:
        moved, used = sram_reuse.bytes_moved(n, size), sram_reuse.bytes_moved(n, size)
        flop = sram_reuse.flops(n, params["reuse"])

    def make(seed):
        return dict(pattern=pattern, x=randn(n, dtype=dtype, seed=seed), **params)

    label = " ".join([pattern, f"n={n}", str(dtype)[6:]] + [f"{k}={v}" for k, v in params.items() if k != "shift"])
    return Problem(label=label, make_inputs=make, reference=reference_memory, bytes=moved, flops=flop,
                   tol=tolerance(dtype), params=dict(pattern=pattern, n=n, dtype=str(dtype), useful_bytes=used,
                                                     **params), dtype=dtype)


def problems(quick: bool) -> list[Problem]:
    s = sizes("memory")
    n, stride, reuse = s["n"], s["stride"], s["reuse"]
    if not ON_GPU or quick:
        w = n if not ON_GPU else 2**21 + 17
        return [_problem("copy", n), _problem("strided", n, stride=stride), _problem("l2_reread", w, reuse=reuse),
                _problem("sram_reuse", n, reuse=reuse)]
    fits = 2**21 + 17  # 8 MiB of fp32 in, 8 MiB out: resident in the H200's L2
    big = 2**26 + 17  # 256 MiB: five times the L2, small enough to validate in float64 in about a second
    return ([_problem("copy", big), _problem("copy", big, torch.bfloat16)]
            + [_problem("strided", big, stride=s) for s in (2, stride, 32)]
            + [_problem("l2_reread", fits, reuse=r) for r in (1, reuse)]
            + [_problem("l2_reread", big, reuse=reuse)]
            + [_problem("sram_reuse", big, reuse=r) for r in (1, 64, 256)])


def _torch_skip(p: Problem) -> str | None:
    return None if p.params["pattern"] in _TORCH else "no single torch op"


def versions() -> list[Version]:
    return [
        Version("triton", run_pattern),
        Version("torch", lambda pattern, x, **params: _TORCH[pattern](x, **params), skip=_torch_skip),
    ]


def report(result: dict) -> str:
    """GB/s per row and version, as fractions of the measured copy bandwidth."""
    bw = result["copy_bandwidth_Bps"]
    lines = [f"bandwidth against the measured copy, {bw / 1e9:.0f} GB/s (HBM = bytes_moved; used = bytes the "
             "pattern reads and writes, or requests from L2)",
             f"{'problem':>44} {'version':>8} {'HBM GB/s':>9} {'of copy':>8} {'used GB/s':>10} {'of copy':>8} "
             f"{'TFLOP/s':>8}"]
    for row in result["rows"]:
        for name, e in row["versions"].items():
            if e.get("status") != "ok":
                continue
            sec = e["ms"] * 1e-3
            hbm, used = row["bytes"] / sec, row["useful_bytes"] / sec
            lines.append(f"{row['problem']:>44} {name:>8} {hbm / 1e9:9.0f} {hbm / bw:8.2f} {used / 1e9:10.0f} "
                         f"{used / bw:8.2f} {row['flops'] / sec / 1e12:8.2f}")
    return "\n".join(lines)
