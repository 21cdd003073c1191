"""Where a graded kernel comes from, and proof that it is a Triton kernel.

A kernel argument is rebuilt from source into a small module of its own: the ``@triton.jit`` function, the
``@triton.jit`` helpers it calls and the constants it reads, all of which must be defined at the top level of
the notebook, plus ``triton``/``math`` imports. That module is what gets run, so nothing else the notebook did
(patching torch, the checker or the kernel object) reaches it. Three rules, each with its own message:

1. **Defined in the notebook**: found as ``@triton.jit def name(...)`` among the notebook's top-level statements
   (``scan`` reads cell sources, as the grader does; ``from_live`` reads the live objects of ``__main__``, as an
   interactive check does). Imported kernels, plain Python functions and run-time values are refused.
2. **Not a package kernel**: every function's fingerprint (its AST with docstrings dropped and every variable
   renamed in order of appearance) differs from every ``@triton.jit`` function under ``kernels/``.
3. **Compiles for a GPU**: before the interpreter runs it, every specialisation the check launches is compiled
   ahead of time for sm_90 (:mod:`kernels.compile`, no GPU needed; :mod:`kernels.checks.dry_run`), which refuses
   calls to torch, numpy or any Python function that the
   interpreter would run. It runs in a process of its own: compiling and interpreting do not mix in one process.
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import importlib.util
import inspect
import itertools
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

import kernels

from ..compile import SignatureError, bind, compile_for, run_compiled, specialise, start_compiled
from .spec import CheckFailed

__all__ = [
    "Rejected",
    "Binding",
    "KernelSource",
    "scan",
    "from_cells",
    "from_live",
    "fingerprint",
    "package_fingerprints",
    "load",
    "Recorder",
    "aot_compile",
    "transform_cell",
    "check_copies",
    "check_function_static",
    "check_function_live",
    "FUNCTION_ALLOWED",
]

_PACKAGE = pathlib.Path(kernels.__file__).resolve().parent  # the package's own folder, wherever it is installed
_ALLOWED_IMPORTS = ("triton", "math")
_KERNEL_BUILTINS = {"range", "min", "max", "len", "int", "float", "bool", "print", "isinstance", "getattr",
                    "hasattr", "tuple", "list", "abs", "True", "False", "None", "zip", "enumerate"}
_COUNTER = itertools.count()


class Rejected(CheckFailed):
    """The object is not the student's own Triton kernel (or function); the message says why."""


@dataclass
class Binding:
    """What a top-level name of the notebook is bound to, as far as grading cares."""

    kind: str  # "jit", "def", "const", "import", "other"
    node: ast.AST | None = None
    source: str = ""  # jit: the function's source without decorators; import: the import statement
    value: object = None  # const: the value
    constexpr: bool = False  # const: wrapped in tl.constexpr
    detail: str = ""  # import: the dotted path; other: how it was bound; jit: extra decorator arguments
    where: str = ""  # "cell 7"


@dataclass
class KernelSource:
    """A kernel rebuilt as a module: ``text`` defines ``entry`` and everything it needs."""

    entry: str
    text: str
    functions: dict[str, str] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


#: Cell magics that run their cell as ordinary code in the notebook's namespace (what they define is defined).
_TRANSPARENT_MAGICS = ("capture", "time")


def transform_cell(src: str) -> str:
    """A cell's source as plain Python (IPython magics and shell escapes become calls). A ``%%capture`` or
    ``%%time`` cell is its body: IPython runs it as usual, so the kernel it defines is the notebook's."""
    lines = src.lstrip("\n").split("\n", 1)
    head = lines[0].strip()
    if head.startswith("%%") and head[2:].split(" ")[0] in _TRANSPARENT_MAGICS:
        return transform_cell(lines[1] if len(lines) > 1 else "")
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return src
    try:
        return TransformerManager().transform_cell(src)
    except Exception:
        return src


# ---- scanning top-level statements -------------------------------------------------------------------------

def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _jit_decorator(fn: ast.FunctionDef, imports: dict[str, str]) -> tuple[bool, str, str]:
    """(is a Triton kernel, extra ``@triton.jit`` arguments, why not)."""
    found = False
    kwargs = ""
    others = []
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = _dotted(target) or ""
        head, _, rest = name.partition(".")
        full = imports.get(head, head) + ("." + rest if rest else "")
        if full in ("triton.jit", "triton.runtime.jit.jit", "triton.runtime.jit"):
            found = True
            if isinstance(dec, ast.Call):
                if dec.args:
                    return True, "", "@triton.jit takes keyword arguments only"
                kwargs = ", ".join(ast.unparse(k) for k in dec.keywords)
        else:
            others.append("@" + (name or ast.unparse(dec)))
    if found and others:
        return True, kwargs, f"only @triton.jit is supported on a graded kernel (found {', '.join(others)})"
    return found, kwargs, ""


def _store_names(stmt: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not stmt:
            out.add(node.name)
    return out


def _mult(a, b):
    if isinstance(a, str) or isinstance(b, str):
        if (b if isinstance(a, str) else a) > 1000:
            raise ValueError("constant too large")
    return a * b


_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: _mult,
           ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
           ast.LShift: lambda a, b: a << b if b <= 256 else _no(), ast.RShift: lambda a, b: a >> b,
           ast.BitOr: lambda a, b: a | b,
           ast.BitAnd: lambda a, b: a & b, ast.BitXor: lambda a, b: a ^ b,
           ast.Pow: lambda a, b: a ** b if abs(b) <= 64 else _no()}
