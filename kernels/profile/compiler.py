"""What the compiler made of a kernel: its stages, registers, spills, shared memory and memory instructions.

``compile_kernel(kernel, args, num_warps=..., num_stages=..., BLOCK=...)`` compiles one launch of a ``@triton.jit``
kernel ahead of time for sm_90 (an H100/H200), with no GPU needed, through :mod:`kernels.compile`. ``args`` are the
launch's arguments (tensors, ints, floats), from which the signature is read and, as Triton's JIT does, what may be
assumed: a pointer 16-byte aligned, an int equal to 1 or a multiple of 16 (unless the kernel's
``do_not_specialize`` says otherwise). ``specialize=False`` assumes nothing, as an export for every size does.
Compiling and interpreting do not mix in one process, so under the interpreter the compile runs in a subprocess
(``python -m kernels.profile.compiler``).

The result, :class:`Compiled`, holds the stages (TTIR, TTGIR with its layouts, LLVM IR, PTX, and SASS from the
``cuobjdump`` that ships with Triton), registers and spills (``ptxas -v``), shared memory, and every memory
instruction of the PTX by kind, space and width. :func:`diff` compares two compiles.
"""

from __future__ import annotations

import difflib
import importlib
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field

from ..compile import SignatureError, describe, enter_compile_mode, run_compiled, specialise

__all__ = ["Compiled", "Access", "compile_kernel", "compile_many", "describe_args", "tool", "parse_accesses",
           "parse_sass_accesses", "diff", "STAGES", "CompileError"]

#: The stages in the order the compiler produces them.
STAGES = ("ttir", "ttgir", "llir", "ptx", "sass")
_SPACES = ("global", "shared", "local", "param", "const")
_OPTIONS = ("num_warps", "num_stages", "maxnreg")


class CompileError(RuntimeError):
    """The kernel did not compile; the message carries the compiler's reason."""


@dataclass(frozen=True)
class Access:
    """One kind of memory instruction: ``kind`` (load, store, async copy, atomic), ``space`` (global, shared,
    local), ``bits`` moved per thread by one instruction, ``opcode`` as written in the PTX."""

    kind: str
    space: str
    bits: int
    opcode: str


@dataclass
class Compiled:
    """One compiled specialisation. ``registers`` and ``spills`` (bytes stored + loaded by spill code) come from
    ``ptxas -v``; ``shared`` is the dynamic shared memory per program, in bytes."""

    name: str
    config: dict
    stages: dict[str, str]
    shared: int
    registers: int | None
    spill_stores: int | None
    spill_loads: int | None
    num_warps: int
    num_stages: int
    notes: list[str] = field(default_factory=list)

    @property
    def threads(self) -> int:
        return 32 * self.num_warps

    @property
    def spills(self) -> int | None:
        if self.spill_stores is None:
            return None
        return self.spill_stores + (self.spill_loads or 0)

    def accesses(self) -> Counter:
        """``Access -> count`` over the PTX's memory instructions."""
        return parse_accesses(self.stages.get("ptx", ""))

    def sass_accesses(self) -> Counter:
        """``SASS opcode -> count`` over the SASS's memory instructions (empty without ``cuobjdump``)."""
        return parse_sass_accesses(self.stages.get("sass", ""))

    def table(self) -> list[dict]:
        """Memory instructions grouped by kind, space and width: one dict per row, most frequent first."""
        rows = Counter()
        ops: dict[tuple, set] = {}
        for acc, n in self.accesses().items():
            key = (acc.kind, acc.space, acc.bits)
            rows[key] += n
            ops.setdefault(key, set()).add(acc.opcode)
        return [{"kind": k, "space": s, "bits": b, "count": n, "opcodes": sorted(ops[(k, s, b)])}
                for (k, s, b), n in rows.most_common()]

    def opcodes(self, stage: str = "ptx") -> Counter:
        """Instruction mnemonics of the PTX or SASS, counted."""
        text = self.stages.get(stage, "")
        return Counter(_ptx_opcodes(text) if stage == "ptx" else _sass_opcodes(text))

    def summary(self) -> str:
        regs = "?" if self.registers is None else str(self.registers)
        spills = "?" if self.spills is None else f"{self.spills} B"
        cfg = ", ".join(f"{k}={v}" for k, v in self.config.items())
        return (f"{self.name} [{cfg}]: {regs} registers/thread, spills {spills}, shared memory {self.shared} B, "
                f"{self.threads} threads")

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("name", "config", "stages", "shared", "registers", "spill_stores",
                                              "spill_loads", "num_warps", "num_stages", "notes")}


