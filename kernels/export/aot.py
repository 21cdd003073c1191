"""Ahead-of-time compilation of a Triton kernel to PTX and cubin, with a manifest a launcher can follow alone.

Compiling for ``sm_90`` (:mod:`kernels.compile`) needs no GPU. The
manifest records everything a launch needs that the PTX does not say plainly: the parameters in order with their
types (constexprs are compiled in and gone), the two scratch pointers Triton appends, threads per block, dynamic
shared memory, how to compute the grid and each buffer's size from the problem sizes, and which image to load.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import pathlib
from collections.abc import Callable

import triton
from triton.runtime.jit import JITFunction

from ..compile import compile_for, interpreting, specialise
from . import expr
from .manifest import FORMAT, FORMAT_VERSION
from .ptx import PtxVersionError, check_loadable, max_isa_for_cuda, ptx_entry, ptx_isa, ptx_target

__all__ = ["FORMAT", "FORMAT_VERSION", "KernelSpec", "ExportError", "interpreting", "compile_kernel",
           "export_here", "DTYPES", "SCALAR_TYPES"]

#: Element types a pointer parameter may point to, with their sizes in bytes.
DTYPES = {"fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "u8": 1,
          "u16": 2, "u32": 4, "u64": 8}
#: Scalar parameter types the launchers pack, with their sizes in bytes.
SCALAR_TYPES = {"i32": 4, "i64": 8, "u32": 4, "u64": 8, "fp32": 4, "fp64": 8}
_ROLES = ("in", "out", "inout", "unused")


class ExportError(ValueError):
    """A kernel that cannot be exported as asked, with the reason."""


@dataclasses.dataclass
class KernelSpec:
    """How to compile and launch one kernel.

    ``signature`` types every non-constexpr parameter (``"*{dtype}"`` is filled in with the chosen dtype);
    ``buffers`` (a dict, or a function of the constexprs) gives each pointer's role (``in``/``out``/``inout``, or
    ``unused``: pass NULL) and element count as an expression over ``sizes`` and constexprs; ``values`` gives a
    scalar parameter's value as an expression (a scalar named like a size defaults to that size; ``None``: the
    caller must give it); ``grid`` is up to three expressions; ``requires`` are comparisons a launch must meet.
    """

    name: str
    module: str
    attr: str
    signature: dict[str, str]
    buffers: dict[str, tuple[str, str]] | Callable[[dict], dict[str, tuple[str, str]]]
    sizes: tuple[str, ...]
    grid: tuple[str, ...]
    constexprs: dict[str, object]
    values: dict[str, str | None] = dataclasses.field(default_factory=dict)
    requires: tuple[str, ...] = ()
    aligned: tuple[str, ...] = ()  # what ``hint16=("aligned",)`` means: the scalars usually multiples of 16
    dtypes: tuple[str, ...] = ("fp32",)
    num_warps: int = 4
    num_stages: int = 3
    derived: Callable[[str, dict], dict] | None = None  # (dtype, constexprs) -> constexprs it implies
    check: Callable[[dict], None] | None = None  # raises ExportError for constexprs the kernel cannot use
    doc: str = ""


def _load(spec: KernelSpec) -> JITFunction:
    mod = importlib.import_module(spec.module)
    try:
        obj = getattr(mod, spec.attr)
    except AttributeError:
        raise ExportError(f"{spec.module} has no kernel {spec.attr!r}") from None
    if not isinstance(obj, JITFunction):
        raise ExportError(f"{spec.module}.{spec.attr} is a {type(obj).__name__}, not a compilable @triton.jit "
                          "function (imported under TRITON_INTERPRET=1?)")
    return obj


def _types(spec: KernelSpec, fn: JITFunction, dtype: str, constexprs: dict) -> dict[str, str]:
    """Each parameter's type as the spec gives it, ``constexpr`` for compiled-in ones, checked against ``fn``."""
    sig: dict[str, str] = {}
    for p in fn.params:
        if p.is_constexpr:
            if p.name not in constexprs:
                raise ExportError(f"{spec.name}: constexpr {p.name!r} has no value; pass --constexpr {p.name}=...")
            sig[p.name] = "constexpr"
        elif p.name in spec.signature:
            sig[p.name] = spec.signature[p.name].format(dtype=dtype)
        else:
            raise ExportError(f"{spec.name}: parameter {p.name!r} of {spec.attr} has no type in the export spec")
    extra = sorted(set(spec.signature) - set(sig))
    if extra:
        raise ExportError(f"{spec.name}: the spec types {extra}, which {spec.attr} does not take")
    unknown = sorted(set(constexprs) - {p.name for p in fn.params if p.is_constexpr})
    if unknown:
        known = [p.name for p in fn.params if p.is_constexpr]
        raise ExportError(f"{spec.name}: {unknown} are not constexprs of {spec.attr} (its constexprs: {known})")
    return sig