_UNOPS = {ast.USub: lambda a: -a, ast.UAdd: lambda a: +a, ast.Not: lambda a: not a, ast.Invert: lambda a: ~a}


def _no():
    raise ValueError("not a constant")


def _const(node: ast.AST, env: dict[str, Binding], imports: dict[str, str]) -> tuple[object, bool]:
    """Evaluate a constant expression: literals, arithmetic, earlier constants, ``tl.constexpr(...)``; values
    stay small (no huge integers or strings), so reading a notebook cannot exhaust the grader."""
    value, constexpr = _const_raw(node, env, imports)
    if isinstance(value, int) and value.bit_length() > 256 or isinstance(value, str) and len(value) > 1000:
        raise ValueError("constant too large")
    return value, constexpr


def _const_raw(node: ast.AST, env: dict[str, Binding], imports: dict[str, str]) -> tuple[object, bool]:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool, str, type(None))):
        return node.value, False
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNOPS:
        v, c = _const(node.operand, env, imports)
        return _UNOPS[type(node.op)](v), c
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, ca = _const(node.left, env, imports)
        b, cb = _const(node.right, env, imports)
        return _BINOPS[type(node.op)](a, b), ca or cb
    if isinstance(node, ast.Name) and node.id in env and env[node.id].kind == "const":
        return env[node.id].value, env[node.id].constexpr
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        name = _dotted(node.func) or ""
        head, _, rest = name.partition(".")
        full = imports.get(head, head) + ("." + rest if rest else "")
        if full in ("triton.language.constexpr", "triton.language.core.constexpr"):
            return _const(node.args[0], env, imports)[0], True
    raise ValueError("not a constant")


def scan(cells: list[str]) -> dict[str, Binding]:
    """The top-level bindings of a notebook's code cells, executed in order (the last binding wins)."""
    env: dict[str, Binding] = {}
    imports: dict[str, str] = {}
    for index, raw in enumerate(cells):
        src = transform_cell(raw)
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        where = f"cell {index + 1}"
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                is_jit, kwargs, why = _jit_decorator(stmt, imports)
                lines = src.splitlines()[stmt.lineno - 1: stmt.end_lineno]
                body = textwrap.dedent("\n".join(lines))
                if is_jit and not why:
                    env[stmt.name] = Binding("jit", stmt, body, detail=kwargs, where=where)
                elif is_jit:
                    env[stmt.name] = Binding("other", stmt, detail=why, where=where)
                else:
                    env[stmt.name] = Binding("def", stmt, body, where=where)
            elif isinstance(stmt, ast.Import):
                for a in stmt.names:
                    bound = a.asname or a.name.split(".")[0]
                    path = a.name if a.asname else a.name.split(".")[0]
                    text = f"import {a.name}" + (f" as {a.asname}" if a.asname else "")
                    env[bound] = Binding("import", stmt, text, detail=path, where=where)
                    imports[bound] = path
            elif isinstance(stmt, ast.ImportFrom):
                for a in stmt.names:
                    bound = a.asname or a.name
                    if stmt.level or a.name == "*":
                        env[bound] = Binding("other", stmt, detail="a relative or star import", where=where)
                        continue
                    path = f"{stmt.module}.{a.name}"
                    text = f"from {stmt.module} import {a.name}" + (f" as {a.asname}" if a.asname else "")
                    env[bound] = Binding("import", stmt, text, detail=path, where=where)
                    imports[bound] = path
            elif (isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None
                  and all(isinstance(t, ast.Name) for t in (stmt.targets if isinstance(stmt, ast.Assign)
                                                            else [stmt.target]))):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                try:
                    value, constexpr = _const(stmt.value, env, imports)
                    if isinstance(stmt, ast.AnnAssign) and "constexpr" in ast.unparse(stmt.annotation):
                        constexpr = True
                    b = Binding("const", stmt, value=value, constexpr=constexpr, where=where)
                except (ValueError, TypeError, ZeroDivisionError, OverflowError):
                    b = Binding("other", stmt, detail="computed at run time", where=where)
                for t in targets:
                    env[t.id] = b
                    imports.pop(t.id, None)
            else:
                for name in _store_names(stmt):
                    env[name] = Binding("other", stmt, detail="bound at run time", where=where)
                    imports.pop(name, None)
                if isinstance(stmt, ast.Delete):
                    for t in stmt.targets:
                        if isinstance(t, ast.Name):
                            env.pop(t.id, None)
    return env


# ---- rebuilding the kernel ---------------------------------------------------------------------------------

def _free_names(fn: ast.FunctionDef) -> list[str]:
    bound = {a.arg for a in itertools.chain(fn.args.posonlyargs, fn.args.args, fn.args.kwonlyargs)}
    if fn.args.vararg:
        bound.add(fn.args.vararg.arg)
    if fn.args.kwarg:
        bound.add(fn.args.kwarg.arg)
    for stmt in fn.body:
        bound |= _store_names(stmt)
    seen = []
    for node in itertools.chain(fn.body, [a.annotation for a in fn.args.args if a.annotation]):
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in bound:
                if sub.id not in seen:
                    seen.append(sub.id)
    return seen


