"""Lesson 06: an autotuning run as a scatter, configuration against time, with the hardware floor beneath it.

``autotune_scatter(rows, floor_ms)`` takes rows ``{"config": {...}, "ms": float | None}`` (from
:func:`kernels.profile.measure.sweep` or ``autotune``; ``None``: did not run) and plots each configuration's time
against the parameter chosen, the winner marked and the floor drawn. Without a GPU, :func:`model_rows` gives each
configuration's floor from the no-cache traffic model instead, labelled as a model.
"""

from __future__ import annotations

import math

from .view import Slider, Toggle, View

__all__ = ["AutotuneScatter", "autotune_scatter", "model_rows"]

_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")


def model_rows(configs: list[dict], M: int, N: int, K: int, *, itemsize: int = 2, bandwidth: float = 4.26e12,
               rate: float = 989e12) -> list[dict]:
    """Each configuration's floor in ms: its no-cache traffic (a read once per tile column, b once per tile row,
    C written once) at full bandwidth, or its FLOPs at full rate, whichever is longer. A model, not a time."""
    out = []
    for cfg in configs:
        traffic = itemsize * (math.ceil(N / cfg["BLOCK_N"]) * M * K + math.ceil(M / cfg["BLOCK_M"]) * K * N + M * N)
        out.append({"config": dict(cfg), "ms": 1e3 * max(traffic / bandwidth, 2 * M * N * K / rate)})
    return out


class AutotuneScatter(View):
    name = "autotune_scatter"
    figsize = (9.0, 4.4)
    margins = dict(left=0.09, right=0.98, bottom=0.13, top=0.86)

    def __init__(self, rows: list[dict], floor_ms: float | None = None, *, label: str = "measured"):
        self.rows = [r for r in rows if r.get("ms") is not None and math.isfinite(r["ms"])]
        self.failed = [r for r in rows if r not in self.rows]
        if not self.rows:
            raise ValueError("no configuration has a time to plot")
        self.floor_ms, self.label = floor_ms, label
        keys = [k for k in _KEYS if any(k in r["config"] for r in self.rows)] or list(self.rows[0]["config"])
        varied = [k for k in keys if len({r["config"].get(k) for r in self.rows}) > 1] or keys
        self.order = sorted(range(len(self.rows)), key=lambda i: self.rows[i]["ms"])
        super().__init__({"x": Toggle("x axis", varied[0], keys + ["rank"]),
                          "pick": Slider("configuration (by time)", 0, 0, len(self.rows) - 1)})

    def draw(self, fig, x, pick):
        fig.clear()
        ax = fig.subplots()
        ms = [r["ms"] for r in self.rows]
        if x == "rank":
            xs = [self.order.index(i) for i in range(len(self.rows))]
        else:
            xs = [r["config"].get(x, 0) for r in self.rows]
        chosen = self.order[pick]
        best = self.order[0]
        ax.scatter(xs, ms, s=28, color="#4e79a7", alpha=0.8, label=f"configurations ({self.label})")
        ax.scatter([xs[best]], [ms[best]], s=120, marker="*", color="#59a14f", zorder=3, label="winner")
        ax.scatter([xs[chosen]], [ms[chosen]], s=90, facecolors="none", edgecolors="#e15759", linewidths=2, zorder=4,
                   label="selected")
        short = " ".join(f"{k.replace('BLOCK_', 'B').replace('num_', '')}={v}"
                         for k, v in self.rows[chosen]["config"].items())
        ax.annotate(f"#{pick + 1}: {short}\n{ms[chosen]:.3f} ms", (xs[chosen], ms[chosen]), xytext=(0.02, 0.06),
                    textcoords="axes fraction", fontsize=8, color="#e15759",
                    arrowprops=dict(arrowstyle="->", color="#e15759", lw=0.8))
        if self.floor_ms:
            ax.axhline(self.floor_ms, color="#b07aa1", ls="--", lw=1.2, label=f"floor {self.floor_ms:.3f} ms")
        if x != "rank" and len(set(xs)) > 1 and min(xs) > 0 and max(xs) / min(xs) >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(x, fontsize=8)
        ax.set_ylabel("ms (median)", fontsize=8)
        ax.set_ylim(0, max(ms) * 1.1)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="upper right")
        ax.set_title(f"{len(self.rows)} configurations ({self.label}); {len(self.failed)} did not run", fontsize=9)
        cfg = ", ".join(f"{k}={v}" for k, v in self.rows[chosen]["config"].items())
        ratio = ms[chosen] / ms[best]
        floor = f", {ms[chosen] / self.floor_ms:.2f}x the floor" if self.floor_ms else ""
        return (f"#{pick + 1}: {cfg}: {ms[chosen]:.4f} ms, {ratio:.2f}x the winner{floor}. Winner: "
                + ", ".join(f"{k}={v}" for k, v in self.rows[best]["config"].items()))


def autotune_scatter(rows: list[dict], floor_ms: float | None = None, *, label: str = "measured") -> AutotuneScatter:
    """Autotune scatter (lesson 06). Controls: ``x`` (the parameter on the x axis, or ``"rank"``), ``pick``
    (a configuration, fastest first)."""
    return AutotuneScatter(rows, floor_ms, label=label)
