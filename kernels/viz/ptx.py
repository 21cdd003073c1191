"""Lesson 05: read a kernel's PTX. ``parse_ptx`` finds the entry's parameters (with the two scratch pointers
Triton appends), threads per block, shared memory, and every instruction with its memory space and the kernel
source line it came from; ``ptx_explorer`` lets the learner step through one category at a time."""

from __future__ import annotations

import pathlib
import re
from collections import Counter
from dataclasses import dataclass, field

from .view import Slider, Toggle, View

__all__ = ["Ptx", "Instruction", "parse_ptx", "sample_ptx", "PtxExplorer", "ptx_explorer", "CATEGORIES"]

#: Instruction categories, in the order the explorer shows them.
CATEGORIES = ("global memory", "shared memory", "tensor cores", "parameters", "synchronisation", "other")


@dataclass
class Instruction:
    line: int  # 1-based line in the PTX text
    opcode: str
    text: str
    category: str
    source_line: int | None  # the kernel source line (from the last .loc)


@dataclass
class Ptx:
    text: str
    version: str | None
    target: str | None
    entry: str | None
    params: list[tuple[str, str]]  # (type, name), in order
    threads: int | None  # .reqntid / .maxntid
    shared: list[str]  # shared-memory declarations
    instructions: list[Instruction] = field(default_factory=list)

    def counts(self) -> Counter:
        return Counter(i.category for i in self.instructions)

    def opcodes(self, category: str) -> Counter:
        return Counter(i.opcode for i in self.instructions if i.category == category)

    def select(self, category: str) -> list[Instruction]:
        return [i for i in self.instructions if i.category == category]


_OPCODE = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][a-z0-9_.]*)")


def _category(op: str) -> str:
    if op.startswith(("wgmma.mma_async", "mma.", "tcgen05.mma")):
        return "tensor cores"
    if op.startswith(("ld.param", "st.param")):
        return "parameters"
    if op.startswith(("ld.global", "st.global", "atom.global", "red.global", "prefetch.global", "cp.async.bulk",
                      "cp.async.ca", "cp.async.cg", "ld.volatile.global", "cp.reduce.async.bulk")):
        return "global memory"
    if op.startswith(("ld.shared", "st.shared", "ldmatrix", "stmatrix", "atom.shared", "red.shared")):
        return "shared memory"
    if op.startswith(("bar.", "barrier", "fence", "membar", "mbarrier", "wgmma.fence", "wgmma.commit",
                      "wgmma.wait", "cp.async.commit", "cp.async.wait")):
        return "synchronisation"
    return "other"


def parse_ptx(ptx) -> Ptx:
    """Parse PTX text (or a compiled kernel with ``.asm["ptx"]``, or a path to a ``.ptx`` file)."""
    text = _text(ptx)
    version = re.search(r"^\s*\.version\s+(\S+)", text, re.M)
    target = re.search(r"^\s*\.target\s+(\S+)", text, re.M)
    entry = re.search(r"\.entry\s+(\w+)\s*\(", text)
    if entry is None:
        raise ValueError("no .entry found: this does not look like a kernel's PTX")
    close = text.index(")", entry.end())
    params = []
    for piece in text[entry.end():close].split(","):
        words = piece.split()
        if ".param" in words:
            kind = "ptr" if ".ptr" in words else words[words.index(".param") + 1].lstrip(".")
            params.append((kind, words[-1]))
    threads = re.search(r"\.(?:reqntid|maxntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", text)
    nthreads = None
    if threads:
        nthreads = 1
        for g in threads.groups():
            nthreads *= int(g) if g else 1
    shared = [ln.strip() for ln in text.splitlines() if ".shared" in ln and ln.strip().startswith((".extern",
                                                                                                  ".shared"))]
    body = text.index("{", close)
    insts = []
    src = None
    for no, ln in enumerate(text.splitlines(), start=1):
        if no <= text.count("\n", 0, body) + 1:
            continue
        s = ln.strip()
        if s.startswith(".loc"):
            parts = s.split()
            src = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() and int(parts[2]) > 0 else src
            continue
        if not s or s.startswith(("//", ".", "{", "}", "$")):
            continue
        m = _OPCODE.match(s)
        if m:
            op = m.group(1)
            insts.append(Instruction(no, op, s.split("//")[0].strip(), _category(op), src))
    return Ptx(text, version and version.group(1), target and target.group(1), entry.group(1), params, nthreads,
               shared, insts)


def _text(ptx) -> str:
    if hasattr(ptx, "asm"):
        return ptx.asm["ptx"]
    if isinstance(ptx, pathlib.Path) or (isinstance(ptx, str) and "\n" not in ptx and ptx.endswith(".ptx")):
        return pathlib.Path(ptx).read_text()
    if isinstance(ptx, bytes):
        return ptx.decode()
    if not isinstance(ptx, str):
        raise TypeError(f"expected PTX text, a .ptx path or a compiled kernel; got {type(ptx).__name__}")
    return ptx