#: What a kernel body may not touch: under the interpreter it runs as Python, so these would let it behave
#: differently from what the sm_90 compile checked (or run any Python), each refused with a message naming it.
_DIVERGENT_ATTRS = {
    "handle": "`.handle`, the interpreter's own tensor object (it exists only when the kernel runs as Python)",
    "builtins": "`builtins` (Triton's or Python's), which reaches Python code from inside a kernel",
    "knobs": "`triton.knobs`, Triton's run-time settings",
    "interpreter": "Triton's interpreter module (an interpreter flag)",
    "runtime": "`triton.runtime`, Triton's launcher internals",
    "compiler": "Triton's compiler internals",
    "backends": "Triton's backend internals",
    "core": "`tl.core`, Triton's language internals (use the `tl.` functions)",
    "semantic": "Triton's language internals",
    "environ": "the process environment (an interpreter flag)",
}
_DIVERGENT_WORDS = ("interpret", "handle", "knobs", "builtins", "environ")


def _divergence(name: str, fn: ast.FunctionDef) -> None:
    """Refuse what lets a kernel tell the interpreter from the compiler, or run Python from inside a kernel."""
    for node in ast.walk(fn):
        if node is not fn and isinstance(node, (ast.Import, ast.ImportFrom)):
            raise Rejected(f"{name} imports inside a kernel (`{ast.unparse(node)}`): a kernel may use only `tl`, "
                           "`triton`, `math` and your own @triton.jit functions, imported at the top of the notebook")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)) and node is not fn:
            raise Rejected(f"{name} defines a Python function or class inside the kernel; define @triton.jit "
                           "helpers at the top level")
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise Rejected(f"{name} uses the Python internal `{node.id}`: a kernel that can run Python is not "
                           "graded; write it with `tl` operations only")
        if isinstance(node, ast.Attribute):
            attr, bare = node.attr, node.attr.strip("_")
            if attr.startswith("__") or bare in _DIVERGENT_ATTRS or "interpret" in attr.lower():
                what = _DIVERGENT_ATTRS.get(bare, "Triton's interpreter (an interpreter flag)"
                                            if "interpret" in attr.lower() else f"the Python internal `{attr}`")
                raise Rejected(f"{name} uses {what}: a kernel that can tell the interpreter from the compiler, or "
                               "run Python, is not graded; write it with `tl` operations only")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            for arg in node.args[1:2]:
                if not isinstance(arg, ast.Constant) or not isinstance(arg.value, str):
                    raise Rejected(f"{name} calls {node.func.id} with a name built at run time")
                low = arg.value.lower()
                if arg.value.startswith("__") or any(w in low for w in _DIVERGENT_WORDS):
                    raise Rejected(f"{name} reaches {arg.value!r} by name ({node.func.id}): a kernel that can tell "
                                   "the interpreter from the compiler is not graded")


def _build(entry: str, lookup: Callable[[str], Binding | None], what: str) -> KernelSource:
    b = lookup(entry)
    if b is None:
        raise Rejected(f"{entry} is not defined at the top level of your notebook; {what} must be a "
                       f"`@triton.jit def {entry}(...)` in a code cell")
    if b.kind != "jit":
        raise Rejected(_not_a_kernel(entry, b, what))
    if _stub(b.node):
        raise Rejected(f"{entry} is not implemented yet: replace `raise NotImplementedError()` with your code")
    order: list[str] = []
    consts: dict[str, Binding] = {}
    imports: dict[str, str] = {}
    todo = [entry]
    funcs: dict[str, Binding] = {}
    while todo:
        name = todo.pop()
        if name in funcs:
            continue
        fb = lookup(name)
        _literal_only(name, fb)
        _divergence(name, fb.node)
        funcs[name] = fb
        order.append(name)
        for free in _free_names(fb.node):
            if free in funcs:
                continue
            dep = lookup(free)
            if dep is None:
                if free in _KERNEL_BUILTINS:
                    continue
                if hasattr(builtins, free):
                    raise Rejected(f"{name} uses the Python builtin `{free}`, which a Triton kernel cannot use")
                raise Rejected(f"{name} uses `{free}`, which is not defined at the top level of your notebook")
            if dep.kind == "jit":
                todo.append(free)
            elif dep.kind == "const":
                consts[free] = dep
            elif dep.kind == "import":
                top = dep.detail.split(".")[0]
                if dep.detail.startswith("kernels"):
                    raise Rejected(f"{name} uses `{free}`, imported from {dep.detail}: the kernel must be your "
                                   "own code, not the package's")
                if top not in _ALLOWED_IMPORTS:
                    raise Rejected(f"{name} uses `{free}` ({dep.detail}) inside a kernel; a Triton kernel may use "
                                   "only `tl`, `triton`, `math` and your own @triton.jit functions and constants")
                imports[free] = dep.source
            elif dep.kind == "def":
                raise Rejected(f"{name} calls `{free}`, a Python function: a kernel may call only `tl` functions "
                               "and other @triton.jit functions")
            else:
                raise Rejected(f"{name} uses `{free}`, which your notebook sets at run time ({dep.detail}, "
                               f"{dep.where}); a kernel may read only constants such as `{free} = "
                               "tl.constexpr(128)` defined at the top level")
    lines = ['"""Rebuilt from the notebook by kernels.checks.provenance."""', "import triton"]
    lines += [s for s in imports.values() if s != "import triton"]
    for name, cb in consts.items():
        lines.append(f"{name} = triton.language.constexpr({cb.value!r})" if cb.constexpr else f"{name} = {cb.value!r}")
    functions = {}
    prints = {}
    for name in reversed(order):
        fb = funcs[name]
        lines += ["", "", f"@triton.jit({fb.detail})" if fb.detail else "@triton.jit", fb.source]
        functions[name] = fb.source
        prints[name] = fingerprint(fb.source)
    return KernelSource(entry, "\n".join(lines) + "\n", functions, prints)