def _param_entries(spec: KernelSpec, sig: dict[str, str], constexprs: dict, align: int,
                   hint16: tuple[str, ...] = ()) -> list[dict]:
    known = set(spec.sizes) | set(constexprs)
    buffers = spec.buffers(constexprs) if callable(spec.buffers) else spec.buffers
    entries = []
    for name, ty in sig.items():
        if ty == "constexpr":
            continue
        if ty.startswith("*"):
            elem = ty[1:]
            if elem not in DTYPES:
                raise ExportError(f"{spec.name}: pointer {name} to {elem}; supported: {', '.join(DTYPES)}")
            if name not in buffers:
                raise ExportError(f"{spec.name}: pointer {name} has no role and size in the export spec")
            role, numel = buffers[name]
            if role not in _ROLES:
                raise ExportError(f"{spec.name}: {name} has role {role!r}; roles: {_ROLES}")
            if role == "unused":
                numel = "0"
            _check_names(spec, f"size of {name}", numel, known)
            entries.append({"name": name, "type": ty, "kind": "pointer", "dtype": elem,
                            "element_bytes": DTYPES[elem], "align": align, "role": role, "numel": numel})
        else:
            if ty not in SCALAR_TYPES:
                raise ExportError(f"{spec.name}: scalar {name} of type {ty}; supported: {', '.join(SCALAR_TYPES)}")
            if name in spec.values:
                value = spec.values[name]
            elif name in spec.sizes:
                value = name
            else:
                raise ExportError(f"{spec.name}: scalar {name} is neither a size nor given a value expression")
            if value is not None:
                if not ty.startswith(("i", "u")):
                    raise ExportError(f"{spec.name}: {name} is {ty}; only integer scalars take size expressions")
                _check_names(spec, f"value of {name}", value, known)
            entry = {"name": name, "type": ty, "kind": "scalar", "bytes": SCALAR_TYPES[ty], "value": value}
            if name in hint16:
                entry["multiple_of"] = 16
            entries.append(entry)
    return entries


def _check_names(spec: KernelSpec, what: str, text: str, known: set[str]) -> None:
    try:
        missing = expr.names(text) - known
    except expr.ExprError as e:
        raise ExportError(f"{spec.name}: {what}: {e}") from None
    if missing:
        raise ExportError(f"{spec.name}: {what} {text!r} uses {sorted(missing)}, which are neither sizes "
                          f"{list(spec.sizes)} nor constexprs")


