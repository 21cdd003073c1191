"""Lesson 00: the launch grid. Which elements each program id owns, which lanes its mask switches off, and
how many bytes each program moves, traced from a vector-add launch (the learner's own, or the demo's)."""

from __future__ import annotations

import numpy as np
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle

from .demo import vector_add_launch
from .tracer import trace
from .view import Choice, Slider, View

__all__ = ["GridExplorer", "grid_explorer"]

_PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
            "#9c755f", "#bab0ac"]


class GridExplorer(View):
    name = "grid_explorer"
    figsize = (9.0, 4.4)

    def __init__(self, launch=None, n: int = 1000, BLOCK: int = 128, max_n: int = 4096):
        self.launch = launch or vector_add_launch
        self._cache: dict = {}
        blocks = [b for b in (16, 32, 64, 128, 256, 512, 1024)]
        if BLOCK not in blocks:
            raise ValueError(f"BLOCK={BLOCK} must be a power of two in {blocks}")
        super().__init__({"n": Slider("n (elements)", n, 1, max_n),
                          "BLOCK": Choice("BLOCK", BLOCK, blocks),
                          "pid": Slider("program id", 0, 0, -(-n // BLOCK) - 1)})
        for b in blocks:  # every BLOCK at the starting n, traced now rather than on the first drag
            try:
                self.traced(n, b)
            except Exception:  # noqa: BLE001 - shown in the picture if the learner picks this BLOCK
                continue

    def traced(self, n: int, BLOCK: int):
        key = (n, BLOCK)
        if key not in self._cache:
            if len(self._cache) > 32:
                self._cache.clear()
            self._cache[key] = trace(self.launch, n=n, BLOCK=BLOCK)
        return self._cache[key][-1]

    def _artists(self, fig, la, n, BLOCK):
        """Everything that depends on (n, BLOCK); changing the program id only recolours it."""
        out = la.written()[0] if la.written() else list(la.tensors)[-1]
        stores = la.select(out, "store")
        width = min(BLOCK, 128)
        span = max([int(a.offset.max()) + 1 for a in stores] + [n])
        rows = -(-span // width)
        owner = np.full(rows * width, -1)  # program that stores each slot; -2: a masked-off lane
        for a in stores:
            owner[a.offset[a.mask & ~a.oob].ravel()] = a.pid[0]
            off = a.offset[~a.mask].ravel()
            owner[off[(off >= 0) & (off < owner.size)]] = -2
        fig.clear()
        ax, bx = fig.subplots(1, 2, width_ratios=[3.2, 1])
        image = ax.imshow(np.ones((rows, width, 4)), aspect="auto", interpolation="nearest")
        ax.set_title(f"{out}: element i at row i // {width}, column i % {width}  (grey: masked off, i >= n)",
                     fontsize=9)
        ax.set_xlabel("column")
        ax.set_ylabel("row")
        frame = ax.add_patch(Rectangle((-0.5, -0.5), width, 1, fill=False, linewidth=1.5, edgecolor="black"))
        per = la.bytes_per_program()
        programs = la.programs()
        bars = bx.bar(range(len(programs)), [per[p] for p in programs],
                      color=[_PALETTE[i % len(_PALETTE)] for i in range(len(programs))])
        if len(programs) <= 16:
            bx.set_xticks(range(len(programs)))
        bx.set_title("bytes moved per program", fontsize=9)
        bx.set_xlabel("program id")
        palette = np.array([to_rgba(_PALETTE[p % len(_PALETTE)]) for p in range(len(programs))])
        return {"key": (n, BLOCK), "out": out, "width": width, "rows": rows, "owner": owner, "image": image,
                "frame": frame, "bars": bars, "palette": palette}

    def draw(self, fig, n, BLOCK, pid):
        la = self.traced(n, BLOCK)
        programs = la.programs()
        pid = self.limit("pid", 0, len(programs) - 1)
        art = getattr(self, "_art", None)
        if art is None or art["key"] != (n, BLOCK) or not fig.axes:
            art = self._art = self._artists(fig, la, n, BLOCK)
        owner, width = art["owner"], art["width"]
        colours = np.ones((owner.size, 4))
        mine = owner >= 0
        colours[mine] = art["palette"][owner[mine]]
        colours[mine & (owner != pid), 3] = 0.28
        colours[owner == -2] = (0.55, 0.55, 0.55, 1.0 if pid == len(programs) - 1 else 0.5)
        art["image"].set_data(colours.reshape(art["rows"], width, 4))
        sel = la.select(art["out"], "store", pid=pid)
        lanes = sum(int(a.mask.size) for a in sel)
        kept = sum(int(a.mask.sum()) for a in sel)
        first = int(min(a.offset.min() for a in sel)) if sel else 0
        last = int(max(a.offset.max() for a in sel)) if sel else 0
        art["frame"].set_bounds(-0.5, first // width - 0.5, width, last // width - first // width + 1)
        for i, b in enumerate(art["bars"]):
            b.set_alpha(1.0 if i == pid else 0.3)
        per = la.bytes_per_program()
        by = la.bytes(pid)
        moved = ", ".join(f"{k} {'loads' if v['load'] else 'stores'} {v['load'] or v['store']} B"
                          for k, v in by.items() if v["load"] or v["store"])
        return (f"grid = (cdiv({n}, {BLOCK}),) = ({len(programs)},) programs; program {pid} covers offsets "
                f"{first}..{last}: its mask keeps {kept} of {lanes} lanes ({lanes - kept} masked off).\n"
                f"program {pid}: {moved}; total {per[programs[pid]]} B.  "
                f"Out-of-bounds lanes in the launch: {sum(o.offsets.size for o in la.out_of_bounds)}.")


def grid_explorer(launch=None, *, n: int = 1000, BLOCK: int = 128) -> GridExplorer:
    """Launch-grid / program-id explorer (lesson 00).

    ``launch(n=, BLOCK=)`` launches the learner's vector add on small CPU tensors (default: the demo's); the view
    traces it for every (n, BLOCK) and shows which elements each program stores, the masked-off tail lanes and
    the bytes each program moves. Controls: ``n``, ``BLOCK``, ``pid``.
    """
    return GridExplorer(launch, n=n, BLOCK=BLOCK)