_ANNOTATIONS = {"tl.constexpr", "triton.language.constexpr", "constexpr", "tl.tensor", "int", "float", "bool"}


def _literal_only(name: str, b: Binding) -> None:
    """Nothing in a kernel's header may run code when the rebuilt module is imported."""
    fn = b.node
    args = fn.args
    for d in itertools.chain(args.defaults, [d for d in args.kw_defaults if d is not None]):
        try:
            ast.literal_eval(d)
        except ValueError:
            raise Rejected(f"{name}: a parameter's default must be a literal, got `{ast.unparse(d)}`") from None
    for a in itertools.chain(args.posonlyargs, args.args, args.kwonlyargs):
        ann = a.annotation
        aliased = isinstance(ann, ast.Attribute) and isinstance(ann.value, ast.Name) and ann.attr in ("constexpr",
                                                                                                     "tensor")
        if ann is not None and not (isinstance(ann, ast.Constant) and isinstance(ann.value, str)) \
                and ast.unparse(ann) not in _ANNOTATIONS and not aliased:  # `T.constexpr`: T must be triton's
            raise Rejected(f"{name}: parameter {a.arg} has the annotation `{ast.unparse(ann)}`; use "
                           "`tl.constexpr` or none")
    if fn.returns is not None:
        raise Rejected(f"{name}: a kernel has no return annotation")
    if b.detail:
        try:
            call = ast.parse(f"f({b.detail})", mode="eval").body
            for k in call.keywords:
                ast.literal_eval(k.value)
        except (ValueError, SyntaxError):
            raise Rejected(f"{name}: @triton.jit arguments must be literals, got `{b.detail}`") from None


def _stub(fn: ast.AST) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                return True
    return False


def _not_a_kernel(name: str, b: Binding, what: str) -> str:
    if b.kind == "import":
        return (f"{name} is imported ({b.source}); {what} must be your own `@triton.jit` kernel defined in "
                "this notebook, not one from a package")
    if b.kind == "def":
        return f"{name} is a plain Python function; {what} must be decorated with `@triton.jit`"
    if b.kind == "other" and b.detail.startswith("only @triton.jit"):
        return f"{name}: {b.detail}"
    return (f"{name} is not a `@triton.jit def` at the top level of your notebook ({b.detail}, {b.where}); "
            f"define {what} as `@triton.jit def {name}(...)` in a code cell")


def from_cells(cells: list[str], name: str, *, allowed: frozenset[str] = frozenset(), twins: tuple[str, ...] = (),
               forbidden: dict[str, str] | None = None) -> KernelSource:
    """Rebuild kernel ``name`` from a notebook's code cells (the grader's view: what the notebook says).

    ``allowed``: fingerprints the lesson itself provides (helpers in the student notebook), which may equal a
    package kernel; ``forbidden``: fingerprint -> name of kernels the entry kernel may not be (the lesson's
    provided kernels other than this exercise's stub).
    """
    env = scan(cells)
    ks = _build(name, env.get, "the graded kernel")
    check_copies(ks, allowed=allowed, forbidden=forbidden, twins=twins)
    return ks


def check_copies(ks: KernelSource, *, allowed: frozenset[str] = frozenset(),
                 forbidden: dict[str, str] | None = None, twins: tuple[str, ...] = ()) -> None:
    """Refuse a kernel that is (or calls) a copy of a package kernel, or that is a kernel the lesson provides.

    ``twins``: package kernels (``kernels.<module>.<name>``) whose form is the exercise's natural answer, a short
    kernel written the same way by anyone who solves it: an answer identical to one is no evidence of copying."""
    package = package_fingerprints()
    for fname, fp in ks.fingerprints.items():
        if fp in package and fp not in allowed and package[fp] not in twins:
            raise Rejected(f"{fname} is a copy of the package's {package[fp]}: write the kernel yourself")
    normalized = package_normalized()
    for fname, src in ks.functions.items():
        hit = normalized.get(normalized_fingerprint(src))
        if hit and hit[0] not in twins and ks.fingerprints.get(fname) not in allowed:
            raise Rejected(f"{fname} is a copy of the package's {hit[0]} with only names, constants or no-op "
                           f"statements changed ({similarity(src, hit[1]):.0%} of its structure is the same, and "
                           "all of it once those are set aside): write the kernel yourself")
    fp = ks.fingerprints[ks.entry]
    if forbidden and fp in forbidden:
        raise Rejected(f"{ks.entry} is the same kernel as {forbidden[fp]}, which the lesson provides")


