"""The generality problem set: ``python -m kernels.bench linear_attention --set general [--where ...]``.

Every way fla's ``chunk_linear_attn`` is called: normalize on and off, bf16 / fp16 / fp32 (fp32 in both
``torch.get_float32_matmul_precision()`` modes that change the kernel: "highest", 3xTF32, and "high", TF32),
(K, V) in {64, 128, 256}², batches from one sequence with 8 heads to 64 sequences with 16 heads, T from 256 to
256k, packed sequences and initial/final states; problems whose inputs pass 4 GiB are left out. ``--set
targets`` is the short list the performance targets name (PERF.md), ordered so that a run cut short keeps the
most telling rows. Each row is checked against the float64 oracle (output, final state and key sum) before it is
timed, for our ``chunk_linear_attn`` as users call it and fla-core's where installed; the HBM floor counts the
row's own bytes (fp32 inputs at 4 bytes, the states and key sums read and written).
"""

from __future__ import annotations

import importlib.util
import itertools

import torch

from ..bench import Problem, Version, float32_matmul_precision
from ..device import DEVICE, ON_GPU
from ..testing import tolerance
from . import chunk_linear_attn, dispatch
from .bench_rows import cu_seqlens, packed, row_params
from .reference import forward_flops, reference_linear_attention

__all__ = ["problems", "targets", "versions", "problem", "MAX_INPUT_BYTES"]

MAX_INPUT_BYTES = 4 * 2**30
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
#: (B, H, T): one sequence with 8 heads up to 64 sequences with 16.
SHAPES = [(1, 8, 262144), (1, 8, 16384), (1, 16, 65536), (2, 8, 16384), (4, 16, 4096), (4, 16, 16384),
          (4, 16, 65536), (16, 16, 4096), (64, 16, 256), (64, 16, 1024)]
#: Eight packed sequences of 1 to 20,000 tokens (64k in all), the ladder's varlen row.
PACKED = [1, 4095, 63, 16384, 8192, 20000, 2048, 14753]


def _label(norm, dt, K, V, B, H, T, precision=None, lens=None, state=False) -> str:
    t = f"T{T // 1024}k" if T >= 1024 else f"T{T}"
    shape = f"varlen{len(lens)}" if lens else f"B{B}H{H} {t}"
    prec = f"-{precision}" if precision else ""
    return f"{'norm' if norm else 'raw'} {dt}{prec} K{K}V{V} {shape}{' state' if state else ''}"


def problem(norm: bool, dt: str, K: int, V: int, B: int, H: int, T: int, *, precision: str | None = None,
            lens: list[int] | None = None, state: bool = False) -> Problem:
    """One row. ``precision``: the fp32 matmul precision the call runs under; ``lens`` packs sequences."""
    dtype = _DTYPES[dt]
    B, T, N = packed(B, T, lens)

    def make_inputs(seed: int) -> dict:
        gen = torch.Generator(DEVICE).manual_seed(seed)
        qk = [torch.randn(B, T, H, K, generator=gen, device=DEVICE) for _ in range(2)]
        if norm:  # positive features, as models feed a normalised linear attention
            qk = [torch.nn.functional.elu(x) + 1 for x in qk]
        q, k = (x.to(dtype) for x in qk)
        v = torch.randn(B, T, H, V, generator=gen, device=DEVICE).to(dtype)
        initial = None
        if state:
            initial = torch.randn(N, H, K, V, generator=gen, device=DEVICE)
            if norm:
                initial = (initial, torch.rand(N, 1, H, K, generator=gen, device=DEVICE) * 4)
        return dict(q=q, k=k, v=v, scale=K ** -0.5, initial_state=initial, output_final_state=state,
                    normalize=norm, cu_seqlens=cu_seqlens(lens), precision=precision)

    def reference(q, k, v, scale, initial_state, output_final_state, normalize, cu_seqlens, precision):
        init = initial_state
        if isinstance(init, tuple):
            init = tuple(x.double() for x in init)
        elif init is not None:
            init = init.double()
        return _flat(reference_linear_attention(q.double(), k.double(), v.double(), scale, init, output_final_state,
                                                normalize, cu_seqlens, chunk_size=256))

    size = torch.tensor([], dtype=dtype).element_size()
    nbytes = B * T * H * (2 * K + 2 * V) * size
    if state:
        nbytes += 2 * N * H * (K * V + (K if norm else 0)) * 4
    flops = forward_flops(B, T, H, K, V)
    params = row_params(B, T, H, K, V, dtype, lens, state, normalize=norm, precision=precision)
    tol = tolerance(dtype, tf32=dtype == torch.float32)  # fla's fp32 is TF32 whatever the setting
    return Problem(_label(norm, dt, K, V, B, H, T, precision, lens, state), make_inputs, reference, nbytes, flops,
                   tol, params, dtype)


def _fits(p: Problem) -> bool:
    return p.bytes <= MAX_INPUT_BYTES


def problems(quick: bool) -> list[Problem]:
    """The whole grid (on the CPU: a few small rows that cover its kinds)."""
    if not ON_GPU:
        return [problem(True, "bf16", 32, 48, 2, 2, 100), problem(False, "fp32", 48, 16, 1, 2, 70, precision="high"),
                problem(True, "fp16", 16, 16, 0, 2, 0, lens=[37, 0, 64, 3], state=True)]
    rows = []
    shapes = SHAPES[4:6] if quick else SHAPES
    for norm, dt, (K, V), (B, H, T) in itertools.product((True, False), _DTYPES, itertools.product((64, 128, 256),
                                                                                                 repeat=2), shapes):
        for precision in (("highest", "high") if dt == "fp32" else (None,)):
            rows.append(problem(norm, dt, K, V, B, H, T, precision=precision))
    for norm, dt in itertools.product((True, False), _DTYPES):
        precision = "highest" if dt == "fp32" else None
        rows.append(problem(norm, dt, 128, 128, 1, 16, 0, precision=precision, lens=PACKED))
        rows.append(problem(norm, dt, 128, 128, 4, 16, 16384, precision=precision, state=True))
    return [p for p in rows if _fits(p)]