# ---- parsing ------------------------------------------------------------------------------------------------

_PTX_OP = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][a-z0-9_]*(?:\.[a-zA-Z0-9_:]+)*)")
_ELEM = re.compile(r"^[bsuf](8|16|32|64|128)$")


def _ptx_body(text: str) -> list[str]:
    out = []
    for ln in text.splitlines():
        s = ln.split("//")[0].strip()
        if not s or s.startswith((".", "{", "}", "$")):
            continue
        out.append(s)
    return out


def _ptx_opcodes(text: str) -> list[str]:
    return [m.group(1) for s in _ptx_body(text) if (m := _PTX_OP.match(s))]


def _access(op: str, line: str) -> Access | None:
    parts = op.split(".")
    head = parts[0]
    if op.startswith("cp.async.bulk"):
        return Access("async copy (TMA)", "global", 0, op)
    if op.startswith("cp.async") and "shared" in parts:
        size = re.search(r"\]\s*,\s*\[[^\]]*\]\s*,\s*(0x[0-9a-fA-F]+|\d+)", line)
        return Access("async copy", "global", 8 * int(size.group(1), 0) if size else 0, op)
    if head == "ldmatrix" or head == "stmatrix":
        count = next((int(p[1:]) for p in parts if re.fullmatch(r"x[124]", p)), 1)
        return Access("load" if head == "ldmatrix" else "store", "shared", 32 * count, op)
    if head not in ("ld", "st", "atom", "red"):
        return None
    space = next((p for p in parts if p in _SPACES), "generic")
    if space in ("param", "const"):
        return None
    vec = next((int(p[1:]) for p in parts if re.fullmatch(r"v[248]", p)), 1)
    elem = next((int(m.group(1)) for p in reversed(parts) if (m := _ELEM.match(p))), 0)
    kind = {"ld": "load", "st": "store"}.get(head, "atomic")
    return Access(kind, space, vec * elem, op)


def parse_accesses(ptx: str) -> Counter:
    """``Access -> count`` for every load, store, async copy and atomic in PTX text (parameters left out)."""
    out = Counter()
    for s in _ptx_body(ptx):
        m = _PTX_OP.match(s)
        if m and (acc := _access(m.group(1), s)) is not None:
            out[acc] += 1
    return out


_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
_SASS_MEM = ("LDG", "STG", "LDS", "STS", "LDL", "STL", "LDGSTS", "LDSM", "STSM", "ATOM", "ATOMG", "RED", "UTMALDG",
             "UTMASTG", "LD", "ST")


def _sass_opcodes(text: str) -> list[str]:
    return [m.group(1) for ln in text.splitlines() if (m := _SASS_LINE.search(ln))]


def parse_sass_accesses(sass: str) -> Counter:
    """``SASS opcode -> count`` for memory instructions (``LDG.E.128``, ``LDGSTS.E.BYPASS.128``, ``LDL``...)."""
    return Counter(op for op in _sass_opcodes(sass) if op.split(".")[0] in _SASS_MEM)


def _normalise(line: str) -> str:
    line = re.sub(r"%[a-z]+\d+", "%r", line)
    line = re.sub(r"\$L__\w+", "$L", line)
    line = re.sub(r"/\*[0-9a-f]+\*/", "", line)
    line = re.sub(r"\b[RPU]R?\d+\b", "R", line)
    return " ".join(line.split())


def diff(a: Compiled, b: Compiled, stage: str = "ptx", *, context: int = 0, limit: int | None = None) -> list[str]:
    """The lines of one stage that differ between two compiles (registers and labels renamed away, so what is
    left is what changed), as a unified diff."""
    def lines(c: Compiled) -> list[str]:
        text = c.stages.get(stage, "")
        body = _ptx_body(text) if stage == "ptx" else [ln for ln in text.splitlines() if ln.strip()]
        return [_normalise(ln.replace(c.name, "kernel")) for ln in body if not ln.startswith(".loc")]

    out = list(difflib.unified_diff(lines(a), lines(b), fromfile=_label(a), tofile=_label(b), n=context,
                                    lineterm=""))
    return out if limit is None else out[:limit]


def _label(c: Compiled) -> str:
    return c.name + " " + " ".join(f"{k}={v}" for k, v in c.config.items())


# ---- the tools that ship with Triton ------------------------------------------------------------------------