def from_live(obj, name: str = "", *, twins: tuple[str, ...] = ()) -> KernelSource:
    """Rebuild a live ``@triton.jit`` object defined in ``__main__`` (an interactive check's view)."""
    fn = getattr(obj, "fn", None)
    if not _is_jit(obj) or fn is None:
        what = type(obj).__name__
        hint = " (did you forget @triton.jit?)" if inspect.isfunction(obj) else ""
        raise Rejected(f"{name or 'the argument'} must be a `@triton.jit` kernel, got a {what}{hint}")
    name = fn.__name__
    if fn.__module__ != "__main__":
        raise Rejected(f"{name} comes from the module {fn.__module__}; the graded kernel must be your own, "
                       "defined in this notebook")
    glb = fn.__globals__
    cache: dict[str, Binding | None] = {}

    def lookup(n: str) -> Binding | None:
        if n not in cache:
            cache[n] = _live_binding(n, glb)
        return cache[n]

    ks = _build(name, lookup, "the graded kernel")
    check_copies(ks, twins=twins)
    return ks


def _is_jit(obj) -> bool:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return isinstance(obj, (JITFunction, InterpretedFunction))


def _live_binding(n: str, glb: dict) -> Binding | None:
    import triton.language as tl

    if n not in glb:
        return None
    v = glb[n]
    if _is_jit(v):
        f = v.fn
        if f.__module__ != "__main__":
            if f.__module__.startswith("triton"):
                return Binding("import", None, f"from {f.__module__} import {f.__name__} as {n}", detail=f.__module__)
            return Binding("import", None, detail=f"{f.__module__}.{f.__name__}")
        try:
            src = textwrap.dedent(inspect.getsource(f))
        except (OSError, TypeError):
            return Binding("other", None, detail="its source is not available")
        node = ast.parse(src).body[0]
        is_jit, kwargs, why = _jit_decorator(node, {"triton": "triton", "jit": "triton.jit"})
        if why:
            return Binding("other", node, detail=why)
        body = "\n".join(src.splitlines()[node.lineno - 1:])
        return Binding("jit", node, body, detail=kwargs if is_jit else "")
    if inspect.ismodule(v):
        text = f"import {v.__name__}" if v.__name__ == n else f"import {v.__name__} as {n}"
        return Binding("import", None, text, detail=v.__name__)
    if isinstance(v, tl.constexpr):
        return Binding("const", None, value=v.value, constexpr=True)
    if isinstance(v, (int, float, bool, str, type(None))):
        return Binding("const", None, value=v)
    if inspect.isfunction(v) or inspect.isbuiltin(v):
        mod = getattr(v, "__module__", "") or ""
        if mod == "__main__":
            return Binding("def", None)
        return Binding("import", None, detail=f"{mod}.{getattr(v, '__name__', n)}")
    return Binding("other", None, detail=f"a {type(v).__name__}")


# ---- fingerprints ------------------------------------------------------------------------------------------

class _Rename(ast.NodeTransformer):
    def __init__(self):
        self.names: dict[str, str] = {}

    def _new(self, name: str) -> str:
        if name in ("tl", "triton", "math"):
            return name
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(self._new(node.id), node.ctx), node)

    def visit_arg(self, node):
        node.arg = self._new(node.arg)
        if node.annotation is not None:
            node.annotation = self.visit(node.annotation)
        return node


#: Calls that change nothing a kernel computes: a copy with one added is still the copy.
_NO_OPS = {"debug_barrier", "static_print", "device_print", "static_assert", "device_assert", "print"}


class _Normalize(ast.NodeTransformer):
    """What a trivial edit changes, set aside: every constant is one placeholder and no-op statements
    (``tl.debug_barrier()``, prints and asserts, ``pass``, a bare constant, ``x = x``) are dropped."""

    def visit_Constant(self, node):
        return ast.copy_location(ast.Constant("c"), node)

    def visit_BinOp(self, node):  # `0 * 1` where `0` was: constants folded into a constant stay one constant
        node = self.generic_visit(node)
        if isinstance(node.left, ast.Constant) and isinstance(node.right, ast.Constant):
            return ast.copy_location(ast.Constant("c"), node)
        return node

    @staticmethod
    def _noop(stmt: ast.stmt) -> bool:
        if isinstance(stmt, ast.Pass):
            return True
        if isinstance(stmt, ast.Expr):
            v = stmt.value
            if isinstance(v, ast.Constant):
                return True
            f = v.func if isinstance(v, ast.Call) else None
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            return name in _NO_OPS
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            return isinstance(stmt.value, ast.Name) and stmt.value.id == stmt.targets[0].id
        return False

    def generic_visit(self, node):
        for field_name in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field_name, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                kept = [s for s in stmts if not self._noop(s)]
                setattr(node, field_name, kept or ([ast.Pass()] if field_name == "body" else []))
        return super().generic_visit(node)


def _tree(source: str, normalize: bool) -> ast.AST | None:
    tree = ast.parse(textwrap.dedent(source))
    fn = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if fn is None:
        return None
    fn.decorator_list = []
    fn.name = "f"
    fn.returns = None
    if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(getattr(fn.body[0], "value", None), ast.Constant):
        fn.body = fn.body[1:] or [ast.Pass()]
    if normalize:
        fn = _Normalize().visit(fn)
    return _Rename().visit(fn)