def targets(quick: bool) -> list[Problem]:
    """The rows the targets name, most telling first: the normaliser against no normaliser, fp32 in both modes,
    K != V and D = 256, one sequence of 256k with 8 heads, many short sequences, packed sequences and states."""
    if not ON_GPU:
        return problems(quick)
    rows = [problem(n, "bf16", 128, 128, 4, 16, 16384) for n in (True, False)]
    rows += [problem(True, "fp16", 128, 128, 4, 16, 16384),
             problem(False, "fp32", 128, 128, 4, 16, 16384, precision="high"),
             problem(True, "fp32", 128, 128, 4, 16, 16384, precision="high"),
             problem(False, "fp32", 128, 128, 4, 16, 16384, precision="highest"),
             problem(True, "fp32", 128, 128, 4, 16, 16384, precision="highest"),
             problem(False, "bf16", 128, 64, 4, 16, 16384), problem(True, "bf16", 128, 64, 4, 16, 16384),
             problem(False, "bf16", 64, 128, 4, 16, 16384),
             problem(False, "bf16", 256, 256, 2, 8, 16384), problem(True, "bf16", 256, 256, 2, 8, 16384),
             problem(True, "bf16", 128, 128, 1, 8, 262144), problem(False, "bf16", 128, 128, 1, 8, 262144),
             problem(True, "bf16", 64, 64, 64, 16, 256), problem(True, "bf16", 128, 128, 64, 16, 1024),
             problem(True, "bf16", 128, 128, 1, 16, 0, lens=PACKED),
             problem(True, "bf16", 128, 128, 4, 16, 16384, state=True),
             problem(True, "bf16", 128, 256, 4, 16, 4096)]
    if not quick:
        rows += [problem(n, "bf16", 128, 128, 4, 16, t) for t in (4096, 65536) for n in (True, False)]
        rows += [problem(False, "bf16", 256, 128, 4, 16, 16384), problem(False, "bf16", 128, 256, 4, 16, 16384),
                 problem(False, "bf16", 64, 256, 4, 16, 16384), problem(False, "bf16", 256, 64, 4, 16, 16384),
                 problem(True, "fp32", 128, 128, 1, 8, 262144, precision="high"),
                 problem(True, "fp16", 256, 256, 1, 8, 65536)]
    return rows


def _flat(result) -> torch.Tensor:
    """The output, then the final state and key sum where there are any, concatenated in fp32 or wider."""
    o, final = result
    parts = [o]
    if isinstance(final, tuple):
        parts += [x for x in final if x is not None]
    elif final is not None:
        parts.append(final)
    wide = torch.float64 if any(x.dtype == torch.float64 for x in parts) else torch.float32
    return torch.cat([x.flatten().to(wide) for x in parts])


def _ours(q, k, v, scale, initial_state, output_final_state, normalize, cu_seqlens, precision):
    with float32_matmul_precision(precision):
        return chunk_linear_attn(q, k, v, scale, initial_state, output_final_state, normalize, cu_seqlens)


def _fla(q, k, v, scale, initial_state, output_final_state, normalize, cu_seqlens, precision):
    from fla.ops.linear_attn import chunk_linear_attn as fla_chunk

    return fla_chunk(q, k, v, scale=scale, initial_state=initial_state, output_final_state=output_final_state,
                     normalize=normalize, cu_seqlens=cu_seqlens)


def _ours_mma(*args, **kw):
    # the key sum alone: the product the H200 computed right (its q · z product did not: PERF.md)
    with dispatch.normaliser_on_tensor_cores(parts="ksum"):
        return _ours(*args, **kw)


def _no_normaliser(p: Problem) -> str | None:
    return None if p.params["normalize"] else "no normaliser in this row"


def _trying(name: str):
    """``chunk_linear_attn`` with the dispatch's candidate launch change ``name`` (dispatch.CANDIDATES)."""
    def fn(*args, **kw):
        with dispatch.trying(name):
            return _ours(*args, **kw)

    def skip(p: Problem) -> str | None:
        if name in dispatch.ADOPTED:
            return f"{name} is the default (dispatch.ADOPTED)"
        prm = p.params
        kind = "16" if prm["dtype"] != "float32" else dispatch.PRECISIONS[prm["precision"] or "highest"]
        if not dispatch.applies(name, prm["K"], kind, True, prm["V"]):
            return f"{name} changes nothing in this row"
        if not dispatch.applies(name, prm["K"], kind, prm["normalize"], prm["V"]):
            return "no normaliser in this row"
        return None

    return fn, skip


def versions() -> list[Version]:
    out = [Version("chunk_linear_attn", _ours, output=_flat),
           Version("norm on tensor cores", _ours_mma, skip=_no_normaliser, output=_flat)]
    for name in dispatch.CANDIDATES:
        fn, skip = _trying(name)
        out.append(Version(f"try {name}", fn, skip=skip, output=_flat))
    if ON_GPU and importlib.util.find_spec("fla") is not None:
        out.append(Version("fla chunk", _fla, output=_flat))
    return out
