"""A small exercise for the engine's edge tests: copy ``n`` elements of a possibly strided ``x``
(``tests/checks/test_engine_edges.py``; a module of its own, so that a check's sm_90 compile, which runs in a
subprocess, finds it by the exercise id)."""

import triton

from kernels.checks.spec import Case, Exercise, register
from kernels.testing import randn


def _inputs(case, gen):
    n = case["n"]
    x = randn(n * case.get("stride", 1), gen=gen, dtype=case.dtype, device="cpu")
    return {"x": x[:: case.get("stride", 1)], "n": n}


def _run(args, inputs, outputs, case):
    (kernel,) = args
    x = inputs["x"]
    kernel[(triton.cdiv(inputs["n"], 64),)](x, outputs["out"], inputs["n"], x.stride(0), BLOCK=64)


COPY = Exercise(
    id="99_edges.copy", args=("kernel",), signature="copy(x_ptr, out_ptr, n, stride, BLOCK)",
    make_inputs=_inputs, outputs=lambda case, inputs: {"out": ((case["n"],), case.dtype)}, run=_run,
    reference=lambda inputs, case: {"out": inputs["x"]},
    visible=[Case("n=100", dict(n=100), purpose="is not a multiple of the block")],
    hidden=[Case("n=100 stride 3", dict(n=100, stride=3))],
    traffic=lambda found, case: None if found.loaded("x") == case["n"] else f"x loaded {found.loaded('x')} times",
)
register(COPY)