def normalized_fingerprint(source: str) -> str:
    """:func:`fingerprint` with constants and no-op statements set aside: a copy edited only in those matches."""
    fn = _tree(source, True)
    return hashlib.sha256((ast.dump(fn, include_attributes=False) if fn else source).encode()).hexdigest()


def similarity(a: str, b: str) -> float:
    """How much of two functions' structure is the same (0..1), names and comments aside."""
    import difflib

    ta, tb = _tree(a, False), _tree(b, False)
    if ta is None or tb is None:
        return 0.0
    return difflib.SequenceMatcher(None, ast.unparse(ta).split(), ast.unparse(tb).split(), autojunk=False).ratio()


def fingerprint(source: str) -> str:
    """A hash of a function's structure that ignores its name, variable names, docstring and comments."""
    tree = ast.parse(textwrap.dedent(source))
    fn = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if fn is None:
        return hashlib.sha256(source.encode()).hexdigest()
    fn.decorator_list = []
    fn.name = "f"
    fn.returns = None
    if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(getattr(fn.body[0], "value", None), ast.Constant):
        fn.body = fn.body[1:] or [ast.Pass()]
    fn = _Rename().visit(fn)
    return hashlib.sha256(ast.dump(fn, include_attributes=False).encode()).hexdigest()


def _package_jit_functions():
    """``(kernels.<module>.<name>, source)`` of every ``@triton.jit`` function in the package, in file order."""
    for path in sorted(_PACKAGE.rglob("*.py")):
        try:
            src = path.read_text()
            tree = ast.parse(src)
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        mod = ".".join(path.relative_to(_PACKAGE.parent).with_suffix("").parts)
        imports = {"triton": "triton", "jit": "triton.jit"}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _jit_decorator(node, imports)[0]:
                yield f"{mod}.{node.name}", "\n".join(src.splitlines()[node.lineno - 1: node.end_lineno])


@functools.lru_cache(maxsize=1)
def package_fingerprints() -> dict[str, str]:
    """fingerprint -> ``kernels.<module>.<name>`` for every ``@triton.jit`` function in the package."""
    out: dict[str, str] = {}
    for name, seg in _package_jit_functions():
        out.setdefault(fingerprint(seg), name)
    return out


@functools.lru_cache(maxsize=1)
def package_normalized() -> dict[str, tuple[str, str]]:
    """normalized fingerprint -> (``kernels.<module>.<name>``, its source) for every package ``@triton.jit``."""
    out: dict[str, tuple[str, str]] = {}
    for name, seg in _package_jit_functions():
        out.setdefault(normalized_fingerprint(seg), (name, seg))
    return out


# ---- loading and the ahead-of-time compile -----------------------------------------------------------------

def load(ks: KernelSource, folder: str | os.PathLike | None = None, *, interpret: bool | None = None):
    """Import the rebuilt module from a file (``@triton.jit`` needs real source) and return its entry object.

    ``interpret``: build under ``TRITON_INTERPRET`` (the default: the current mode) or as compiled JIT functions.
    """
    folder = pathlib.Path(folder or tempfile.mkdtemp(prefix="kernel-"))
    folder.mkdir(parents=True, exist_ok=True)
    name = f"_graded_{ks.entry}_{ks.digest}_{next(_COUNTER)}"
    path = folder / f"{name}.py"
    path.write_text(ks.text)
    old = os.environ.get("TRITON_INTERPRET")
    if interpret is not None:
        os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    finally:
        if interpret is not None:
            if old is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = old
    return getattr(mod, ks.entry)


_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion")


def _signature(jit_fn, args: tuple, kwargs: dict, hints: bool = False) -> tuple[dict, dict, dict, dict]:
    """``(signature, constexprs, options, attrs)`` of the launch ``jit_fn[grid](*args, **kwargs)``: no hints assumed,
    or with ``hints`` those Triton's JIT would take from the values (16-byte aligned pointers, sizes divisible by
    16, an int equal to 1 compiled in)."""
    options = {k: kwargs[k] for k in _OPTIONS if k in kwargs}
    try:
        values = bind(jit_fn, args, {k: v for k, v in kwargs.items() if k not in _OPTIONS})
        sig, const, attrs = specialise(jit_fn, values, specialize=hints)
    except SignatureError as e:
        raise CheckFailed(str(e)) from None
    return sig, const, options, attrs


def aot_compile(jit_fn, signature: dict, constexprs: dict, options: dict | None = None, attrs: dict | None = None,
                *, arch: int = 90):
    """Compile a (non-interpreted) JIT function for sm_90 (or ``arch``); raise :class:`CheckFailed` with the
    compiler's reason.

    ``attrs``: what the JIT would assume of the arguments (``{(i,): [["tt.divisibility", 16]]}``); none by default.
    """
    try:
        return compile_for(jit_fn, signature, constexprs, attrs, options, arch=arch)
    except Exception as e:  # the compiler's own errors have many types
        raise CheckFailed(_compile_message(jit_fn, e)) from None


