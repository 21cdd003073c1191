"""The linear-attention ladder: ``python -m kernels.bench linear_attention [--quick]``.

Rows: B=4, H=16, D=128, bf16, causal, unnormalised, T = 4k … 256k; then one sequence (B=1), fp16, H=32/D=64,
varlen and initial/final state. Versions: eager torch chunked, ``torch.compile`` of it, the fused recurrence,
fla-core's ``chunk_linear_attn`` and ``fused_chunk_linear_attn`` (normalize=False) where fla is installed, every
registered version, and our ``chunk_linear_attn`` itself (whichever version it picks for the row). Each is
checked against a float64 oracle run on the device (chunk by chunk) before it is timed; rows with a state compare
the output and the final state, concatenated.
"""

from __future__ import annotations

import importlib.util

import torch

from ..bench import Problem, Version
from ..device import DEVICE, ON_GPU
from ..testing import tolerance
from . import VERSIONS, chunk_linear_attn
from .bench_rows import cu_seqlens, packed, row_params
from .chunked_torch import chunked_forward, torch_chunked_linear_attention
from .reference import FLOPS_CHUNK, forward_flops, reference_linear_attention

__all__ = ["problems", "versions", "report", "sets", "FLOPS_CHUNK"]


def _problem(label, B, T, H, D, dtype=torch.bfloat16, *, lens=None, state=False) -> Problem:
    """One size; ``lens`` packs sequences of those lengths into a batch of one."""
    K = V = D
    B, T, N = packed(B, T, lens)

    def make_inputs(seed: int) -> dict:
        gen = torch.Generator(DEVICE).manual_seed(seed)  # drawn on the device: 256k tokens are 1.6e9 numbers
        q, k, v = (torch.randn(B, T, H, D, generator=gen, device=DEVICE).to(dtype) for _ in range(3))
        return dict(q=q, k=k, v=v, scale=K ** -0.5, output_final_state=state, cu_seqlens=cu_seqlens(lens),
                    initial_state=torch.randn(N, H, K, V, generator=gen, device=DEVICE) if state else None)

    def reference(q, k, v, scale, initial_state, output_final_state, cu_seqlens):
        h0 = None if initial_state is None else initial_state.double()
        return _flat(reference_linear_attention(q.double(), k.double(), v.double(), scale, h0, output_final_state,
                                                normalize=False, cu_seqlens=cu_seqlens, chunk_size=256))

    size = torch.tensor([], dtype=dtype).element_size()
    nbytes = B * T * H * (2 * K + 2 * V) * size + (2 * N * H * K * V * 4 if state else 0)
    flops = forward_flops(B, T, H, K, V)
    return Problem(label, make_inputs, reference, nbytes, flops, tolerance(dtype),
                   row_params(B, T, H, K, V, dtype, lens, state), dtype)


def problems(quick: bool) -> list[Problem]:
    if not ON_GPU:
        return [_problem("T100", 1, 100, 2, 32), _problem("varlen", 1, 0, 2, 32, lens=[37, 0, 64, 3]),
                _problem("state", 1, 70, 2, 32, torch.float16, state=True)]
    ts = [4096, 16384] if quick else [4096, 16384, 65536, 262144]
    rows = [_problem(f"T{t // 1024}k", 4, t, 16, 128) for t in ts]
    rows += [
        _problem("T64k B1", 1, 65536, 16, 128),  # 16 heads: too few sequences and heads to fill the GPU alone
        _problem("T16k fp16", 4, 16384, 16, 128, torch.float16),
        _problem("T16k H32 D64", 4, 16384, 32, 64),
        _problem("varlen 64k", 1, 0, 16, 128, lens=[1, 4095, 63, 16384, 8192, 20000, 2048, 14753]),
        _problem("T16k state", 4, 16384, 16, 128, state=True),
    ]
    return rows


def _flat(result) -> torch.Tensor:
    """The output, and the final state after it where there is one: what the oracle checks."""
    o, ht = result
    if ht is None:
        return o
    return torch.cat([o.flatten().to(ht.dtype), ht.flatten()])


def _fixed_length(p: Problem) -> str | None:
    return "varlen: a python loop over sequences" if p.params["varlen"] else None


def _short_fixed_length(p: Problem) -> str | None:
    """The recurrence walks T steps one after another: past 16k tokens a call takes too long to time here."""
    return _fixed_length(p) or ("T > 16k: the serial recurrence" if p.params["T"] > 16384 else None)


def _ladder_only(p: Problem) -> str | None:
    """``torch.compile`` runs on the main ladder (one dynamic-shape compile); other rows would each recompile."""
    main = p.params["dtype"] == "bfloat16" and p.params["H"] == 16 and p.params["K"] == 128
    return None if main and not p.params["varlen"] and not p.params["state"] else "compiled for the T ladder only"


def _compiled():
    fwd = torch.compile(chunked_forward, dynamic=True)

    def run(q, k, v, scale, initial_state=None, output_final_state=False, cu_seqlens=None):
        o, ht = fwd(q, k, v, scale, initial_state)
        return o, (ht if output_final_state else None)

    return run


def _recurrent():
    from ..recurrent.fused import fused_recurrent

    def run(q, k, v, scale, initial_state=None, output_final_state=False, cu_seqlens=None):
        return fused_recurrent(q, k, v, scale=scale, initial_state=initial_state,
                               output_final_state=output_final_state)

    return run


