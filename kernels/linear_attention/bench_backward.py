"""Forward + backward: ``python -m kernels.bench linear_attention --set backward [--quick]``.

Rows: B=4, H=16, D=128, bf16, unnormalised, T = 4k … 256k, then initial/final states and packed sequences. Each
version runs the forward and the backward of the loss ``Σ o·do + Σ final_state·dht`` and returns dq, dk, dv (and the
initial state's gradient), checked against float64 autograd of the chunked oracle before it is timed (a row too big
for the oracle on this device, 256k anywhere and 64k on an 80 GiB card, is not checked: the rows below it are). The
HBM floor is 11 tensor-volumes at K = V: q, k, v read and o written forward; q, k, v, do read and dq, dk, dv written
backward. Beside the time, the memory of one step (:func:`fwd_bwd`), each as bytes and as a fraction of q, k, v:
what autograd saved for the backward beyond the step's own inputs and outputs (``saved``, on any device); on a GPU
also what stayed allocated between forward and backward (``held``), the backward's peak above its start
(``backward_peak``), and the peak of the whole step less the gradients (the runner's ``scratch_bytes``).
"""

from __future__ import annotations

import importlib
import importlib.util

import torch

from ..bench import Problem, Version
from ..device import DEVICE, ON_GPU
from ..gradcall import kept_on_contexts
from ..testing import tolerance
from . import chunk_linear_attn
from .bench_rows import cu_seqlens, packed, row_params
from .chunked_torch import chunked_forward
from .reference import forward_flops, reference_backward

__all__ = ["problems", "versions", "fwd_bwd"]

#: What the oracle (float64 autograd of the chunked form) holds per token, head and feature: about 19 float64
#: vectors of D at its peak (measured: 75.7 GiB at B=4, T=64k, H=16, D=128, short of the 4 GiB more it asked for
#: on an 80 GiB H100); 24 with a margin.
_ORACLE_BYTES = 24 * 8


def _checkable(B: int, T: int, H: int, D: int) -> bool:
    """Whether the oracle fits this problem in the device's memory (on the CPU: the small rows only)."""
    if not ON_GPU:
        return True
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    return B * T * H * D * _ORACLE_BYTES <= 0.9 * total


def _problem(label, B, T, H, D, dtype=torch.bfloat16, *, lens=None, state=False) -> Problem:
    K = V = D
    B, T, N = packed(B, T, lens)

    def make_inputs(seed: int) -> dict:
        gen = torch.Generator(DEVICE).manual_seed(seed)
        q, k, v, do = (torch.randn(B, T, H, D, generator=gen, device=DEVICE).to(dtype) for _ in range(4))
        states = [torch.randn(N, H, K, V, generator=gen, device=DEVICE) if state else None for _ in range(2)]
        return dict(q=q, k=k, v=v, do=do, scale=K ** -0.5, initial_state=states[0], dht=states[1],
                    cu_seqlens=cu_seqlens(lens))

    def reference(q, k, v, do, scale, initial_state, dht, cu_seqlens):
        return _flat(reference_backward(q, k, v, do, scale, initial_state, dht, cu_seqlens, chunk_size=256))

    size = torch.tensor([], dtype=dtype).element_size()
    nbytes = B * T * H * (6 * K + 5 * V) * size + (4 * N * H * K * V * 4 if state else 0)
    flops = 3 * forward_flops(B, T, H, K, V)
    return Problem(label, make_inputs, reference, nbytes, flops, tolerance(dtype),
                   row_params(B, T, H, K, V, dtype, lens, state), dtype, validate=_checkable(B, T, H, D))


def problems(quick: bool) -> list[Problem]:
    if not ON_GPU:
        return [_problem("T50", 1, 50, 2, 16), _problem("varlen state", 1, 0, 2, 16, lens=[17, 0, 30, 3], state=True)]
    ts = [4096, 16384, 65536] if quick else [4096, 16384, 65536, 262144]
    rows = [_problem(f"T{t // 1024}k", 4, t, 16, 128) for t in ts]
    rows += [_problem("T16k state", 4, 16384, 16, 128, state=True),
             _problem("varlen 64k", 1, 0, 16, 128, lens=[1, 4095, 63, 16384, 8192, 20000, 2048, 14753])]
    return rows


def _flat(grads) -> torch.Tensor:
    return torch.cat([g.flatten().float() for g in grads if g is not None])


