"""The host's time to issue one eager step: ``python -m kernels.linear_attention.bench_host [--calls N] [--out DIR]``.

At B=4 T=4096 H=16 D=128 bf16 a forward + backward step is bound by the Python that issues its three launches,
not by the GPU (``PERF.md``, "4k is bound by the host"). This measures that Python on any machine: the inputs are
meta tensors of the bench shape (sizes and strides, no memory), every Triton launch of the package's kernels is
replaced by a no-op, and the device tests are answered as a GPU would answer them (``INTERPRET`` off, the
validators' device set to the inputs' one, the dispatch's launch planned for an H200's 132 SMs), so the calls take
the path a CUDA input takes. What is timed is everything but Triton's own launcher (about 20 µs a launch on the
H200's host, three a step) and the CUDA allocator (a meta tensor is made by torch's dispatcher, with no memory).

Rows: the forward without gradients (the inference path), the forward of a step (q, k, v require grad), the
whole step (forward, then ``o.backward(do)``) and, for scale, the same step of an ``autograd.Function`` that only
allocates its output and the three gradients (torch's part, which no wrapper can remove); median µs over
``--calls`` calls after warm-up. Then the step split into the entry point (``chunk_linear_attn``'s own work), the
forward wrapper (``fused_forward``), autograd (the Function's forward and backward around the wrappers, and the
engine) and the backward wrapper (``chunked_backward``), each a median of timers around those calls. Prints a
table (``--before``: an earlier JSON beside it) and writes ``linear_attention-host.json`` to ``--out``
(``results/cpu/``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import pathlib
import statistics
import time

import torch

from .. import device as _device
from .. import validate as _validate
from ..device import machine
from . import autograd as _autograd
from . import chunk_linear_attn
from . import chunked_bwd as _bwd
from . import dispatch as _dispatch
from . import fused as _fused
from . import lookback as _lookback

__all__ = ["SHAPE", "SMS", "gpu_path", "measure", "main"]

#: The bench shape of the backward set's 4k row.
SHAPE = dict(B=4, T=4096, H=16, D=128, dtype=torch.bfloat16)
#: The H200's multiprocessors, for the dispatch's plan.
SMS = 132
_KERNELS = ((_fused, "_fused_linear_attention_kernel"), (_bwd, "_chunked_dq_kernel"), (_bwd, "_chunked_dkdv_kernel"))


class _NoLaunch:
    """A kernel whose ``kernel[grid](...)`` launches nothing (it counts the launches)."""

    def __init__(self):
        self.launches = 0

    def __getitem__(self, grid):
        return self._launch

    def _launch(self, *args, **kwargs):
        self.launches += 1


@contextlib.contextmanager
def gpu_path(dev: torch.device):
    """Within the block, the package's kernels launch nothing and inputs on ``dev`` take the GPU's path (the plans
    that the forward and the backward keep per call key are dropped on the way in and out: those made here are
    not a GPU's)."""
    patches = [(m, "INTERPRET", False) for m in (_device, _dispatch, _fused, _bwd, _lookback)]
    patches += [(_validate, "DEVICE", dev), (_dispatch, "_sm_count", functools.cache(lambda index: SMS))]
    patches += [(m, name, _NoLaunch()) for m, name in _KERNELS]
    # the dispatch plans the interpreter's small tiles for inputs that are not CUDA tensors: plan the GPU's
    real_launch_for = _dispatch.launch_for

    def launch_for(q, v, lengths=None):
        if q.device != dev:
            return real_launch_for(q, v, lengths)
        B, T, H, K = q.shape
        N = B if lengths is None else len(lengths)
        return _dispatch.plan(K, v.shape[-1], q.dtype, N, H, [T] if lengths is None else lengths,
                              _dispatch._sm_count(0), packed=lengths is not None)

    patches += [(m, "launch_for", launch_for) for m in (_dispatch, _fused) if hasattr(m, "launch_for")]
    old = [(m, name, getattr(m, name)) for m, name, _ in patches]
    for m, name, value in patches:
        setattr(m, name, value)
    _forget_plans()
    try:
        yield [getattr(m, name) for m, name in _KERNELS]
    finally:
        for m, name, value in old:
            setattr(m, name, value)
        _forget_plans()


def _forget_plans() -> None:
    for m in (_fused, _bwd):
        for name in ("_PLANS", "_PACKED_PLANS"):
            getattr(m, name, {}).clear()


class _Floor(torch.autograd.Function):
    """The least a differentiable op of this signature costs: torch's autograd around allocating o, then dq, dk,
    dv (what any implementation's step allocates), and nothing else."""

    @staticmethod
    def forward(ctx, q, k, v, scale, initial_state, output_final_state, cu_seqlens):
        ctx.save_for_backward(q, k, v, initial_state)
        return torch.empty(v.shape, dtype=q.dtype, device=q.device), None

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, _ = ctx.saved_tensors
        empty = torch.empty
        return (empty(q.shape, dtype=q.dtype, device=q.device), empty(k.shape, dtype=q.dtype, device=q.device),
                empty(v.shape, dtype=q.dtype, device=q.device), None, None, None, None)


def _median_us(fn, calls: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    clock = time.perf_counter_ns
    for _ in range(calls):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times) / 1e3


class _Timed:
    """``module.name`` wrapped in a timer for the block (the nanoseconds of each call in ``times``)."""

    def __init__(self, module, name: str):
        self.module, self.name, self.times = module, name, []

    def __enter__(self):
        fn, times, clock = getattr(self.module, self.name), self.times, time.perf_counter_ns

        def timed(*args, **kwargs):
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                times.append(clock() - t0)

        self.fn = fn
        setattr(self.module, self.name, timed)
        return self

    def __exit__(self, *exc):
        setattr(self.module, self.name, self.fn)


def measure(calls: int = 2000, warmup: int = 300) -> dict:
    """Median host µs of the rows and the step's split, at :data:`SHAPE` on the meta device."""
    B, T, H, D, dtype = (SHAPE[n] for n in ("B", "T", "H", "D", "dtype"))
    dev = torch.device("meta")
    q, k, v, do = (torch.empty(B, T, H, D, dtype=dtype, device=dev) for _ in range(4))
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    scale = D ** -0.5

    def inference():
        return chunk_linear_attn(q, k, v, scale, None, False, normalize=False)

    def forward():
        return chunk_linear_attn(*leaves, scale, None, False, normalize=False)

    def step():
        for x in leaves:
            x.grad = None
        o, _ = chunk_linear_attn(*leaves, scale, None, False, normalize=False)
        o.backward(do)

    def floor():
        for x in leaves:
            x.grad = None
        o, _ = _Floor.apply(*leaves, scale, None, False, None)
        o.backward(do)

    r: dict = {}
    gc.collect()
    gc.disable()
    try:
        with gpu_path(dev) as kernels:
            for name, fn in (("forward_nograd_us", inference), ("forward_us", forward), ("step_us", step),
                             ("floor_step_us", floor)):
                r[name] = _median_us(fn, calls, warmup)
            before = [kn.launches for kn in kernels]
            step()
            r["launches_per_step"] = sum(kn.launches for kn in kernels) - sum(before)
            package = __import__(__package__, fromlist=["linear_attention_with_grad"])
            with (_Timed(package, "linear_attention_with_grad") as entry, _Timed(_autograd, "fused_forward") as fwd,
                  _Timed(_autograd, "chunked_backward") as bwd):
                whole, back = [], []
                clock = time.perf_counter_ns
                for _ in range(warmup + calls):
                    for x in leaves:
                        x.grad = None
                    t0 = clock()
                    o, _ = chunk_linear_attn(*leaves, scale, None, False, normalize=False)
                    t1 = clock()
                    o.backward(do)
                    t2 = clock()
                    whole.append(t1 - t0)
                    back.append(t2 - t1)
            n = warmup
            parts = zip(whole[n:], entry.times[n:], fwd.times[n:], back[n:], bwd.times[n:])
            split = [(w - e, e - f, f, b - c, c) for w, e, f, b, c in parts]
            names = ("entry_point", "autograd_forward", "forward_wrapper", "autograd_backward", "backward_wrapper")
            r["split_us"] = {name: statistics.median(s[i] for s in split) / 1e3 for i, name in enumerate(names)}
    finally:
        gc.enable()
    return r


def format_table(r: dict, before: dict | None = None) -> str:
    rows = [("forward, no grad (inference)", r["forward_nograd_us"], before and before["forward_nograd_us"]),
            ("forward of a step", r["forward_us"], before and before["forward_us"]),
            ("forward + backward step", r["step_us"], before and before["step_us"]),
            ("the floor: an autograd.Function that only allocates", r["floor_step_us"],
             before and before.get("floor_step_us"))]
    rows += [(f"  step: {name.replace('_', ' ')}", us, before and before["split_us"].get(name))
             for name, us in r["split_us"].items()]
    head = "| host µs (median) | " + ("before | now |" if before else "now |")
    lines = [head, "| --- | --- |" + (" --- |" if before else "")]
    for label, us, was in rows:
        old = "" if not before else "- | " if was is None else f"{was:.1f} | "
        lines.append(f"| {label} | {old}{us:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000, help="timed calls a row (after warm-up)")
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("results/cpu"), help="folder for the JSON")
    ap.add_argument("--before", type=pathlib.Path, default=None, help="an earlier JSON to print beside this run")
    args = ap.parse_args(argv)
    r = measure(args.calls, args.warmup)
    shape = {**SHAPE, "dtype": str(SHAPE["dtype"]).removeprefix("torch.")}
    result = {"machine": machine(), "shape": shape, "sms": SMS, "calls": args.calls, "warmup": args.warmup,
              "stubbed": "every Triton launch of the package's kernels (a no-op); inputs on the meta device, "
                         f"the device tests answered as on a GPU with {SMS} SMs", **r}
    before = json.loads(args.before.read_text()) if args.before else None
    print(f"B={shape['B']} T={shape['T']} H={shape['H']} D={shape['D']} {shape['dtype']}, unnormalised; "
          f"{result['stubbed']}; {r['launches_per_step']} launches a step")
    print(format_table(r, before))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "linear_attention-host.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
