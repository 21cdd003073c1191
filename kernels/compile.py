"""Compile a ``@triton.jit`` kernel ahead of time for an NVIDIA GPU, with or without one: the one place that does.

``triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", 90, 32))`` lowers a kernel
to PTX and a cubin for ``sm_90`` (an H100/H200) on any machine. Three pieces, used by the checks' sm_90 compile,
the export to PTX/cubin, the profile lesson's compiler views, the PTX explorer and the tests:

- :func:`specialise`: Triton's signature (each parameter's type, or ``constexpr``), the constexpr values and the
  divisibility attributes for one launch, from the launch's values (tensors, numbers, or descriptions of them);
  :func:`specialise_arg` is Triton's rule for one argument, which the cubin path applies too;
- :func:`compile_for`: the compile itself, for ``sm_<arch>``;
- :func:`run_compiled` and :func:`enter_compile_mode`: the way out of the interpreter. Under
  ``TRITON_INTERPRET=1`` every ``@triton.jit`` (Triton's own helpers such as ``tl.cdiv`` included) is an
  interpreted function that cannot be compiled, so the compile runs in a fresh process: :func:`run_compiled` runs
  a module there as ``python -m`` would, after :func:`enter_compile_mode`, before any kernel is imported.

The grader's cubin path (:mod:`kernels.checks.cubin`) specialises a launch from the kernel's parameters as text,
never its function, by the same :func:`specialise_arg`, and compiles through :func:`compile_for` too.

Importing this module imports neither Triton's compiler nor the checks.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import torch

__all__ = ["ARCH", "TRITON_TYPES", "SignatureError", "interpreting", "describe", "bind", "specialise_arg",
           "specialise", "compile_for", "run_compiled", "enter_compile_mode"]

#: The architecture compiled for unless told otherwise: sm_90 (H100/H200).
ARCH = 90
#: Triton's name for each torch element type.
TRITON_TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
                torch.int8: "i8", torch.int16: "i16", torch.int32: "i32", torch.int64: "i64", torch.uint8: "u8",
                torch.bool: "u1"}
_DIV16 = [["tt.divisibility", 16]]
#: Where this package was imported from: a compile process must import the same one.
_HOME = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class SignatureError(ValueError):
    """A launch whose arguments do not fit the kernel's parameters."""


def interpreting() -> bool:
    """Whether ``@triton.jit`` in this process makes interpreter wrappers (``TRITON_INTERPRET=1``): then nothing
    can be compiled here, and :func:`run_compiled` is the way to compile."""
    import triton
    from triton.runtime.jit import JITFunction

    return bool(triton.knobs.runtime.interpret) or not isinstance(triton.language.standard.cdiv, JITFunction)


def describe(value):
    """A launch argument as :func:`specialise` takes it, without the tensor: a tensor becomes
    ``{"ptr": "<triton type>", "aligned": <16-byte aligned address>}``; anything else stays as it is."""
    if _is_tensor(value):
        return {"ptr": TRITON_TYPES.get(value.dtype, "fp32"), "aligned": value.data_ptr() % 16 == 0}
    return value


def _is_tensor(value) -> bool:
    return isinstance(value, torch.Tensor) or (hasattr(value, "data_ptr") and hasattr(value, "dtype"))


def bind(jit_fn, args: tuple, kwargs: dict) -> dict:
    """The value of each parameter of ``jit_fn`` for ``jit_fn[grid](*args, **kwargs)``; defaults fill the rest.
    ``kwargs`` hold parameters only (launch options taken out)."""
    names = [p.name for p in jit_fn.params]
    values = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise SignatureError(f"the launch passes {k}=, but the kernel has no parameter {k!r} (it has: "
                                 f"{', '.join(names)})")
        values[k] = v
    for p in jit_fn.params:
        if p.name not in values:
            if p.default is inspect.Parameter.empty:
                raise SignatureError(f"the kernel's parameters {', '.join(names)} do not match the documented "
                                     f"launch (nothing is passed for {p.name!r})")
            values[p.name] = p.default
    return values


def specialise_arg(value, *, specialize: bool = True, align: bool = True) -> tuple[str, bool, object]:
    """Triton's rule for one argument that is not a ``tl.constexpr`` parameter (``specialize_impl`` in
    ``triton/runtime/jit.py``, 3.6): ``(type, divisible by 16, value)``, the value kept only for the type
    ``constexpr``.

    ``value`` is a tensor or ``{"ptr": type, "aligned": bool}`` (a pointer), ``{"type": "i32", "div16": bool}`` (a
    scalar of that type, value unknown), a bool (``u1``), an int (``i32``, else ``i64``, else ``u64`` from 2**63),
    a float (``fp32``), ``None`` or anything else (compiled in, as ``constexpr``). With ``specialize`` (as the JIT
    does for a parameter not in ``do_not_specialize``) an int equal to 1 is compiled in; with ``specialize`` and
    ``align`` (a parameter not in ``do_not_specialize_on_alignment`` either) an int divisible by 16, a scalar marked
    ``div16`` or a 16-byte aligned pointer gets the divisibility hint.
    """
    if _is_tensor(value):
        value = describe(value)
    if isinstance(value, dict) and "ptr" in value:
        return "*" + value["ptr"], specialize and align and bool(value.get("aligned")), None
    if isinstance(value, dict) and "type" in value:
        return value["type"], specialize and align and bool(value.get("div16")), None
    if isinstance(value, bool):
        return "u1", False, None
    if isinstance(value, int):
        if specialize and value == 1:
            return "constexpr", False, 1
        if not -2**63 <= value < 2**64:
            raise SignatureError(f"the integer {value} does not fit in 64 bits")
        return ("i32" if -2**31 <= value < 2**31 else "i64" if value < 2**63 else "u64"), \
            specialize and align and value % 16 == 0, None
    if isinstance(value, float):
        return "fp32", False, None
    return "constexpr", False, value


