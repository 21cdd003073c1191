"""Lesson 06: one kernel as the compiler sees it, in two configurations side by side.

``ir_explorer(a, b)`` takes two :class:`kernels.profile.compiler.Compiled` (the same kernel compiled two ways, or
two kernels): the left panel counts their memory instructions by kind, space and width; the right panel lists one
stage (TTIR, TTGIR, LLVM IR, PTX, SASS) of either compile, or only the lines that change between them.
"""

from __future__ import annotations

import re

from .view import Slider, Toggle, View

__all__ = ["IrExplorer", "ir_explorer", "SHOW"]

SHOW = ("A", "B", "changed lines")
_STAGES = ("ttir", "ttgir", "llir", "ptx", "sass")
_ROWS = 34
FILTERS = ("all lines", "memory instructions")
_MEMORY = re.compile(r"\b(?:ld|st)\.(?!param)|\b(?:cp\.async|ldmatrix|stmatrix|atom|red)\."
                     r"|\b(?:LDG|STG|LDS|STS|LDL|STL|LDGSTS|LDSM|STSM|ATOMG?|RED|UTMALDG|UTMASTG)\b"
                     r"|\bload\b|\bstore\b|async_copy|local_load|local_store")


def _label(c) -> str:
    cfg = c.config
    keys = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
    short = " ".join(f"{k.replace('BLOCK_', 'B').replace('num_', '')}={cfg[k]}" for k in keys if k in cfg)
    return f"{c.name.strip('_')} {short}".strip()


class IrExplorer(View):
    name = "ir_explorer"
    figsize = (11.0, 5.2)
    margins = dict(left=0.16, right=0.99, bottom=0.08, top=0.9, wspace=0.08)

    def __init__(self, a, b=None):
        self.a, self.b = a, b if b is not None else a
        stages = [s for s in _STAGES if self.a.stages.get(s) or self.b.stages.get(s)]
        if not stages:
            raise ValueError("the compiles hold no stage text")
        self._lines: dict = {}
        first = "ptx" if "ptx" in stages else stages[0]
        super().__init__({"stage": Toggle("stage", first, stages), "show": Toggle("show", "changed lines", SHOW),
                          "only": Toggle("lines", FILTERS[1], FILTERS), "page": Slider("page", 0, 0, 0)})

    def lines(self, stage: str, show: str, only: str = FILTERS[0]) -> list[str]:
        if only != FILTERS[0]:
            return [ln for ln in self.lines(stage, show) if _MEMORY.search(ln)] or ["(no memory instructions)"]
        key = (stage, show)
        if key not in self._lines:
            if show == "changed lines":
                from ..profile.compiler import diff

                body = diff(self.a, self.b, stage)[2:]
                self._lines[key] = [ln.expandtabs(4) for ln in body if not ln.startswith("@@")] or ["(no line changes)"]
            else:
                c = self.a if show == "A" else self.b
                self._lines[key] = [ln.rstrip().expandtabs(4) for ln in c.stages.get(stage, "").splitlines()
                                    if ln.strip()]
        return self._lines[key]

    def draw(self, fig, stage, show, only, page):
        text = self.lines(stage, show, only)
        pages = max(1, -(-len(text) // _ROWS))
        page = self.limit("page", 0, pages - 1)
        fig.clear()
        ax, tx = fig.subplots(1, 2, width_ratios=[1, 2.1])
        rows = {}
        for which, c in (("A", self.a), ("B", self.b)):
            for r in c.table():
                rows.setdefault((r["kind"], r["space"], r["bits"]), {})[which] = r["count"]
        keys = sorted(rows, key=lambda k: (k[1], k[0], k[2]))[::-1]
        ys = range(len(keys))
        ax.barh([y + 0.2 for y in ys], [rows[k].get("A", 0) for k in keys], height=0.4, color="#4e79a7", label="A")
        ax.barh([y - 0.2 for y in ys], [rows[k].get("B", 0) for k in keys], height=0.4, color="#f28e2b", label="B")
        ax.set_yticks(list(ys), [f"{k[0]} {k[1]} {k[2]}-bit" if k[2] else f"{k[0]} {k[1]}" for k in keys],
                     fontsize=7)
        ax.set_title("memory instructions in the PTX\n(per thread: bits moved by one instruction)", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.legend(fontsize=7, loc="lower right")
        tx.set_axis_off()
        chunk = text[page * _ROWS:(page + 1) * _ROWS]
        for i, ln in enumerate(chunk):
            color = {"+": "#c85a00", "-": "#2b5d8a"}.get(ln[:1], "black") if show == "changed lines" else "black"
            tx.text(0, 1 - i / _ROWS, ln[:118], family="monospace", fontsize=6.6, va="top", color=color)
        what = {"A": _label(self.a), "B": _label(self.b), "changed lines": "lines only in A (-) or only in B (+)"}
        tx.set_title(f"{stage.upper()}: {what[show]}, page {page + 1}/{pages}", fontsize=8, loc="left")

        def res(c):
            regs = "?" if c.registers is None else c.registers
            spills = "?" if c.spills is None else f"{c.spills} B"
            return f"{regs} registers/thread, spills {spills}, shared {c.shared} B, {c.threads} threads"

        return f"A = {_label(self.a)}: {res(self.a)}\nB = {_label(self.b)}: {res(self.b)}"


def ir_explorer(a, b=None) -> IrExplorer:
    """IR explorer (lesson 06). ``a``, ``b``: compiles from :func:`kernels.profile.compiler.compile_kernel`.
    Controls: ``stage``, ``show`` (``"A"``, ``"B"``, ``"changed lines"``), ``only`` (all lines or memory
    instructions), ``page``."""
    return IrExplorer(a, b)
