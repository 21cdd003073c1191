"""Compile kernels for sm_90 without a GPU: the interpreter never runs Triton's compiler, this does.

:func:`compile_for_sm90` runs this module in a compile process (:func:`kernels.compile.run_compiled`), which compiles
each kernel for an H100/H200 target with :func:`kernels.compile.compile_for` and hands back the PTX.
"""

import json
import pathlib
import sys

from kernels.compile import compile_for, run_compiled, specialise

_HERE = pathlib.Path(__file__).resolve().parent


def compile_for_sm90(specs, *, dtypes=("fp32",), scalars=None) -> dict[str, str]:
    """``specs``: ``(module, kernel, constexprs, options)``; pointers take each dtype, ``scalars`` override types.

    Returns PTX by ``"<index in specs>/<dtype>"``; raises with the compiler's message if any kernel fails.
    """
    arg = json.dumps([specs, list(dtypes), scalars or {}])
    r = run_compiled("sm90", [arg], paths=[str(_HERE)], timeout=600)
    if r.returncode:
        raise AssertionError(f"compiling for sm_90 failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout)


def _main(arg: str) -> None:
    import importlib

    specs, dtypes, scalars = json.loads(arg)
    ptx = {}
    for i, (module, name, constexprs, options) in enumerate(specs):
        fn = getattr(importlib.import_module(module), name)
        for dt in dtypes:
            values = dict(constexprs)
            for p in fn.params:
                if not p.is_constexpr:
                    ty = scalars.get(p.name, "*" + dt if p.name.endswith("_ptr") else "i32")
                    values[p.name] = {"ptr": ty[1:], "aligned": True} if ty.startswith("*") else {"type": ty}
            sig, const, attrs = specialise(fn, values, specialize=True)
            ptx[f"{i}/{dt}"] = compile_for(fn, sig, const, attrs, options).asm["ptx"]
    json.dump(ptx, sys.stdout)


if __name__ == "__main__":
    _main(sys.argv[1])