_SAMPLE: dict[int, str] = {}


def sample_ptx(arch: int = 90) -> str:
    """PTX of a tiled fp16 matmul compiled ahead of time for ``sm_{arch}`` (no GPU needed; a few seconds)."""
    if arch not in _SAMPLE:
        from ..compile import run_compiled

        res = run_compiled("kernels.viz.sample_kernel", [str(arch)], timeout=300)
        if res.returncode:
            raise RuntimeError(f"compiling the sample kernel failed:\n{res.stderr[-2000:]}")
        _SAMPLE[arch] = res.stdout
    return _SAMPLE[arch]


class PtxExplorer(View):
    name = "ptx_explorer"
    figsize = (10.0, 4.6)
    margins = dict(left=0.13, right=0.99, bottom=0.1, top=0.88, wspace=0.1)

    def __init__(self, ptx, *, names: list[str] | None = None, context: int = 6):
        self.ptx = parse_ptx(ptx)
        self.names = names
        self.context = context
        counts = self.ptx.counts()
        first = next((c for c in ("tensor cores", "global memory") if counts.get(c)), CATEGORIES[0])
        super().__init__({"category": Toggle("show", first, list(CATEGORIES)),
                          "k": Slider("occurrence", 0, 0, max(0, counts.get(first, 0) - 1))})

    def draw(self, fig, category, k):
        p = self.ptx
        sel = p.select(category)
        k = self.limit("k", 0, max(0, len(sel) - 1))
        counts = p.counts()
        cats = [c for c in CATEGORIES if c != "other"][::-1]
        if getattr(self, "_art", None) is None or not fig.axes:
            fig.clear()
            ax, tx = fig.subplots(1, 2, width_ratios=[1, 2.2])
            bars = ax.barh(cats, [counts.get(c, 0) for c in cats])
            for y, c in enumerate(cats):
                ax.text(counts.get(c, 0), y, f" {counts.get(c, 0)}", va="center", fontsize=8)
            ax.set_title(f"{p.entry}: instructions by kind\n({counts.get('other', 0)} other: arithmetic, control)",
                         fontsize=8)
            ax.tick_params(labelsize=8)
            tx.set_axis_off()
            listing = tx.text(0, 1, "", family="monospace", fontsize=7.5, va="top")
            lines = p.text.splitlines()
            code = [no for no in range(1, len(lines) + 1) if lines[no - 1].strip()
                    and not lines[no - 1].strip().startswith(("//", ".loc"))]
            self._art = {"bars": bars, "listing": listing, "lines": lines, "code": code,
                         "where": {no: j for j, no in enumerate(code)}}
        art = self._art
        for bar, c in zip(art["bars"], cats):
            bar.set_color("#f28e2b" if c == category else "#4e79a7")
        lines, code = art["lines"], art["code"]
        if sel:
            at = sel[k].line
            j = art["where"][at]
            shown = [f"{'>>' if no == at else '  '}{no:5d} {' '.join(lines[no - 1].split())[:78]}"
                     for no in code[max(0, j - self.context): j + self.context + 1]]
            art["listing"].set_text("\n".join(shown))
            ops = ", ".join(f"{o} x{n}" for o, n in p.opcodes(category).most_common(4))
            where = f" from kernel line {sel[k].source_line}" if sel[k].source_line else ""
            note = f"{category} {k + 1}/{len(sel)}: {sel[k].opcode}{where}. Most frequent: {ops}."
        else:
            art["listing"].set_text(f"no {category} instructions in this kernel")
            note = f"no {category} instructions."
        ptrs = [n for t, n in p.params if t == "ptr"]
        named = self.names or []
        declared = len(named) if named else len(p.params) - 2
        scratch = p.params[declared:] if 0 <= declared <= len(p.params) else []
        params = ", ".join(f"{t} {(named[i] if i < len(named) else n.removeprefix(p.entry + '_'))}"
                           for i, (t, n) in enumerate(p.params))
        return (f"PTX {p.version} for {p.target}, entry {p.entry}: {len(p.params)} parameters ({len(ptrs)} "
                f"pointers; the last {len(scratch)} are the scratch pointers Triton appends), "
                f"{p.threads} threads per block, shared: {'; '.join(p.shared) or 'none'}.\n"
                f"params: {params}\n{note}")


def ptx_explorer(ptx=None, *, names: list[str] | None = None) -> PtxExplorer:
    """PTX explorer (lesson 05): parameters, memory instructions by space, tensor-core instructions.

    ``ptx``: PTX text, a ``.ptx`` path, or a compiled kernel (what ``kernels.compile.compile_for`` returns);
    ``None``: the sample matmul's PTX for sm_90 (:func:`sample_ptx`). ``names``: the kernel's
    declared non-constexpr parameter names, to label the PTX parameters. Controls: ``category``, ``k``
    (which occurrence).
    """
    return PtxExplorer(sample_ptx() if ptx is None else ptx, names=names)