def _compile_message(jit_fn, e: Exception) -> str:
    text = str(e).strip()
    # Triton's CompilationError of a failed `tl` call shows the learner's line and a caret, and keeps the reason
    # (a TypeError: "Shape element 0 must have type `constexpr[int]`", say) only in the chain beneath
    from .bounds import explained, root_cause

    root = root_cause(e)
    reason = explained(root)
    if root is not e and reason and reason not in text:
        text += f"\n{type(root).__name__}: {reason[:500]}"
    name = getattr(getattr(jit_fn, "fn", None), "__name__", "the kernel")
    hint = ""
    if "Unsupported function" in text or "is not a Triton" in text or "Cannot call" in text:
        hint = ("\nA Triton kernel may call only `tl` functions and other @triton.jit functions. Calls to torch, "
                "numpy or Python functions run under the interpreter but cannot run on a GPU, so they do not pass.")
    if "NotImplementedError" in text:
        hint = "\nThe kernel is not implemented yet: replace `raise NotImplementedError()` with your code."
    return f"{name} does not compile for a GPU (sm_90): {type(e).__name__}: {text[-1500:]}{hint}"


class Recorder:
    """Stands in for a kernel during a dry run of ``Exercise.run``: each ``kernel[grid](...)`` compiles that
    specialisation for sm_90 instead of launching it, assuming nothing of its arguments' alignment unless ``hints``
    (then what Triton's JIT would assume of these values: the code a GPU would run). Needs a process where
    ``TRITON_INTERPRET`` is off."""

    def __init__(self, jit_fn, hints: bool = False):
        self.jit_fn = jit_fn
        self.hints = hints
        self.compiled: dict[str, object] = {}
        self.__name__ = jit_fn.fn.__name__

    @property
    def fn(self):
        return self.jit_fn.fn

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            sig, const, options, attrs = _signature(self.jit_fn, args, kwargs, self.hints)
            key = repr((sorted(sig.items()), sorted((k, repr(v)) for k, v in const.items()),
                        sorted(options.items()), attrs))
            if key not in self.compiled:
                self.compiled[key] = aot_compile(self.jit_fn, sig, const, options, attrs)

        return launch


_VERIFIED: dict[str, list[str]] = {}


