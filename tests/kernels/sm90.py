"""Compile kernels for sm_90 without a GPU: the interpreter never runs Triton's compiler, this does.

A subprocess pretends CUDA is present so that ``kernels`` decorates real JIT functions, then compiles each kernel
with ``triton.compile`` for an H100/H200 target and hands back the PTX.
"""

import json
import os
import pathlib
import subprocess
import sys

_ROOT = pathlib.Path(__file__).resolve().parents[2]

_SCRIPT = """
import importlib, json, sys
import torch
torch.cuda.is_available = lambda: True
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

specs, dtypes, scalars = json.loads(sys.argv[1])
ptx = {}
for i, (module, name, constexprs, options) in enumerate(specs):
    fn = getattr(importlib.import_module(module), name)
    for dt in dtypes:
        sig = {p.name: "constexpr" if p.is_constexpr else ("*" + dt if p.name.endswith("_ptr") else
               scalars.get(p.name, "i32")) for p in fn.params}
        sig.update({k: v for k, v in scalars.items() if k in sig and v.startswith("*")})
        attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(sig.values()) if t.startswith("*")}
        c = triton.compile(ASTSource(fn, sig, constexprs, attrs), target=GPUTarget("cuda", 90, 32), options=options)
        ptx[f"{i}/{dt}"] = c.asm["ptx"]
json.dump(ptx, sys.stdout)
"""


def compile_for_sm90(specs, *, dtypes=("fp32",), scalars=None) -> dict[str, str]:
    """``specs``: ``(module, kernel, constexprs, options)``; pointers take each dtype, ``scalars`` override types.

    Returns PTX by ``"<index in specs>/<dtype>"``; raises with the compiler's message if any kernel fails.
    """
    arg = json.dumps([specs, list(dtypes), scalars or {}])
    r = subprocess.run([sys.executable, "-c", _SCRIPT, arg], capture_output=True, text=True, timeout=600,
                       cwd=_ROOT, env={**os.environ, "TRITON_INTERPRET": "0"})
    if r.returncode:
        raise AssertionError(f"compiling for sm_90 failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout)
