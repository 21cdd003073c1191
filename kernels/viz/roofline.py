"""The roofline on a matplotlib axes: one memory slope, one flat roof per arithmetic unit, and measured points.

``draw_roofline(ax, bandwidth, roofs, points)`` draws ``min(rate, I · bandwidth)`` for each roof (say the bf16
tensor cores and the FP32 CUDA cores), marks each ridge point ``rate / bandwidth``, and plots each series of
``(intensity, FLOP/s)`` points. Lessons 01 and 03 call it with their own measurements.
"""

from __future__ import annotations

__all__ = ["draw_roofline"]

_ROOF_COLOURS = ("#2f2f2f", "#9c755f", "#76b7b2")
_POINT_STYLES = (("o-", "#4e79a7"), ("s", "#e15759"), ("D", "#59a14f"), ("^", "#f28e2b"), ("v", "#b07aa1"))


def draw_roofline(ax, bandwidth: float, roofs: dict[str, float], points: dict[str, list[tuple[float, float]]],
                  *, title: str = "") -> dict[str, float]:
    """Draw the roofs and points on ``ax`` (log-log); returns each roof's ridge point in FLOP/byte."""
    if bandwidth <= 0 or not roofs:
        raise ValueError("draw_roofline needs a positive bandwidth and at least one roof")
    xs = [i for series in points.values() for i, _ in series] + [r / bandwidth for r in roofs.values()]
    lo, hi = min(xs + [1.0]) / 4, max(xs + [1.0]) * 4
    grid = [lo * (hi / lo) ** (k / 200) for k in range(201)]
    ridges = {}
    for (name, rate), colour in zip(roofs.items(), _ROOF_COLOURS):
        ridge = rate / bandwidth
        ridges[name] = ridge
        ax.plot(grid, [min(rate, i * bandwidth) for i in grid], "-", color=colour,
                label=f"{name}: {rate / 1e12:,.1f} TFLOP/s, ridge {ridge:,.0f} FLOP/B")
        ax.plot([ridge], [rate], "|", color=colour, ms=14)
    for (name, series), (style, colour) in zip(points.items(), _POINT_STYLES):
        if series:
            ax.plot(*zip(*series), style, color=colour, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("FLOP/s")
    if title:
        ax.set_title(title, fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    return ridges