def verify_compiles(exercise_id: str, hidden: bool, kernels: list, values: list, *,
                    timeout: float = 600) -> list[str]:
    """Compile every launch of the check for sm_90 (:func:`kernels.checks.dry_run.dry_run`) in a process with the
    interpreter off; raise :class:`CheckFailed` with the reason it does not compile. ``kernels``: a
    ``{"entry", "text"}`` (a :class:`KernelSource`) or ``None`` for each argument of the exercise; ``values``: the
    value arguments (``None`` elsewhere). Returns the exercise's notes on the compiled code
    (:attr:`~kernels.checks.spec.Performance.compiled`), usually none."""
    request = {"exercise": exercise_id, "hidden": hidden, "kernels": kernels, "values": values,
               "paths": [p for p in sys.path if p]}
    key = json.dumps(request, sort_keys=True, default=str)
    if key in _VERIFIED:
        return list(_VERIFIED[key])
    reply = _served(key, timeout)
    if reply is None:  # no server: a compile process of its own
        try:
            proc = run_compiled("kernels.checks.dry_run", input=key, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CheckFailed(f"compiling the kernel for sm_90 took longer than {timeout:.0f} s") from None
        reply = _last_json(proc.stdout)
        if reply is None:
            tail = (proc.stderr or proc.stdout).strip()[-2000:]
            raise CheckFailed(f"the ahead-of-time compile crashed (exit {proc.returncode}): {tail}")
    if "crashed" in reply:
        raise CheckFailed(f"the ahead-of-time compile crashed (wait status {reply['crashed']})")
    if not reply.get("ok"):
        raise CheckFailed(reply.get("message", "the kernel does not compile for sm_90"))
    _VERIFIED[key] = [str(n) for n in reply.get("notes", [])]
    return list(_VERIFIED[key])


_SERVER: list = []  # the running ``python -m kernels.checks.dry_run --serve`` of this process, if any


def _served(request: str, timeout: float) -> dict | None:
    """The reply of this process's compile server (started on first use; one fork a request instead of an
    interpreter start); ``None`` where it cannot answer (it is started again next time)."""
    import selectors
    import time

    proc = _SERVER[0] if _SERVER else None
    if proc is None or proc.poll() is not None:
        try:
            proc = start_compiled("kernels.checks.dry_run", ["--serve"])
        except OSError:
            return None
        _SERVER[:] = [proc]
    try:
        proc.stdin.write(request.replace("\n", " ") + "\n")
        proc.stdin.flush()
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout
            while not sel.select(max(0.0, deadline - time.monotonic())):
                if time.monotonic() >= deadline:
                    _stop_server()
                    raise CheckFailed(f"compiling the kernel for sm_90 took longer than {timeout:.0f} s")
        line = proc.stdout.readline()
    except (OSError, ValueError):
        line = ""
    try:
        return json.loads(line)
    except ValueError:
        _stop_server()
        return None


def _stop_server() -> None:
    import os
    import signal

    for proc in _SERVER:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
    _SERVER.clear()


def _last_json(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        try:
            out = json.loads(line)
        except ValueError:
            continue
        if isinstance(out, dict) and "ok" in out:
            return out
    return None


# ---- function answers --------------------------------------------------------------------------------------

#: Package modules a function answer may use (inputs, device, checks); everything else under ``kernels`` is not.
FUNCTION_ALLOWED = ("kernels.device", "kernels.testing", "kernels.validate")


def _chains(node: ast.AST) -> list[str]:
    """Dotted names read in ``node`` (``torch.nn.functional.relu``, ``x``), outermost first."""
    out = []
    inner = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and id(sub) not in inner:
            d = _dotted(sub)
            if d:
                out.append(d)
                cur = sub.value
                while isinstance(cur, ast.Attribute):
                    inner.add(id(cur))
                    cur = cur.value
                inner.add(id(cur))
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and id(sub) not in inner:
            out.append(sub.id)
    return out


def _forbidden(path: str, forbid: tuple[str, ...]) -> bool:
    if path == "kernels" or path.startswith("kernels."):
        return not any(path == a or path.startswith(a + ".") for a in FUNCTION_ALLOWED)
    return any(path == f or path.startswith(f + ".") or path.startswith(f) and f.endswith(".") for f in forbid)


def check_function_static(cells: list[str], name: str, forbid: tuple[str, ...] = ()) -> None:
    """A function answer is a notebook ``def`` that reaches nothing in ``kernels`` (or ``forbid``)."""
    env = scan(cells)
    b = env.get(name)
    if b is None:
        raise Rejected(f"{name} is not defined at the top level of your notebook")
    if b.kind == "import":
        raise Rejected(f"{name} is imported ({b.source}); write the function yourself")
    if b.kind != "def":
        raise Rejected(f"{name} must be a function defined with `def {name}(...)` at the top level of your "
                       f"notebook ({b.detail or b.kind}, {b.where})")
    _walk_function(name, b.node, env.get, forbid, set())


def _imported_inside(node: ast.AST) -> tuple[list[str], dict[str, str]]:
    """What a function body imports for itself: the module paths (``import a.b``; ``from a import b`` as
    ``a.b``; ``importlib.import_module("a.b")``, ``__import__("a.b")`` and ``sys.modules["a.b"]`` with a literal
    name) and the local names they bind (``import a.b as s``: ``s`` -> ``a.b``)."""
    paths, names = [], {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Import):
            for a in sub.names:
                paths.append(a.name)
                names[a.asname or a.name.partition(".")[0]] = a.name if a.asname else a.name.partition(".")[0]
        elif isinstance(sub, ast.ImportFrom) and sub.module and not sub.level:
            for a in sub.names:
                full = sub.module if a.name == "*" else f"{sub.module}.{a.name}"
                paths.append(full)
                if a.name != "*":
                    names[a.asname or a.name] = full
        elif isinstance(sub, ast.Call) and sub.args and isinstance(sub.args[0], ast.Constant) \
                and isinstance(sub.args[0].value, str) \
                and (_dotted(sub.func) or "").split(".")[-1] in ("import_module", "__import__"):
            paths.append(sub.args[0].value)
        elif isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant) \
                and isinstance(sub.slice.value, str) and (_dotted(sub.value) or "").endswith("modules"):
            paths.append(sub.slice.value)
    return paths, names


def _walk_function(name, node, lookup, forbid, seen):
    seen.add(name)
    paths, local = _imported_inside(node)
    for full in paths:
        if _forbidden(full, forbid):
            raise Rejected(f"{name} imports {full}: this exercise asks for your own implementation")
    for chain in _chains(node):
        head, _, rest = chain.partition(".")
        if head in local:
            full = local[head] + ("." + rest if rest else "")
            if _forbidden(full, forbid):
                raise Rejected(f"{name} uses {full}: this exercise asks for your own implementation")
            continue
        dep = lookup(head)
        if dep is None:
            continue
        if dep.kind == "import":
            full = dep.detail + ("." + rest if rest else "")
            if _forbidden(full, forbid):
                raise Rejected(f"{name} uses {full}: this exercise asks for your own implementation")
        elif dep.kind == "def" and head not in seen and dep.node is not None:
            _walk_function(head, dep.node, lookup, forbid, seen)


def check_function_live(fn, forbid: tuple[str, ...] = ()) -> None:
    """The interactive twin of :func:`check_function_static`, on a live function of ``__main__``."""
    if not inspect.isfunction(fn):
        raise Rejected(f"expected a Python function defined in this notebook, got a {type(fn).__name__}")
    if fn.__module__ != "__main__":
        raise Rejected(f"{fn.__name__} comes from the module {fn.__module__}; write the function yourself")
    glb = fn.__globals__

    def lookup(n: str) -> Binding | None:
        if n not in glb:
            return None
        v = glb[n]
        if inspect.ismodule(v):
            return Binding("import", detail=v.__name__)
        if inspect.isfunction(v) and v.__module__ == "__main__":
            try:
                return Binding("def", ast.parse(textwrap.dedent(inspect.getsource(v))).body[0])
            except (OSError, TypeError, SyntaxError):
                return None
        mod = getattr(v, "__module__", None)
        if isinstance(mod, str) and mod and mod != "__main__":
            return Binding("import", detail=f"{mod}.{getattr(v, '__qualname__', n)}")
        return None

    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    except (OSError, TypeError, SyntaxError):
        raise Rejected(f"the source of {fn.__name__} is not available; define it in a notebook cell") from None
    _walk_function(fn.__name__, node, lookup, forbid, set())