def compile_kernel(spec: KernelSpec, *, dtype: str | None = None, constexprs: dict | None = None,
                   num_warps: int | None = None, num_stages: int | None = None, arch: int = 90,
                   ptx_version: int | None = None, align: int = 16, hint16: tuple[str, ...] = ()):
    """Compile ``spec`` for ``sm_<arch>``; return ``(compiled, signature, constexprs, dtype, options, hint16)``.

    ``hint16`` names integer scalars the kernel may assume are multiples of 16 (Triton's JIT assumes this of any
    such argument it sees, and vectorises accordingly); each must have a value expression, so that the manifest can
    require it; ``"aligned"`` stands for the spec's usual set.
    """
    dtype = dtype or spec.dtypes[0]
    if dtype not in spec.dtypes:
        raise ExportError(f"{spec.name}: dtype {dtype!r} not supported; choose from {', '.join(spec.dtypes)}")
    fn = _load(spec)
    cx = dict(spec.constexprs)
    cx.update(constexprs or {})
    if spec.derived:
        takes = {p.name for p in fn.params if p.is_constexpr}
        cx.update({k: v for k, v in spec.derived(dtype, cx).items() if k in takes})
    if spec.check:
        spec.check(cx)
    sig = _types(spec, fn, dtype, cx)
    # A stride that is always 1 is compiled in, as Triton's JIT does with an argument equal to 1: the compiler then
    # knows the innermost dimension is contiguous and can vectorise.
    for name, value in spec.values.items():
        if value == "1" and sig.get(name) in ("i32", "i64"):
            sig[name], cx[name] = "constexpr", 1
    if align not in (1, 16):
        raise ExportError(f"pointer alignment must be 1 or 16 bytes (Triton's only hints), got {align}")
    if "aligned" in hint16:
        hint16 = tuple(dict.fromkeys(n for h in hint16 for n in (spec.aligned if h == "aligned" else (h,))))
    for name in hint16:
        computed = spec.values.get(name, name if name in spec.sizes else None)
        if sig.get(name) not in ("i32", "i64", "u32", "u64") or computed is None:
            raise ExportError(f"{spec.name}: --hint16 {name}: only integer scalars computed from the sizes take "
                              "the multiple-of-16 hint")
    values = {n: cx[n] if t == "constexpr" else {"ptr": t[1:], "aligned": align == 16} if t.startswith("*")
              else {"type": t, "div16": n in hint16} for n, t in sig.items()}
    sig, const, attrs = specialise(fn, values, specialize=True)
    options = {"num_warps": num_warps or spec.num_warps, "num_stages": num_stages or spec.num_stages}
    if options["num_warps"] <= 0 or options["num_warps"] & (options["num_warps"] - 1):
        raise ExportError(f"num_warps must be a power of two, got {options['num_warps']}")
    if options["num_stages"] < 1:
        raise ExportError(f"num_stages must be at least 1, got {options['num_stages']}")
    if ptx_version is not None:
        options["ptx_version"] = int(ptx_version)
    try:
        compiled = compile_for(fn, sig, const, attrs, options, arch=arch)
    except Exception as e:  # the compiler raises many types; name the kernel and the settings
        raise ExportError(f"{spec.name}: Triton could not compile {spec.attr} for sm_{arch} with {cx} and "
                          f"{options}: {type(e).__name__}: {e}") from e
    return compiled, sig, cx, dtype, options, hint16


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def export_here(spec: KernelSpec, out_dir: str | pathlib.Path, *, dtype: str | None = None,
                constexprs: dict | None = None, num_warps: int | None = None, num_stages: int | None = None,
                arch: int = 90, max_ptx: str | None = None, driver_cuda: str | None = None,
                ptx_version: int | None = None, fallback: str = "fail", align: int = 16,
                hint16: tuple[str, ...] | list[str] = (), stem: str | None = None) -> dict:
    """Compile ``spec`` and write ``<stem>.ptx``, ``<stem>.cubin`` and ``<stem>.json`` into ``out_dir``.

    With ``max_ptx`` (or ``driver_cuda``, looked up in :data:`~kernels.export.ptx.CUDA_TO_PTX_ISA`), PTX newer
    than the driver accepts raises :class:`PtxVersionError`, unless ``fallback="cubin"``: then no PTX is written
    and the manifest prefers the cubin. Returns the manifest.
    """
    if fallback not in ("fail", "cubin"):
        raise ExportError(f"fallback must be 'fail' or 'cubin', got {fallback!r}")
    if driver_cuda is not None and max_ptx is not None:
        raise ExportError("give --max-ptx or --driver-cuda, not both")
    limit = max_ptx if max_ptx is not None else (max_isa_for_cuda(driver_cuda) if driver_cuda else None)
    compiled, sig, cx, dtype, options, hint16 = compile_kernel(
        spec, dtype=dtype, constexprs=constexprs, num_warps=num_warps, num_stages=num_stages, arch=arch,
        ptx_version=ptx_version, align=align, hint16=tuple(hint16))
    md = compiled.metadata
    ptx, cubin = compiled.asm["ptx"], compiled.asm["cubin"]
    entry, ptx_params = ptx_entry(ptx)
    params = _param_entries(spec, sig, cx, align, hint16)
    if entry != md.name or len(ptx_params) != len(params) + 2:
        raise ExportError(f"{spec.name}: Triton {triton.__version__} emitted .entry {entry} with "
                          f"{len(ptx_params)} parameters; expected {md.name} with {len(params)} + 2 scratch pointers")
    if getattr(md, "num_ctas", 1) != 1:
        raise ExportError(f"{spec.name}: num_ctas={md.num_ctas} (thread-block clusters) is not supported")
    known = set(spec.sizes) | set(cx)
    grid = list(spec.grid) + ["1"] * (3 - len(spec.grid))
    for g in grid:
        _check_names(spec, "grid", g, known)
    for r in spec.requires:
        _check_names(spec, "requirement", r, known)
    isa = ptx_isa(ptx)
    refused = None
    if limit is not None:
        what = f"a CUDA {driver_cuda} driver" if driver_cuda else f"--max-ptx {limit}"
        try:
            check_loadable(ptx, limit, what=what)
        except PtxVersionError as e:
            if fallback == "fail":
                raise
            refused = str(e)
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = stem or spec.name
    images = {"cubin": f"{stem}.cubin"}
    (out / images["cubin"]).write_bytes(cubin)
    ptx_path = out / f"{stem}.ptx"
    if refused is None:
        images["ptx"] = ptx_path.name
        ptx_path.write_text(ptx)
    elif ptx_path.exists():
        ptx_path.unlink()
    warps = md.num_warps
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kernel": spec.name,
        "entry": md.name,
        "source": f"{spec.module.replace('.', '/')}.py::{spec.attr}",
        "doc": spec.doc,
        "triton_version": triton.__version__,
        "target": {"backend": "cuda", "arch": arch, "warp_size": md.warp_size, "ptx_target": ptx_target(ptx)},
        "ptx_isa": isa,
        "max_ptx_isa": limit,
        "driver_cuda": driver_cuda,
        "ptx_refused": refused,
        "images": images,
        "prefer": "ptx" if refused is None else "cubin",
        "sha256": {"cubin": _sha(cubin), **({"ptx": _sha(ptx.encode())} if refused is None else {})},
        "dtype": dtype,
        "num_warps": warps,
        "num_stages": md.num_stages,
        "threads_per_block": md.warp_size * warps,
        "shared_bytes": md.shared,
        "constexprs": {k: cx[k] for k, t in sig.items() if t == "constexpr"},
        "sizes": list(spec.sizes),
        "grid": grid,
        # each condition once (four strides may share one value expression, `K`)
        "requires": list(dict.fromkeys([*spec.requires, *(f"({p['value']}) % 16 == 0" for p in params
                                                          if p.get("multiple_of"))])),
        "params": params,
        "scratch": [
            {"name": "global_scratch", "bytes_per_program": md.global_scratch_size,
             "align": md.global_scratch_align},
            {"name": "profile_scratch", "bytes_per_program": md.profile_scratch_size,
             "align": md.profile_scratch_align},
        ],
    }
    (out / f"{stem}.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest
