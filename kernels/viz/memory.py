"""Lesson 01: the L2 cliff (bandwidth against working-set size) and coalescing (what one warp's loads fetch).

Both plot bandwidths measured on the learner's GPU (``kernels.viz.measure`` or the lesson's own timings), or,
with none given, the H200 reference numbers, labelled as such.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
from matplotlib.patches import Rectangle

from .measure import reference
from .view import Choice, View

__all__ = ["WorkingSetView", "working_set_view", "CoalescingView", "coalescing_view"]

_SECTOR = 32  # bytes: the unit a global load fetches from L2/HBM
_LINE = 128  # bytes: one cache line, four sectors


def _mib(b: float) -> str:
    if b >= 2**30:
        return f"{b / 2**30:.3g} GiB"
    return f"{b / 2**20:.3g} MiB" if b >= 2**20 else f"{b / 2**10:.3g} KiB"


def _tbs(bw: float) -> str:
    return f"{bw / 1e12:.2f} TB/s" if bw >= 1e11 else f"{bw / 1e9:.1f} GB/s"


def _series(measured: dict | None, ref: dict, ref_key: str, key: str, noun: str) -> tuple[list[int], list[float]]:
    """``(measured[key], measured["bandwidth"])``, or the reference's ``ref_key`` series when nothing was measured;
    the two must be as long as each other (``noun`` names ``key``'s values in the error)."""
    data = measured if measured is not None else ref.get(ref_key, {})
    xs = [int(x) for x in data.get(key, [])]
    bw = [float(b) for b in data.get("bandwidth", [])]
    if len(xs) != len(bw):
        raise ValueError(f"measured[{key!r}] has {len(xs)} {noun} but 'bandwidth' has {len(bw)}")
    return xs, bw


class WorkingSetView(View):
    name = "working_set_view"
    figsize = (9.0, 4.0)

    def __init__(self, measured: dict | None = None, *, copy_bandwidth: float | None = None,
                 l2_bytes: int | None = None, label: str | None = None):
        ref = reference()
        self.sizes, self.bw = _series(measured, ref, "working_set", "bytes", "sizes")
        src = measured if measured is not None else ref
        self.copy_bw = copy_bandwidth or src.get("copy_bandwidth") or ref["copy_bandwidth"]
        self.l2 = l2_bytes or src.get("l2_bytes") or ref["l2_bytes"]
        self.label = label or src.get("label") or ("measured" if measured is not None else ref["label"])
        grid = self.sizes or [2**p for p in range(20, 32)]
        self.grid = grid
        start = min(range(len(grid)), key=lambda i: abs(math.log2(grid[i]) - math.log2(self.l2 / 2)))
        super().__init__({"size": Choice("working set", grid[start], grid, labels=[_mib(s) for s in grid])})

    def _artists(self, fig):
        ax, bx = fig.subplots(1, 2, width_ratios=[3, 1])
        if self.sizes:
            ax.plot(self.sizes, [b / 1e12 for b in self.bw], "o-", color="#4e79a7", label="re-read bandwidth")
        ax.axvline(self.l2, color="#e15759", ls="--", label=f"L2 = {_mib(self.l2)}")
        ax.axvspan(self.l2 / 2, self.l2, color="#e15759", alpha=0.08, label="one partition … both")
        ax.axhline(self.copy_bw / 1e12, color="#59a14f", ls=":", label=f"HBM copy {_tbs(self.copy_bw)}")
        if self.sizes:
            (marker,) = ax.plot([self.grid[0]], [self.bw[0] / 1e12], "o", ms=12, color="#f28e2b", zorder=5)
        else:
            marker = ax.axvline(self.grid[0], color="#f28e2b", lw=3, alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.15 * max(self.bw + [self.copy_bw]) / 1e12)
        ax.set_xlabel("working set (bytes)")
        ax.set_ylabel("TB/s")
        ax.set_title(self.label, fontsize=9)
        ax.legend(fontsize=8, loc="upper right")
        bx.add_patch(Rectangle((0, 0), 1, 1, fill=False, lw=2, edgecolor="#e15759"))
        bar = bx.add_patch(Rectangle((0.15, 0), 0.7, 0, alpha=0.8))
        bx.set_xlim(0, 1)
        bx.set_ylim(0, 4.1)
        bx.set_xticks([])
        bx.set_ylabel("working set / L2")
        return {"marker": marker, "bar": bar, "bx": bx}

    def draw(self, fig, size):
        if getattr(self, "_art", None) is None or not fig.axes:
            self._art = self._artists(fig)
        art = self._art
        here = self.bw[self.sizes.index(size)] if size in self.sizes else None
        if here is not None:
            art["marker"].set_data([size], [here / 1e12])
        else:
            art["marker"].set_xdata([size, size])
        art["bar"].set_height(min(size / self.l2, 4.0))
        art["bar"].set_color("#f28e2b" if size <= self.l2 else "#9c755f")
        art["bx"].set_title("fits in L2?" if size <= self.l2 else "spills to HBM", fontsize=9)
        # two partitions: data every SM reads may be held in both, so only half the L2 is sure to hold it
        where = ("fits in" if size <= self.l2 / 2 else "may only partly fit in" if size <= self.l2
                 else "does not fit in")
        if here is None:
            return (f"working set {_mib(size)} {where} L2 ({_mib(self.l2)}). No re-read curve measured here yet: "
                    f"run kernels.viz.measure.working_set() on a GPU and pass it in. [{self.label}]")
        return (f"working set {_mib(size)} {where} L2 ({_mib(self.l2)}): re-reads run at {_tbs(here)}, "
                f"{here / self.copy_bw:.2f}x the HBM copy bandwidth ({_tbs(self.copy_bw)}). [{self.label}]")


class CoalescingView(View):
    name = "coalescing_view"
    figsize = (9.5, 4.0)

    def __init__(self, measured: dict | None = None, *, itemsize: int = 4, label: str | None = None):
        ref = reference()
        self.strides, self.bw = _series(measured, ref, "strided", "stride", "values")
        self.itemsize = itemsize
        self.label = label or (measured or {}).get("label") or (ref["label"] if measured is None else "measured")
        self.options = self.strides or [1, 2, 4, 8, 16, 32]
        self.per_row = 512
        super().__init__({"stride": Choice("stride (elements)", self.options[0], self.options)})

    def _artists(self, fig):
        """A byte map of memory as one image (a patch per sector would cost a redraw hundreds of artists), and
        the measured bars; a stride change only repaints them."""
        from matplotlib.colors import ListedColormap

        ax, bx = fig.subplots(1, 2, width_ratios=[2.2, 1])
        rows = -(-32 * max(self.options) * self.itemsize // self.per_row)
        image = ax.imshow(np.zeros((rows, self.per_row)), cmap=ListedColormap(["#eeeeee", "#f28e2b", "#08519c"]),
                          vmin=0, vmax=2, aspect="auto", interpolation="nearest",
                          extent=(0, self.per_row, rows - 0.5, -0.5))
        ax.set_xticks([0, 128, 256, 384, 512])
        ax.set_yticks([])
        ax.set_ylabel(f"{self.per_row} B rows")
        ax.set_xlabel("byte within a row (orange: the 32 B sectors fetched, blue: the bytes used)")
        bars = None
        if self.bw:
            bars = bx.bar([str(s) for s in self.strides], [b / 1e12 for b in self.bw], color="#4e79a7")
            bx.set_xlabel("stride")
            bx.set_ylabel("useful TB/s")
            bx.set_title(textwrap.fill(self.label, 40), fontsize=8)
        else:
            bx.text(0.5, 0.5, "no strided timings\nmeasured here", ha="center", va="center")
            bx.set_axis_off()
        return {"ax": ax, "image": image, "bars": bars, "rows": rows}

    def draw(self, fig, stride):
        if getattr(self, "_art", None) is None or not fig.axes:
            self._art = self._artists(fig)
        art = self._art
        addr = np.arange(32) * stride * self.itemsize  # bytes from the warp's first element
        sectors = np.unique(addr // _SECTOR)
        bytemap = np.zeros(art["rows"] * self.per_row)
        for sct in sectors:
            bytemap[sct * _SECTOR:(sct + 1) * _SECTOR] = 1
        for a in addr:
            bytemap[a:a + self.itemsize] = 2
        art["image"].set_data(bytemap.reshape(art["rows"], self.per_row))
        art["ax"].set_title(f"one warp, 32 lanes, stride {stride}: {sectors.size} sectors fetched", fontsize=9)
        if self.bw:
            i = self.strides.index(stride)
            for j, bar in enumerate(art["bars"]):
                bar.set_color("#f28e2b" if j == i else "#4e79a7")
            meas = (f"measured {_tbs(self.bw[i])} useful bandwidth, {self.bw[i] / self.bw[0]:.2f}x of stride "
                    f"{self.strides[0]}")
        else:
            meas = "no timings measured here: run kernels.viz.measure.strided() on a GPU and pass it in"
        useful = 32 * self.itemsize
        fetched = sectors.size * _SECTOR
        return (f"stride {stride}: 32 lanes use {useful} B but fetch {sectors.size} sectors = {fetched} B "
                f"({useful / fetched:.0%} of the bytes moved are used). {meas}. [{self.label}]")


def working_set_view(measured: dict | None = None, *, copy_bandwidth: float | None = None,
                     l2_bytes: int | None = None, label: str | None = None) -> WorkingSetView:
    """The L2 cliff (lesson 01). ``measured = {"bytes": [...], "bandwidth": [... bytes/s]}`` from the lesson's
    timings or :func:`kernels.viz.measure.working_set`; ``None``: the labelled H200 reference. Control: ``size``."""
    return WorkingSetView(measured, copy_bandwidth=copy_bandwidth, l2_bytes=l2_bytes, label=label)


def coalescing_view(measured: dict | None = None, *, itemsize: int = 4, label: str | None = None) -> CoalescingView:
    """Coalescing (lesson 01): the sectors one warp's strided load fetches, beside measured useful bandwidth per
    stride, ``measured = {"stride": [...], "bandwidth": [...]}`` (``None``: the H200 reference). Control:
    ``stride``."""
    return CoalescingView(measured, itemsize=itemsize, label=label)
