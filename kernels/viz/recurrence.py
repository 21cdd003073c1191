"""Lesson 02: step through linear attention's recurrence ``S_0 = 0``, ``S_t = S_{t-1} + k_t^T v_t``,
``o_t = q_t S_t`` (steps ``t = 1 … T``) and count the bytes each strategy asks of global memory: the inputs and
outputs, which cross HBM, and the state, which the naive kernel stores and reloads at every step. That state buffer
is small (16 KiB per head at K = V = 64) and stays in L2, so its traffic is drawn apart from HBM's. With ``launch``
the global-memory bytes are traced from the learner's kernel instead of counted from the model."""

from __future__ import annotations

import numpy as np
import torch

from ..testing import randn
from .measure import reference
from .tracer import trace
from .view import Slider, Toggle, View

__all__ = ["RecurrenceStepper", "recurrence_stepper", "global_bytes"]

_NAIVE, _ONCHIP = "state in global memory (naive)", "state on chip"


def global_bytes(K: int, V: int, itemsize: int, strategy: str, t: int, T: int) -> dict[str, int]:
    """Bytes one (batch, head) asks of global memory through step ``t`` of ``T`` (1-based), split into the
    inputs and outputs (HBM) and the fp32 state (L2): the naive kernel zeroes the state, then loads and stores
    it every step; the on-chip one stores it once, after the last step. At ``t = T`` the totals are the lesson's
    ``naive_bytes`` and ``fused_bytes`` (one V block) for one head."""
    state = K * V * 4
    out = {"loads, HBM": t * (2 * K + V) * itemsize, "stores, HBM": t * V * itemsize}
    if strategy == _NAIVE:
        out.update({"loads, L2": t * state, "stores, L2": (t + 1) * state})
    else:
        out.update({"loads, L2": 0, "stores, L2": state if t == T else 0})
    return out


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
        self.states = torch.cumsum(k[:, :, None] * v[:, None, :], dim=0)  # [T, K, V]: S_1 … S_T
        ref = reference()
        self.bandwidth = bandwidth or ref["copy_bandwidth"]
        self.bw_label = label or ("measured" if bandwidth else ref["label"])
        # the lesson's GPU problem, in bf16
        self.full = dict(B=4, H=16, T=2048, K=64, V=64, itemsize=2, **(full or {}))
        self.traced = None
        if launch is not None:
            la = trace(launch, T=T, K=K, V=V)[-1]
            self.traced = la
        super().__init__({"t": Slider("step t", 1, 1, T), "strategy": Toggle("", _NAIVE, [_NAIVE, _ONCHIP])})

    def _traced(self, t: int) -> tuple[int, int]:
        """Global-memory bytes loaded and stored by program 0 through step ``t`` (loop iterations 0 … t−1)."""
        la = self.traced
        p = la.programs()[0]
        acc = [a for a in la.select(pid=p) if a.step < t]
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
        xs = np.arange(2)
        art["bars"] = {}
        for j, st in enumerate((_NAIVE, _ONCHIP)):
            colour = ("#e15759", "#4e79a7")[j]
            hbm = ax[3].bar(xs + (j - 0.5) * 0.38, [0, 0], 0.38, color=colour, label=f"{st}: HBM (q, k, v, o)")
            l2 = ax[3].bar(xs + (j - 0.5) * 0.38, [0, 0], 0.38, color=colour, hatch="//", fill=False,
                           edgecolor=colour, label=f"{st}: state, served by L2")
            art["bars"][st] = (hbm, l2)
        if self.traced is not None:
            (art["stars"],) = ax[3].plot([0, 1], [0, 0], "k*", ms=12, label="traced from your kernel")
        end = global_bytes(self.K, self.V, self.itemsize, _NAIVE, self.T, self.T)
        ax[3].set_ylim(0, max(end["loads, HBM"] + end["loads, L2"], end["stores, HBM"] + end["stores, L2"]) * 1.3)
        ax[3].set_xticks(xs, ["loads", "stores"], fontsize=8)
        ax[3].legend(fontsize=6, loc="upper left")
        ax[3].set_title("bytes asked of global memory\n(one batch-head)", fontsize=9)
        return art

    def draw(self, fig, t, strategy):
        if getattr(self, "_art", None) is None:
            self._art = self._artists(fig)
        art = self._art
        for band, axis, name, width in art["bands"]:
            band.set_y(t - 1.5)
            axis.set_title(f"{name} [T, {width}]\nstep t={t}: row {t - 1}", fontsize=9)
        art["state"].set_data(self.states[t - 1].numpy())
        first = " (S_0 = 0)" if t == 1 else ""
        art["ax"][2].set_title(f"state S_{t} [K, V]\n= S_{t - 1} + k_{t}^T v_{t}{first}", fontsize=9)
        for st, (hbm, l2) in art["bars"].items():
            got = global_bytes(self.K, self.V, self.itemsize, st, t, self.T)
            for i, kind in enumerate(("loads", "stores")):
                hbm[i].set_height(got[f"{kind}, HBM"])
                l2[i].set_y(got[f"{kind}, HBM"])
                l2[i].set_height(got[f"{kind}, L2"])
                for bar in (hbm[i], l2[i]):
                    bar.set_alpha(1.0 if st == strategy else 0.35)
        if self.traced is not None:
            art["stars"].set_ydata(list(self._traced(t)))
        art["ax"][3].set_ylabel(f"bytes, steps 1..{t}")
        b = global_bytes(self.K, self.V, self.itemsize, strategy, t, self.T)
        F = self.full
        heads = F["B"] * F["H"]
        whole = global_bytes(F["K"], F["V"], F["itemsize"], strategy, F["T"], F["T"])
        hbm_full = heads * (whole["loads, HBM"] + whole["stores, HBM"])
        l2_full = heads * (whole["loads, L2"] + whole["stores, L2"])
        floor_ms = hbm_full / self.bandwidth * 1e3
        traced = ""
        if self.traced is not None:
            rd, wr = self._traced(t)
            traced = f" Your kernel (traced, program 0) loaded {rd} B and stored {wr} B through step {t}."
        where = ("state buffer stays in L2, so only the inputs and outputs reach HBM"
                 if strategy == _NAIVE else "state stays in registers and is stored once")
        return (f"{strategy}, steps 1..{t}: {b['loads, HBM'] + b['stores, HBM']} B of q, k, v, o through HBM and "
                f"{b['loads, L2'] + b['stores, L2']} B of state through global memory.{traced}\n"
                f"At B={F['B']}, H={F['H']}, T={F['T']}, K={F['K']}, V={F['V']} ({8 * F['itemsize']}-bit inputs): "
                f"{(hbm_full + l2_full) / 1e9:.3f} GB asked of global memory ({l2_full / 1e9:.3f} GB of it state); "
                f"the {where}: {hbm_full / 2**20:.1f} MiB, at least {floor_ms:.3f} ms at "
                f"{self.bandwidth / 1e12:.2f} TB/s [{self.bw_label}].")


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
