"""Lesson 00 (setup): a masked vector add on a 1-D grid, and a row-bias add on a 2-D grid with row strides."""

import torch
import triton

from ...device import pick
from ...testing import poisoned, randn
from ..spec import Case, Exercise, register

__all__ = ["VECTOR_ADD", "ADD_BIAS"]


def _vector_inputs(case, gen):
    n = case["n"]
    return {"x": randn(n, gen=gen, dtype=case.dtype, device="cpu"),
            "y": randn(n, gen=gen, dtype=case.dtype, device="cpu"), "n": n}


def _vector_run(args, inputs, outputs, case):
    (kernel,) = args
    block = case["BLOCK_SIZE"]
    kernel[(triton.cdiv(inputs["n"], block),)](inputs["x"], inputs["y"], outputs["out"], inputs["n"],
                                               BLOCK_SIZE=block)


VECTOR_ADD = Exercise(
    id="00_setup.vector_add",
    args=("kernel",),
    signature="add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr), "
              "launched on grid (cdiv(n_elements, BLOCK_SIZE),)",
    description="out[i] = x[i] + y[i] for i < n_elements, added in fp32, stored in out's dtype",
    make_inputs=_vector_inputs,
    outputs=lambda case, inputs: {"out": ((case["n"],), case.dtype)},
    run=_vector_run,
    reference=lambda inputs, case: {"out": inputs["x"] + inputs["y"]},
    visible=[Case("n=1000 BLOCK_SIZE=128 fp32", dict(n=1000, BLOCK_SIZE=128)),
             Case("n=777 BLOCK_SIZE=1024 fp32", dict(n=777, BLOCK_SIZE=1024),
                  purpose="has one program, whose block is mostly past the end"),
             Case("n=1023 BLOCK_SIZE=256 fp32", dict(n=1023, BLOCK_SIZE=256),
                  purpose="leaves the last block one element short (n % BLOCK_SIZE = BLOCK_SIZE - 1), with a block "
                          "size other than 128"),
             Case("n=513 BLOCK_SIZE=64 fp32", dict(n=513, BLOCK_SIZE=64),
                  purpose="has a last block of one element (n % BLOCK_SIZE = 1)")],
    hidden=[Case("n=1 BLOCK_SIZE=16 fp32", dict(n=1, BLOCK_SIZE=16)),
            Case("n=4096 BLOCK_SIZE=512 fp32", dict(n=4096, BLOCK_SIZE=512),
                 purpose="is a whole number of blocks (n % BLOCK_SIZE = 0)"),
            Case("n=4097 BLOCK_SIZE=128 fp16", dict(n=4097, BLOCK_SIZE=128), torch.float16),
            Case("n=3000 BLOCK_SIZE=1024 bf16", dict(n=3000, BLOCK_SIZE=1024), torch.bfloat16),
            Case("n=65537 BLOCK_SIZE=2048 fp32", dict(n=65537, BLOCK_SIZE=2048))]
    + pick(cpu=[], gpu=[Case("n=2**24+3 BLOCK_SIZE=1024 fp32", dict(n=2**24 + 3, BLOCK_SIZE=1024))]),
    points=(2, 2),
    twins=("kernels.vector_add.naive._naive_vector_add_kernel", "kernels.viz.demo._demo_vector_add_kernel"),
)


def _bias_inputs(case, gen):
    M, N, ld = case["M"], case["N"], case["ld"]
    wide = randn(M, ld, gen=gen, dtype=case.dtype, device="cpu")
    return {"x": wide[:, :N], "bias": randn(N, gen=gen, dtype=case.dtype, device="cpu")}


def _bias_run(args, inputs, outputs, case):
    """A case with ``ld_out`` launches on a view of a wider NaN-filled matrix, so that out's row stride is neither N
    nor x's: a kernel must address out through ``stride_om``. The view is then copied to ``out`` (the interpreter's
    bounds check, run first on a GPU too at these sizes, names a store into the gaps between its rows)."""
    (kernel,) = args
    x, bias, out = inputs["x"], inputs["bias"], outputs["out"]
    M, N = x.shape
    block = case["BLOCK_N"]
    ld_out = case.get("ld_out", N)
    target = out if ld_out == N else poisoned(M, ld_out, dtype=out.dtype, device=out.device).out[:, :N]
    kernel[(M, triton.cdiv(N, block))](x, bias, target, M, N, x.stride(0), target.stride(0), BLOCK_N=block)
    if target is not out:
        out.copy_(target)


ADD_BIAS = Exercise(
    id="00_setup.add_bias",
    args=("kernel",),
    signature="add_bias_kernel(x_ptr, bias_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_N: tl.constexpr), "
              "launched on grid (M, cdiv(N, BLOCK_N)); x and out may be views whose row strides exceed N",
    description="out[m, n] = x[m, n] + bias[n], added in fp32, stored in out's dtype",
    make_inputs=_bias_inputs,
    outputs=lambda case, inputs: {"out": ((case["M"], case["N"]), case.dtype)},
    run=_bias_run,
    reference=lambda inputs, case: {"out": inputs["x"] + inputs["bias"][None, :]},
    visible=[Case("M=37 N=300 row stride 320 BLOCK_N=128 fp32", dict(M=37, N=300, ld=320, BLOCK_N=128),
                  purpose="passes x with a row stride (320) larger than N (300), and out with row stride N"),
             Case("M=5 N=511 row stride 600 BLOCK_N=256 fp32", dict(M=5, N=511, ld=600, BLOCK_N=256),
                  purpose="leaves the last block of a row one column short, with a block size other than 128"),
             Case("M=9 N=100 row strides 128 (x) and 112 (out) BLOCK_N=64 fp32",
                  dict(M=9, N=100, ld=128, ld_out=112, BLOCK_N=64),
                  purpose="passes out as a view too, with a row stride (112) larger than N (100) and unlike x's "
                          "(128): address out's rows with stride_om")],
    hidden=[Case("M=1 N=1 row stride 8 BLOCK_N=16 fp32", dict(M=1, N=1, ld=8, BLOCK_N=16)),
            Case("M=19 N=1000 row stride 1024 BLOCK_N=256 fp16", dict(M=19, N=1000, ld=1024, BLOCK_N=256),
                 torch.float16),
            Case("M=5 N=129 row stride 200 BLOCK_N=64 bf16", dict(M=5, N=129, ld=200, BLOCK_N=64), torch.bfloat16),
            Case("M=7 N=33 row strides 40 (x) and 64 (out) BLOCK_N=16 fp16", dict(M=7, N=33, ld=40, ld_out=64,
                                                                                    BLOCK_N=16), torch.float16),
            Case("M=64 N=64 row stride 64 BLOCK_N=32 fp32", dict(M=64, N=64, ld=64, BLOCK_N=32),
                 purpose="is a contiguous x, a whole number of blocks")]
    + pick(cpu=[], gpu=[Case("M=4099 N=5000 row stride 5120 BLOCK_N=1024 fp32",
                             dict(M=4099, N=5000, ld=5120, BLOCK_N=1024))]),
    points=(2, 2),
)

register(VECTOR_ADD, ADD_BIAS)
