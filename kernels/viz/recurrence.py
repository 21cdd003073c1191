"""Lesson 02: step through linear attention's recurrence ``S_t = S_{t-1} + k_t^T v_t``, ``o_t = q_t S_t`` and
count the bytes each step moves per memory level, for the naive kernel (the state round-trips through HBM every
step) and for the one that keeps the state on chip. With ``launch`` the HBM bytes are traced from the learner's
kernel instead of counted from the model."""

from __future__ import annotations

import numpy as np
import torch

from ..testing import randn
from .measure import reference
from .tracer import trace
from .view import Slider, Toggle, View

__all__ = ["RecurrenceStepper", "recurrence_stepper"]

_NAIVE, _ONCHIP = "state in HBM (naive)", "state on chip"


def _model_bytes(K: int, V: int, itemsize: int, strategy: str) -> dict[str, int]:
    """Bytes one step of one (batch, head) moves: HBM reads, HBM writes, on-chip state traffic (fp32)."""
    io_read = (2 * K + V) * itemsize
    io_write = V * itemsize
    state = K * V * 4
    if strategy == _NAIVE:
        return {"HBM read": io_read + state, "HBM write": io_write + state, "on chip": 2 * state}
    return {"HBM read": io_read, "HBM write": io_write, "on chip": 2 * state}


class RecurrenceStepper(View):
    name = "recurrence_stepper"
    figsize = (10.0, 4.0)
    margins = dict(left=0.05, right=0.98, bottom=0.12, top=0.84, wspace=0.5)

    def __init__(self, launch=None, *, T: int = 24, K: int = 8, V: int = 8, dtype=torch.float32,
                 bandwidth: float | None = None, full: dict | None = None, label: str | None = None):
        self.T, self.K, self.V = T, K, V
        self.itemsize = torch.empty((), dtype=dtype).element_size()
        q, k, v = (randn(T, d, seed=s, device="cpu").double() for s, d in ((0, K), (1, K), (2, V)))
        self.q, self.k, self.v = q, k, v
        self.states = torch.cumsum(k[:, :, None] * v[:, None, :], dim=0)  # [T, K, V]
        ref = reference()
        self.bandwidth = bandwidth or ref["copy_bandwidth"]
        self.bw_label = label or ("measured" if bandwidth else ref["label"])
        self.full = full or dict(B=4, H=16, T=2048, K=64, V=64)
        self.traced = None
        if launch is not None:
            la = trace(launch, T=T, K=K, V=V)[-1]
            self.traced = la
        super().__init__({"t": Slider("step t", 0, 0, T - 1), "strategy": Toggle("", _NAIVE, [_NAIVE, _ONCHIP])})

    def _hbm_traced(self, t: int) -> tuple[int, int]:
        la = self.traced
        p = la.programs()[0]
        acc = [a for a in la.select(pid=p) if a.step <= t]
        return (sum(a.nbytes for a in acc if a.kind == "load"), sum(a.nbytes for a in acc if a.kind == "store"))

    def _artists(self, fig):
        """Axes and artists, made once; ``draw`` only moves and recolours them."""
        ax = fig.subplots(1, 4, width_ratios=[1.1, 1.1, 1.6, 2.2])
        art = {"ax": ax, "bands": []}
        for axis, x, name in ((ax[0], self.k, "k"), (ax[1], self.v, "v")):
            axis.imshow(x.numpy(), cmap="RdBu", aspect="auto", vmin=-2.5, vmax=2.5, interpolation="nearest")
            art["bands"].append((axis.axhspan(-0.5, 0.5, color="#f28e2b", alpha=0.5), axis, name, x.shape[1]))
            axis.set_xticks([])
        lim = float(self.states.abs().max())
        art["state"] = ax[2].imshow(self.states[0].numpy(), cmap="RdBu", vmin=-lim, vmax=lim, interpolation="nearest")
        self.per = {st: _model_bytes(self.K, self.V, self.itemsize, st) for st in (_NAIVE, _ONCHIP)}
        levels = list(self.per[_NAIVE])
        xs = np.arange(len(levels))
        art["bars"] = {}
        for j, st in enumerate((_NAIVE, _ONCHIP)):
            art["bars"][st] = ax[3].bar(xs + (j - 0.5) * 0.38, [0] * len(levels), 0.38, label=st,
                                        color=("#e15759", "#4e79a7")[j])
        if self.traced is not None:
            (art["stars"],) = ax[3].plot([0, 1], [0, 0], "k*", ms=12, label="traced from your kernel")
        most = max(self.per[_NAIVE].values()) * self.T
        ax[3].set_ylim(0, most * 1.15)
        ax[3].set_xticks(xs, levels, fontsize=8)
        ax[3].legend(fontsize=7, loc="upper left")
        ax[3].set_title("bytes moved per memory level\n(one batch-head)", fontsize=9)
        art["levels"] = levels
        return art

    def draw(self, fig, t, strategy):
        if getattr(self, "_art", None) is None:
            self._art = self._artists(fig)
        art = self._art
        for band, axis, name, width in art["bands"]:
            band.set_y(t - 0.5)
            axis.set_title(f"{name} [T, {width}]\nrow t={t}", fontsize=9)
        art["state"].set_data(self.states[t].numpy())
        art["ax"][2].set_title(f"state S_{t} [K, V]\n= S_{t - 1 if t else '-1'} + k_{t}^T v_{t}", fontsize=9)
        per = self.per
        for st, bars in art["bars"].items():
            for bar, lv in zip(bars, art["levels"]):
                bar.set_height(per[st][lv] * (t + 1))
                bar.set_alpha(1.0 if st == strategy else 0.35)
        if self.traced is not None:
            art["stars"].set_ydata(list(self._hbm_traced(t)))
        art["ax"][3].set_ylabel(f"bytes, steps 0..{t}")
        b = per[strategy]
        F = self.full
        steps = F["B"] * F["H"] * F["T"]
        full_b = _model_bytes(F["K"], F["V"], self.itemsize, strategy)
        hbm_full = steps * (full_b["HBM read"] + full_b["HBM write"])
        floor_ms = hbm_full / self.bandwidth * 1e3
        traced = ""
        if self.traced is not None:
            rd, wr = self._hbm_traced(t)
            traced = f" Your kernel (traced, program 0) moved {rd} B in and {wr} B out of HBM through step {t}."
        return (f"{strategy}: step {t} reads {b['HBM read']} B and writes {b['HBM write']} B of HBM, "
                f"and {b['on chip']} B of on-chip state traffic.{traced}\n"
                f"At B={F['B']}, H={F['H']}, T={F['T']}, K={F['K']}, V={F['V']}: {hbm_full / 2**20:.1f} MiB through "
                f"HBM, at least {floor_ms:.3f} ms at {self.bandwidth / 1e12:.2f} TB/s [{self.bw_label}].")


def recurrence_stepper(launch=None, *, T: int = 24, K: int = 8, V: int = 8, dtype=torch.float32,
                       bandwidth: float | None = None, full: dict | None = None,
                       label: str | None = None) -> RecurrenceStepper:
    """Recurrence step-through with bytes per memory level (lesson 02).

    ``bandwidth``: the learner's measured HBM bandwidth in bytes/s (default: the labelled H200 reference);
    ``full``: the problem the time floor is computed for (``B, H, T, K, V``). ``launch(T=, K=, V=)``, if given,
    launches the learner's recurrent kernel on small CPU inputs and its traced HBM bytes are drawn beside the
    model. Controls: ``t``, ``strategy``.
    """
    return RecurrenceStepper(launch, T=T, K=K, V=V, dtype=dtype, bandwidth=bandwidth, full=full, label=label)