def _fla(name: str):
    mod = importlib.import_module("fla.ops.linear_attn")
    fn = getattr(mod, name)

    def run(q, k, v, scale, initial_state=None, output_final_state=False, cu_seqlens=None):
        return fn(q, k, v, scale=scale, initial_state=initial_state, output_final_state=output_final_state,
                  normalize=False, cu_seqlens=cu_seqlens)

    return run


def versions() -> list[Version]:
    out = [Version("torch eager (chunked)", torch_chunked_linear_attention, output=_flat)]
    if ON_GPU:
        out.append(Version("torch.compile", _compiled(), skip=_ladder_only, output=_flat))
    if importlib.util.find_spec("kernels.recurrent.fused") is not None:
        out.append(Version("recurrent (fused)", _recurrent(), skip=_short_fixed_length, output=_flat))
    if ON_GPU and importlib.util.find_spec("fla") is not None:
        out.append(Version("fla chunk", _fla("chunk_linear_attn"), output=_flat))
        out.append(Version("fla fused_chunk", _fla("fused_chunk_linear_attn"), output=_flat))
    out += [Version(name, fn, output=_flat) for name, fn in reversed(VERSIONS.items())]
    out.append(Version("chunk_linear_attn", _public, output=_flat))
    return out


def _public(q, k, v, scale, initial_state=None, output_final_state=False, cu_seqlens=None):
    """The course's entry point as a user calls it: it picks the version for the call (``pick_version``)."""
    return chunk_linear_attn(q, k, v, scale=scale, initial_state=initial_state,
                             output_final_state=output_final_state, normalize=False, cu_seqlens=cu_seqlens)


def sets() -> dict:
    """Problem sets beside this ladder: ``general`` (every path fla serves), ``targets`` (its rows that the
    performance targets name) and ``backward`` (forward + backward); each is ``(problems, versions)``."""
    from . import bench_backward, bench_general

    return {"ladder": (problems, versions), "general": (bench_general.problems, bench_general.versions),
            "targets": (bench_general.targets, bench_general.versions),
            "backward": (bench_backward.problems, bench_backward.versions)}


def warm_key(p) -> tuple:
    """Rows whose first calls compile and autotune the same kernels (fla-core tunes per head sizes and dtypes,
    and again when states or packed sequences join the call), warmed in one process in the run's order."""
    g = p.params.get
    return g("dtype"), g("K"), g("V"), g("varlen"), g("state")


def report(result: dict) -> str:
    """A second table: each version's relative error against float64 and, on a GPU, the memory it holds beyond
    its inputs and outputs during a call (MiB, and as a fraction of the inputs' size); for forward + backward
    also what autograd saves and holds for the backward (``bench_backward.fwd_bwd``)."""
    rows = result["rows"]
    names = list(dict.fromkeys(n for r in rows for n in r["versions"]))
    head = ["problem", "QKVO MiB"] + names
    lines = []
    for r in rows:
        io = r["bytes"] / 2**20
        cells = [r["problem"], f"{io:.0f}"]
        for n in names:
            e = r["versions"].get(n, {})
            err = f"{e['rel_error']:.1e}" if "rel_error" in e else e.get("status", "-")
            mem = ""
            if "scratch_bytes" in e:
                mem = f" +{e['scratch_bytes'] / 2**20:.0f}M ({e['scratch_bytes'] / e['input_bytes']:.3f})"
            if "saved_bytes" in e:
                mem += f" saved {_size(e['saved_bytes'])} ({e['saved_fraction']:.3f})"
            if "held_bytes" in e:
                mem += f" held {_size(e['held_bytes'])} ({e['held_fraction']:.3f})"
            if "backward_peak_bytes" in e:
                mem += f" bwd peak {_size(e['backward_peak_bytes'])} ({e['backward_peak_fraction']:.3f})"
            cells.append(err + mem)
        lines.append(cells)
    widths = [max(len(str(c)) for c in col) for col in zip(head, *lines)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    title = ("relative error vs float64 (+ intermediates in device memory during one call: MiB, and the fraction "
             "of the inputs' size; forward + backward, as fractions of q, k, v: saved: what autograd saved for the "
             "backward beyond the step's inputs and outputs; held: allocated from forward to backward beyond the "
             "outputs; bwd peak: the backward's peak above its start, gradients included)")
    return "\n".join([title, fmt.format(*head)] + [fmt.format(*c) for c in lines] + _normaliser_cost(rows))


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:.0f}M" if abs(nbytes) >= 2**20 else f"{nbytes / 2**10:.1f}K"


def _normaliser_cost(rows: list[dict]) -> list[str]:
    """What normalize=True costs: each normalising row's time over the same row's without it (target ≤ 1.15x),
    for every version timed on both (a normalising-only version over the default's raw time)."""
    def ms(r, name):
        e = r["versions"].get(name, {})
        return e.get("ms") if e.get("status") == "ok" else None

    def same(r):
        return tuple(str(r.get(k)) for k in _SAME)

    raw = {same(r): r for r in rows if r.get("normalize") is False}
    out = []
    for r in rows:
        twin = raw.get(same(r)) if r.get("normalize") else None
        if twin is None:
            continue
        cells = []
        for name in r["versions"]:
            base = ms(twin, name) or ms(twin, "chunk_linear_attn")
            if ms(r, name) and base:
                cells.append(f"{name} {ms(r, name) / base:.2f}x")
        if cells:
            out.append(f"  {r['problem']}: " + ", ".join(cells))
    return ["normalize=True over normalize=False, same row (target ≤ 1.15x):", *out] if out else []


_SAME = ("B", "T", "H", "K", "V", "dtype", "precision", "varlen", "state")
