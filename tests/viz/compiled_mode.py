"""Run as a script with TRITON_INTERPRET unset: kernels decorated before the workbook is imported are real
JITFunctions, as on a GPU machine, and the tracer must route them (and their @triton.jit helpers) through the
interpreter, then leave triton.language as it found it."""

import triton
import triton.language as tl
from triton.runtime.jit import JITFunction


@triton.jit
def block_start(pid, BLOCK: tl.constexpr):
    return pid * BLOCK


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    nblocks = tl.cdiv(n, BLOCK)
    offs = block_start(tl.program_id(0) % nblocks, BLOCK) + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask), mask=mask)


assert isinstance(scale_kernel, JITFunction), type(scale_kernel)

import torch  # noqa: E402

from kernels.viz import trace  # noqa: E402

# importing the workbook without a GPU rewraps Triton's own jit helpers for the interpreter; the learner's stay
assert isinstance(scale_kernel, JITFunction) and isinstance(block_start, JITFunction)
original = {name: getattr(tl, name) for name in ("load", "store", "arange", "program_id", "cdiv")}

x = torch.randn(70)
out = torch.full((70,), float("nan"))
tr = trace(scale_kernel, x, out, 70, BLOCK=32, grid=(3,))
assert tr.elements("out_ptr", "store", pid=2) == set(range(64, 70)), tr.elements("out_ptr", "store", pid=2)
assert torch.equal(out, 2 * x)
changed = [name for name, fn in original.items() if getattr(tl, name) is not fn]
assert not changed, f"triton.language left patched: {changed}"
assert JITFunction.run.__qualname__ == "JITFunction.run"
print("compiled-mode trace OK")