def _storage(x: torch.Tensor) -> tuple[int, int]:
    """(address, bytes) of the memory block under ``x`` (a view and its base share one)."""
    st = x.untyped_storage()
    return st.data_ptr(), st.nbytes()


def fwd_bwd(fn):
    """A version timing ``fn``'s forward and backward: ``fn(q, k, v, scale, initial_state, output_final_state,
    cu_seqlens) -> (o, final_state)`` with autograd; returns the gradients of q, k, v and the initial state.
    Its ``extras`` measures the memory of one step: what autograd saved for the backward beyond the step's inputs
    and outputs (``saved_bytes``, on any device, from the tensors handed to ``saved_tensors_hooks`` and those a
    custom Function keeps on its context), and on a GPU
    what stayed allocated between forward and backward beyond the outputs (``held_bytes``) and the peak the
    backward allocated above what it started with (``backward_peak_bytes``, the gradients included); each also as a
    fraction of q, k, v."""
    def run(q, k, v, do, scale, initial_state=None, dht=None, cu_seqlens=None, memory=None):
        leaves = [x.detach().requires_grad_() for x in (q, k, v)]
        h0 = None if initial_state is None else initial_state.detach().requires_grad_()
        gpu = memory is not None and q.is_cuda
        if gpu:
            torch.cuda.synchronize()
        base = torch.cuda.memory_allocated() if gpu else 0
        saved: dict[int, int] = {}

        def pack(x):
            if memory is not None:
                saved.setdefault(*_storage(x))
            return x

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
            o, ht = fn(*leaves, scale, h0, dht is not None, cu_seqlens)
        outs, grads = (o, ht) if dht is not None else (o,), (do, dht) if dht is not None else (do,)
        if memory is not None:
            for x in kept_on_contexts((o, ht)):  # ctx.q = q: saved all the same
                saved.setdefault(*_storage(x))
            # the caller's tensors (inputs) and the step's outputs are not memory the backward costs
            own = dict(_storage(x) for x in (q, k, v, do, initial_state, dht, cu_seqlens, o, ht) if x is not None)
            memory["saved_bytes"] = sum(n for ptr, n in saved.items() if ptr not in own)
            memory["saved_tensors"] = len(saved)
        if gpu:
            torch.cuda.synchronize()
            memory["held_bytes"] = torch.cuda.memory_allocated() - base - sum(
                x.numel() * x.element_size() for x in (o, ht) if x is not None)
            torch.cuda.reset_peak_memory_stats()
            start = torch.cuda.memory_allocated()
        torch.autograd.backward(outs, grads)
        if gpu:
            torch.cuda.synchronize()
            memory["backward_peak_bytes"] = torch.cuda.max_memory_allocated() - start
        return [x.grad for x in leaves] + ([h0.grad] if h0 is not None else [])

    def extras(inputs: dict) -> dict:
        memory: dict = {}
        run(**inputs, memory=memory)
        size = sum(inputs[n].numel() * inputs[n].element_size() for n in ("q", "k", "v"))
        return {**memory, **{n.replace("_bytes", "_fraction"): memory[n] / size for n in
                             ("saved_bytes", "held_bytes", "backward_peak_bytes") if n in memory}}

    return run, extras


def _ours(q, k, v, scale, h0, final, cu):
    return chunk_linear_attn(q, k, v, scale, h0, final, normalize=False, cu_seqlens=cu)


def _fla(q, k, v, scale, h0, final, cu):
    fla = importlib.import_module("fla.ops.linear_attn")
    return fla.chunk_linear_attn(q, k, v, scale, h0, final, normalize=False, cu_seqlens=cu)


def _torch_chunked(q, k, v, scale, h0, final, cu):
    return chunked_forward(q, k, v, scale, h0)


def _short_fixed(p: Problem) -> str | None:
    if p.params["varlen"]:
        return "varlen: a python loop over sequences"
    return "T > 16k: every chunk state and score tile kept for autograd" if p.params["T"] > 16384 else None


def versions() -> list[Version]:
    out = []
    for name, fn, skip in (("torch eager (chunked) fwd+bwd", _torch_chunked, _short_fixed),
                           ("fla chunk fwd+bwd", _fla, None), ("chunk_linear_attn fwd+bwd", _ours, None)):
        if name.startswith("fla") and not (ON_GPU and importlib.util.find_spec("fla") is not None):
            continue
        run, extras = fwd_bwd(fn)
        out.append(Version(name, run, skip=skip or (lambda p: None), output=_flat, extras=extras))
    return out