def specialise(jit_fn, values: dict, *, specialize: bool = False) -> tuple[dict, dict, dict]:
    """Triton's ``(signature, constexprs, attrs)`` for a launch of ``jit_fn`` with ``values`` by parameter name.

    A constexpr parameter takes its value, else its default; any other takes its type by :func:`specialise_arg`
    (which says what a value may be). ``specialize=True`` does what Triton's JIT does with a launch's arguments
    (``do_not_specialize`` and ``do_not_specialize_on_alignment`` respected): divisibility hints, an int equal
    to 1 compiled in; without it nothing is assumed.
    """
    sig, const, attrs = {}, {}, {}
    for i, p in enumerate(jit_fn.params):
        if p.is_constexpr:
            if p.name in values:
                const[p.name] = values[p.name]
            elif p.default is not inspect.Parameter.empty:
                const[p.name] = p.default
            else:
                raise SignatureError(f"constexpr {p.name} needs a value (pass {p.name}=...)")
            sig[p.name] = "constexpr"
            continue
        if p.name not in values:
            raise SignatureError(f"parameter {p.name} of {jit_fn.fn.__name__} has no value or type")
        t, div16, c = specialise_arg(values[p.name], specialize=specialize and not p.do_not_specialize,
                                     align=not p.do_not_specialize_on_alignment)
        sig[p.name] = t
        if t == "constexpr":
            const[p.name] = c
        elif div16:
            attrs[(i,)] = _DIV16
    return sig, const, attrs


def compile_for(jit_fn, signature: dict, constexprs: dict | None = None, attrs: dict | None = None,
                options: dict | None = None, *, arch: int = ARCH):
    """``triton.compile`` of ``jit_fn`` for ``sm_<arch>``: the compiled kernel (``.asm["ptx"]``, ``["cubin"]``,
    ``.metadata``). Needs a process where ``jit_fn`` is a compiled-mode ``JITFunction`` (see the module's
    docstring); the compiler's own exceptions pass through."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(fn=jit_fn, signature=signature, constexprs=constexprs or {}, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options or None)


#: The compile process's first lines: compile mode on, then the module runs as ``python -m`` would run it.
_TRAMPOLINE = ("import runpy, sys; from kernels.compile import enter_compile_mode; enter_compile_mode(); "
               "sys.argv = sys.argv[1:]; runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")


def _compiled(module: str, args, paths=(), env: dict | None = None) -> tuple[list[str], dict]:
    """The command line and environment of a compile-mode ``python -m <module> <args...>``."""
    env = dict(os.environ if env is None else env, TRITON_INTERPRET="0")
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(filter(None, [*map(str, paths), _HOME,
                                                                    env.get("PYTHONPATH")])))
    return [sys.executable, "-c", _TRAMPOLINE, module, *map(str, args)], env


def run_compiled(module: str, args: list[str] | tuple[str, ...] = (), *, input: str | None = None,
                 timeout: float | None = None, paths: list[str] | tuple[str, ...] = (),
                 env: dict | None = None, capture: bool = True) -> subprocess.CompletedProcess:
    """Run ``python -m <module> <args...>`` in a fresh process in compile mode (:func:`enter_compile_mode` first,
    so every kernel it imports is compilable), with this package and ``paths`` importable; text in and out,
    captured unless ``capture=False``. :class:`subprocess.TimeoutExpired` passes through."""
    argv, env = _compiled(module, args, paths, env)
    return subprocess.run(argv, input=input, capture_output=capture, text=True, env=env, timeout=timeout)


def start_compiled(module: str, args: list[str] | tuple[str, ...] = ()) -> subprocess.Popen:
    """:func:`run_compiled`'s process, left running: text lines in and out through pipes, stderr discarded, in a
    session of its own (so that it and its children can be stopped together)."""
    argv, env = _compiled(module, args)
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env, start_new_session=True)


def enter_compile_mode() -> None:
    """The first thing a compile process does (:func:`run_compiled` does it for its module): kernels decorated
    after this are compiled-mode ``JITFunction`` objects, and so are Triton's own helpers. Without a GPU
    ``import kernels`` sets ``TRITON_INTERPRET=1`` (for the learner's notebook), so it is set back once the package
    is imported."""
    os.environ["TRITON_INTERPRET"] = "0"
    import triton  # noqa: F401  (Triton's own @jit helpers become compilable functions)

    import kernels  # noqa: F401

    os.environ["TRITON_INTERPRET"] = "0"
