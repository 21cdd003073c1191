"""On a GPU the graded code is the compiled code: a student's kernel crosses from its sandbox as a cubin.

Compiling a Triton kernel runs its Python (the decorator, the module, whatever the compiler calls at compile
time), so it happens in the sandbox. What comes back is machine code and a few numbers. The grader's side never
imports the student's source: it launches the cubin through the package's own driver-API launcher
(:class:`kernels.export.launch.Launcher`), on buffers it allocated and poisoned, and times it with its own events.

The steps, split across processes:

- :func:`kernel_params` reads the kernel's parameters from its source text with :mod:`ast` (names, which are
  ``tl.constexpr``, literal defaults, ``do_not_specialize`` and ``do_not_specialize_on_alignment``); nothing of it
  is executed;
- :class:`CubinKernel` stands in for the kernel in the exercise's own ``run``: ``kernel[grid](*args)`` binds the
  arguments as Triton's JIT does (:func:`specialize`: constexprs, ``num_warps``, and each other argument by
  :func:`kernels.compile.specialise_arg`, the rule the package's compiles use), asks for that specialisation's
  cubin once (``compiler(spec)``) and launches it;
- :func:`compile_spec` is the sandbox's half: ``triton.compile`` for the GPU's architecture, returning the cubin
  and :func:`metadata`;
- :func:`check_reply` is what the grader applies to what the sandbox sends back: sizes capped, every field typed.
"""

from __future__ import annotations

import ast
import hashlib
import re

import torch

from ..compile import SignatureError, specialise_arg

__all__ = ["CubinError", "kernel_params", "specialize", "encode_value", "decode_value", "compile_spec", "metadata",
           "check_reply", "manifest", "CubinKernel", "MAX_CUBIN_BYTES"]

#: The largest cubin accepted from the sandbox (a course kernel's is tens of KiB).
MAX_CUBIN_BYTES = 4 << 20
_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion")
_SCALARS = {"i32", "i64", "u32", "u64", "fp32", "fp64", "u1"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,200}")
_MISSING = object()


class CubinError(RuntimeError):
    """A launch the cubin path cannot make, or a reply from the sandbox that is not a usable cubin."""


# ---- the kernel's parameters, from its source --------------------------------------------------------------

def kernel_params(text: str, entry: str) -> dict:
    """``{"params": [{"name", "constexpr", "default"?, "specialize", "align"}], "name": entry}`` for the
    ``@triton.jit`` function ``entry`` of ``text``, read with :mod:`ast` (a default must be a literal; provenance
    refuses others)."""
    tree = ast.parse(text)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry), None)
    if fn is None:
        raise CubinError(f"no function {entry!r} in the kernel's source")
    no_spec: set = set()
    no_align: set = set()
    for dec in fn.decorator_list:
        if isinstance(dec, ast.Call):
            for kw in dec.keywords:
                if kw.arg in ("do_not_specialize", "do_not_specialize_on_alignment"):
                    try:
                        (no_spec if kw.arg == "do_not_specialize" else no_align).update(ast.literal_eval(kw.value))
                    except ValueError:
                        pass
    a = fn.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
        raise CubinError(f"{entry} takes *args, **kwargs or keyword-only parameters, which a kernel cannot")
    defaults = [_MISSING] * (len(a.args) - len(a.defaults)) + list(a.defaults)
    params = []
    for i, (arg, d) in enumerate(zip(a.args, defaults)):
        ann = arg.annotation
        text_ann = ann.value if isinstance(ann, ast.Constant) and isinstance(ann.value, str) else \
            (ast.unparse(ann) if ann is not None else "")
        p = {"name": arg.arg, "constexpr": "constexpr" in text_ann,
             "specialize": i not in no_spec and arg.arg not in no_spec,
             "align": i not in no_align and arg.arg not in no_align}
        if d is not _MISSING:
            try:
                p["default"] = ast.literal_eval(d)
            except ValueError:
                raise CubinError(f"{entry}: the default of {arg.arg} is not a literal") from None
        params.append(p)
    return {"name": entry, "params": params}