def tool(name: str) -> str | None:
    """Path of ``ptxas``, ``cuobjdump`` or ``nvdisasm``: Triton's bundled copy, else one on ``PATH``."""
    try:
        import triton

        bundled = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    return shutil.which(name)


_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def _resources(ptx: str, arch: str, notes: list[str]) -> tuple[int | None, int | None, int | None]:
    ptxas = tool("ptxas")
    if ptxas is None:
        notes.append("ptxas not found: registers and spills unknown (it ships with the triton wheel)")
        return None, None, None
    with tempfile.TemporaryDirectory(prefix="ptxas-") as d:
        src = pathlib.Path(d) / "k.ptx"
        src.write_text(ptx)
        proc = subprocess.run([ptxas, f"-arch={arch}", "-v", str(src), "-o", str(pathlib.Path(d) / "k.cubin")],
                              capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
    regs, spill = _PTXAS_REGS.search(text), _PTXAS_SPILL.search(text)
    if regs is None:
        notes.append(f"ptxas -v said nothing about registers: {text.strip()[-300:]}")
        return None, None, None
    return int(regs.group(1)), int(spill.group(1)) if spill else 0, int(spill.group(2)) if spill else 0


def _sass(cubin: bytes, notes: list[str]) -> str:
    cuobjdump = tool("cuobjdump")
    if cuobjdump is None:
        notes.append("cuobjdump not found: no SASS (it ships with the triton wheel)")
        return ""
    with tempfile.TemporaryDirectory(prefix="sass-") as d:
        path = pathlib.Path(d) / "k.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([cuobjdump, "-sass", str(path)], capture_output=True, text=True, timeout=300)
    if proc.returncode:
        notes.append(f"cuobjdump failed: {proc.stderr.strip()[-300:]}")
        return ""
    return "\n".join(ln.split(";")[0] + " ;" if re.search(r"/\*[0-9a-f]{4}\*/", ln) else ln
                     for ln in proc.stdout.splitlines() if not re.fullmatch(r"\s*/\* 0x[0-9a-f]+ \*/\s*", ln))


# ---- describing a launch ------------------------------------------------------------------------------------

def describe_args(args) -> list:
    """The launch's arguments as the compiler needs them: a tensor becomes ``{"ptr": dtype, "aligned": bool}``
    (16-byte aligned address), an int or float stays a number."""
    out = []
    for a in args:
        if isinstance(a, dict) and "ptr" in a:
            out.append({"ptr": a["ptr"], "aligned": bool(a.get("aligned", True))})
        elif isinstance(a, (bool, int, float)) or a is None or hasattr(a, "data_ptr"):
            out.append(describe(a))
        else:
            raise TypeError(f"cannot compile for an argument of type {type(a).__name__}: pass tensors and numbers")
    return out


def _specialise(jit_fn, described: list, constexprs: dict, specialize: bool) -> tuple[dict, dict, dict]:
    """Signature, constants and attributes as Triton's JIT would derive them from the launch."""
    runtime = [p.name for p in jit_fn.params if not p.is_constexpr]
    if len(described) != len(runtime):
        raise CompileError(f"{jit_fn.fn.__name__} takes {len(runtime)} runtime arguments "
                           f"({', '.join(runtime)}); {len(described)} given")
    try:
        return specialise(jit_fn, {**constexprs, **dict(zip(runtime, described))}, specialize=specialize)
    except SignatureError as e:
        raise CompileError(str(e)) from None


def _compile_here(source: dict, described: list, constexprs: dict, options: dict, specialize: bool,
                  detail: bool = True, arch: int = 90) -> dict:
    """Compile in this process (one whose Triton is in compiled mode); return :class:`Compiled` as a dict."""
    from ..checks.provenance import aot_compile, load
    from ..checks.spec import CheckFailed

    if "module" in source:
        jit_fn = getattr(importlib.import_module(source["module"]), source["attr"])
    else:
        from ..checks.provenance import KernelSource

        jit_fn = load(KernelSource(source["entry"], source["text"]), interpret=False)
    sig, const, attrs = _specialise(jit_fn, described, constexprs, specialize)
    try:
        compiled = aot_compile(jit_fn, sig, const, options, attrs=attrs)
    except CheckFailed as e:
        raise CompileError(str(e)) from None
    notes: list[str] = []
    asm = compiled.asm
    stages = {k: asm[k] for k in STAGES if k in asm and isinstance(asm[k], str)}
    if detail:
        regs, spill_st, spill_ld = _resources(asm["ptx"], f"sm_{arch}a", notes)
        stages["sass"] = _sass(asm["cubin"], notes) if "cubin" in asm else ""
    else:
        regs = spill_st = spill_ld = None
        notes.append("compiled without detail: no registers, spills or SASS")
    md = compiled.metadata
    config = {**{k: v for k, v in constexprs.items()}, **options}
    return Compiled(md.name, config, stages, int(md.shared), regs, spill_st, spill_ld, int(md.num_warps),
                    int(md.num_stages), notes).to_json()


def _source_of(kernel) -> dict:
    fn = getattr(kernel, "fn", None)
    if fn is None:
        raise TypeError(f"compile_kernel needs a @triton.jit kernel, got a {type(kernel).__name__}")
    if fn.__module__.startswith("_graded_"):  # rebuilt by the checks from a learner's cell: not importable by name
        return {"entry": fn.__name__, "text": pathlib.Path(sys.modules[fn.__module__].__file__).read_text()}
    if fn.__module__ != "__main__":
        return {"module": fn.__module__, "attr": fn.__name__}
    from ..checks import provenance

    glb = fn.__globals__
    cache: dict = {}

    def lookup(n):
        if n not in cache:
            cache[n] = provenance._live_binding(n, glb)
        return cache[n]

    try:
        ks = provenance._build(fn.__name__, lookup, "the kernel to compile")
    except provenance.Rejected as e:
        raise CompileError(str(e)) from None
    return {"entry": ks.entry, "text": ks.text}


_CACHE: dict[str, dict] = {}


def compile_many(jobs: list[dict], *, detail: bool = True, timeout: float = 900) -> list[Compiled]:
    """Compile several launches, each ``dict(kernel=..., args=[...], num_warps=, num_stages=, specialize=True,
    **constexprs)``; under the interpreter all of them in one subprocess. ``detail=False`` skips what takes longest
    (``ptxas -v`` for registers and spills, ``cuobjdump`` for the SASS): for shared memory and the PTX alone."""
    from ..device import INTERPRET

    requests = []
    for job in jobs:
        job = dict(job)
        kernel, args = job.pop("kernel"), job.pop("args")
        specialize = bool(job.pop("specialize", True))
        options = {k: job.pop(k) for k in _OPTIONS if k in job}
        options.setdefault("num_warps", 4)
        options.setdefault("num_stages", 3)
        requests.append({"source": _source_of(kernel), "args": describe_args(args), "constexprs": job,
                         "options": options, "specialize": specialize})
    keys = [json.dumps(r, sort_keys=True, default=str) for r in requests]
    todo = {k: dict(r, detail=detail) for r, k in zip(requests, keys)
            if k not in _CACHE or (detail and not _CACHE[k]["detail"])}
    if todo:
        if INTERPRET:
            results = _in_subprocess(list(todo.values()), timeout)
        else:
            results = [_answer(r) for r in todo.values()]
        for k, res in zip(todo, results):
            if "error" in res:
                raise CompileError(res["error"])
            _CACHE[k] = {"detail": detail, "result": res}
    return [Compiled(**_CACHE[k]["result"]) for k in keys]


def compile_kernel(kernel, args, *, num_warps: int = 4, num_stages: int = 3, specialize: bool = True,
                   detail: bool = True, **constexprs) -> Compiled:
    """Compile one launch of ``kernel`` for sm_90 (see the module's docstring)."""
    return compile_many([dict(kernel=kernel, args=list(args), num_warps=num_warps, num_stages=num_stages,
                              specialize=specialize, **constexprs)], detail=detail)[0]


def _answer(request: dict) -> dict:
    try:
        return _compile_here(request["source"], request["args"], request["constexprs"], request["options"],
                             request["specialize"], request.get("detail", True))
    except CompileError as e:
        return {"error": str(e)}


def _in_subprocess(requests: list[dict], timeout: float) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="profile-compile-") as d:
        req, out = pathlib.Path(d) / "request.json", pathlib.Path(d) / "reply.json"
        req.write_text(json.dumps(requests, default=str))
        try:
            proc = run_compiled("kernels.profile.compiler", [str(req), str(out)], paths=sys.path, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CompileError(f"compiling for sm_90 took longer than {timeout:.0f} s") from None
        if not out.exists():
            raise CompileError(f"the compile process failed (exit {proc.returncode}): "
                               f"{(proc.stderr or proc.stdout).strip()[-1500:]}")
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    enter_compile_mode()
    requests = json.loads(pathlib.Path(argv[0]).read_text())
    pathlib.Path(argv[1]).write_text(json.dumps([_answer(r) for r in requests]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