# ---- binding a launch as Triton's JIT does -------------------------------------------------------------------

def encode_value(v):
    """A constexpr's value as JSON: numbers, strings, None, and Triton dtypes as ``{"tl_dtype": name}``."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    name = getattr(v, "name", None)
    if type(v).__name__ == "dtype" and isinstance(name, str):
        return {"tl_dtype": name}
    if type(v).__name__ == "constexpr":
        return encode_value(v.value)
    raise CubinError(f"a constexpr of type {type(v).__name__} cannot be sent to the compiler")


def decode_value(v):
    if isinstance(v, dict) and set(v) == {"tl_dtype"}:
        import triton.language as tl

        return tl.dtype(str(v["tl_dtype"]))
    return v


def specialize(params: dict, args: tuple, kwargs: dict, arch: int = 90) -> dict:
    """Bind a launch ``kernel[grid](*args, **kwargs)`` to the kernel's parameters and describe its
    specialisation: ``{"signature", "constexprs", "attrs", "options", "arch", "key"}`` (JSON) plus ``"bound"``
    (name -> value, for a grid function) and ``"runtime"`` (the names of the parameters the cubin takes, in order).
    """
    plist = params["params"]
    names = [p["name"] for p in plist]
    options = {k: kwargs[k] for k in _OPTIONS if k in kwargs}
    if len(args) > len(names):
        raise CubinError(f"{params['name']} takes {len(names)} arguments, the launch passes {len(args)}")
    values = dict(zip(names, args))
    for k, v in kwargs.items():
        if k in _OPTIONS:
            continue
        if k not in names:
            raise CubinError(f"the launch passes {k}=, but the kernel has no parameter {k!r} (it has: "
                             f"{', '.join(names)})")
        if k in values:
            raise CubinError(f"{params['name']}: {k} given twice")
        values[k] = v
    for p in plist:
        if p["name"] not in values:
            if "default" not in p:
                raise CubinError(f"the kernel's parameters {', '.join(names)} do not match the documented launch "
                                 f"(nothing is passed for {p['name']!r})")
            values[p["name"]] = p["default"]
    sig, const, attrs, runtime = {}, {}, {}, []
    for p in plist:
        v = values[p["name"]]
        if p["constexpr"]:
            sig[p["name"]], const[p["name"]] = "constexpr", encode_value(v)
            continue
        try:
            t, div16, c = specialise_arg(v, specialize=p["specialize"], align=p.get("align", True))
        except SignatureError as e:
            raise CubinError(f"{params['name']}: {p['name']}: {e}") from None
        sig[p["name"]] = t
        if t == "constexpr":
            const[p["name"]] = encode_value(c)
            continue
        if div16:
            attrs[p["name"]] = [["tt.divisibility", 16]]
        runtime.append(p["name"])
    for k, v in options.items():
        if k == "enable_fp_fusion" and not isinstance(v, bool) or k != "enable_fp_fusion" and v is not None \
                and (isinstance(v, bool) or not isinstance(v, int)):
            raise CubinError(f"{k}={v!r} is not {'True or False' if k == 'enable_fp_fusion' else 'an integer'}")
    spec = {"signature": sig, "constexprs": const, "attrs": attrs, "options": options, "arch": int(arch)}
    spec["key"] = hashlib.sha256(repr(sorted((k, repr(v)) for k, v in spec.items())).encode()).hexdigest()[:32]
    spec["bound"], spec["runtime"] = values, runtime
    return spec


def wire_spec(spec: dict) -> dict:
    """What of a specialisation crosses to the compiler (no tensors, no live values)."""
    return {k: spec[k] for k in ("signature", "constexprs", "attrs", "options", "arch", "key")}


# ---- the sandbox's half: compiling -------------------------------------------------------------------------

def compile_spec(jit_fn, spec: dict):
    """Compile ``jit_fn`` (a non-interpreted ``JITFunction``) for ``spec``; return the ``CompiledKernel``.
    Raises ``CheckFailed`` with the compiler's reason."""
    from .provenance import aot_compile
    from .spec import CheckFailed

    const = {k: decode_value(v) for k, v in spec["constexprs"].items()}
    # a specialisation names its hints by parameter (JSON has no tuple keys); triton.compile finds an argument's
    # hints by its path, ``(index,)`` in the signature's order: handed names, it silently compiles with none (no
    # vector loads, no asynchronous copies)
    names = list(spec["signature"])
    attrs = {}
    for k, v in (spec.get("attrs") or {}).items():
        if k not in names:
            raise CheckFailed(f"the specialisation gives hints for {k!r}, which is not a parameter of the kernel")
        attrs[(names.index(k),)] = [list(a) for a in v]
    return aot_compile(jit_fn, dict(spec["signature"]), const, dict(spec.get("options") or {}), attrs,
                           arch=int(spec.get("arch", 90)))


def metadata(compiled) -> dict:
    """The numbers a launch needs from a ``CompiledKernel``."""
    md = compiled.metadata
    return {"name": md.name, "num_warps": int(md.num_warps), "num_ctas": int(md.num_ctas), "shared": int(md.shared),
            "global_scratch_size": int(md.global_scratch_size), "global_scratch_align": int(md.global_scratch_align),
            "profile_scratch_size": int(getattr(md, "profile_scratch_size", 0) or 0),
            "profile_scratch_align": int(getattr(md, "profile_scratch_align", 1) or 1),
            "launch_cooperative_grid": bool(md.launch_cooperative_grid), "launch_pdl": bool(md.launch_pdl),
            "tmem_size": int(getattr(md, "tmem_size", 0) or 0), "triton_version": str(md.triton_version)}


_META_INTS = {"num_warps": (1, 32), "num_ctas": (1, 1), "shared": (0, 228 << 10), "global_scratch_size": (0, 1 << 20),
              "global_scratch_align": (1, 4096), "profile_scratch_size": (0, 1 << 20),
              "profile_scratch_align": (1, 4096), "tmem_size": (0, 0)}


def check_reply(reply: dict) -> tuple[bytes, dict]:
    """A compile reply from the sandbox, checked field by field: (cubin bytes, metadata); else :class:`CubinError`
    with what is wrong. Nothing in it is executed; the cubin runs only on the GPU."""
    if not isinstance(reply, dict):
        raise CubinError("the compiler's reply is not an object")
    data = reply.get("cubin")
    if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() != 1:
        raise CubinError("the compiler's reply holds no cubin")
    if not 0 < data.numel() <= MAX_CUBIN_BYTES:
        raise CubinError(f"the cubin is {data.numel()} bytes (at most {MAX_CUBIN_BYTES} are accepted)")
    blob = data.numpy().tobytes()
    if blob[:4] != b"\x7fELF":
        raise CubinError("the compiler's reply is not a cubin (an ELF image)")
    meta = reply.get("meta")
    if not isinstance(meta, dict):
        raise CubinError("the compiler's reply has no metadata")
    out = {}
    for k, (lo, hi) in _META_INTS.items():
        v = meta.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise CubinError(f"the cubin's metadata {k}={v!r} is not an integer in {lo}..{hi}")
        out[k] = v
    for k in ("launch_cooperative_grid", "launch_pdl"):
        if meta.get(k) not in (False, None):
            raise CubinError(f"the cubin asks for {k}, which the grader's launcher does not do")
    name = meta.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise CubinError(f"the cubin's entry name {str(name)[:80]!r} is not an identifier")
    out["name"] = name
    out["triton_version"] = str(meta.get("triton_version", ""))[:40]
    return blob, out


# ---- the grader's half: launching --------------------------------------------------------------------------

def manifest(kernel: str, spec: dict, meta: dict) -> dict:
    """A launcher manifest (:mod:`kernels.export.manifest`) for one compiled specialisation: the runtime
    parameters in order, each pointer aligned as the cubin assumes, the grid given as three sizes."""
    params = []
    for name in spec["runtime"]:
        t = spec["signature"][name]
        if t.startswith("*"):
            aligned = ["tt.divisibility", 16] in (spec["attrs"].get(name) or [])
            params.append({"name": name, "kind": "pointer", "role": "inout", "dtype": t[1:], "type": "u64",
                           "align": 16 if aligned else 1, "numel": "0"})
        elif t in _SCALARS:
            params.append({"name": name, "kind": "scalar", "type": t})
        else:
            raise CubinError(f"{kernel}: parameter {name} of type {t} cannot be launched by the grader")
    scratch = [{"bytes_per_program": meta["global_scratch_size"], "align": meta["global_scratch_align"]},
               {"bytes_per_program": meta["profile_scratch_size"], "align": meta["profile_scratch_align"]}]
    return {"format": "gpu-kernel-workbook/kernel-manifest", "format_version": 1, "kernel": kernel,
            "entry": meta["name"], "triton_version": meta.get("triton_version", ""), "images": {"cubin": "memory"},
            "prefer": "cubin", "threads_per_block": 32 * meta["num_warps"], "shared_bytes": meta["shared"],
            "constexprs": {}, "sizes": ["grid_x", "grid_y", "grid_z"], "grid": ["grid_x", "grid_y", "grid_z"],
            "params": params, "scratch": scratch}


class CubinKernel:
    """Stands in for a graded kernel on the grader's side: ``kernel[grid](*args, **kwargs)`` launches the cubin
    that the sandbox compiled for exactly this specialisation (``compiler(wire_spec) -> (cubin bytes, meta)``,
    asked once per specialisation), through :class:`kernels.export.launch.Launcher`, on torch's current stream."""

    def __init__(self, params: dict, compiler, arch: int | None = None):
        self.params = params
        self.__name__ = params["name"]
        self.compiler = compiler
        self.arch = arch
        self.launchers: dict[str, object] = {}
        self.launches = 0

    def _arch(self) -> int:
        if self.arch is None:
            major, minor = torch.cuda.get_device_capability()
            self.arch = 10 * major + minor
        return self.arch

    def launcher(self, spec: dict):
        lc = self.launchers.get(spec["key"])
        if lc is None:
            from ..export.launch import Launcher

            blob, meta = self.compiler(wire_spec(spec))
            lc = self.launchers[spec["key"]] = Launcher(manifest(self.__name__, spec, meta), data=blob,
                                                        device=torch.cuda.current_device())
        return lc

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            spec = specialize(self.params, args, kwargs, self._arch())
            g = tuple(grid(spec["bound"]) if callable(grid) else grid)
            if not 1 <= len(g) <= 3:
                raise CubinError(f"a grid must have one to three dimensions, got {g!r}")
            g = tuple(int(x) for x in g + (1,) * (3 - len(g)))
            if min(g) == 0:  # Triton launches nothing on an empty grid
                return
            lc = self.launcher(spec)
            # the launcher takes the pointers first, then the scalars; it packs them in the kernel's order
            pointers, scalars = [], []
            for name in spec["runtime"]:
                v = spec["bound"][name]
                if spec["signature"][name].startswith("*"):
                    pointers.append(v.data_ptr() or self._nowhere(v.device))  # an empty tensor has no address
                else:
                    scalars.append(int(v) if isinstance(v, bool) else v)
            lc(*pointers, *scalars, sizes={"grid_x": g[0], "grid_y": g[1], "grid_z": g[2]})
            self.launches += 1

        return launch

    def _nowhere(self, device) -> int:
        """A valid, aligned address for an empty tensor's pointer (the launcher refuses 0; nothing is read)."""
        if getattr(self, "_empty", None) is None:
            self._empty = torch.empty(16, dtype=torch.uint8, device=device)
        return self._empty.data_ptr()

    def __repr__(self) -> str:
        return f"CubinKernel({self.__name__}, {len(self.launchers)} specialisation(s))"
