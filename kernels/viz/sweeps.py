"""Lesson 07: the two sweeps of the chunked backward pass. The dq pass walks the chunks forwards carrying the state
``S``; the dk/dv pass walks them backwards carrying ``dH = scale · Σ_{u≥t} q_u do_uᵀ``. At step ``i`` the dq
program holds chunk ``i`` and the dk/dv program chunk ``n-1-i``. The view draws both strips of chunks with the
state each program carries into its chunk, the causal matrix of the chunk held (what arrives through the carried
state, what through the masked intra-chunk product), and checks the chunked gradients against autograd."""

from __future__ import annotations

import numpy as np
import torch

from ..testing import randn
from .view import Choice, Slider, Toggle, View

__all__ = ["BackwardSweeps", "backward_sweeps", "chunked_gradients"]


def chunked_gradients(q, k, v, do, scale: float, C: int):
    """One head [T, *] in float64: ``(dq, dk, dv)``, the state entering each chunk (dq pass) and the state
    gradient arriving at each chunk from the later ones (dk/dv pass)."""
    T, K = k.shape
    V = v.shape[1]
    starts = list(range(0, T, C))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    S = torch.zeros(K, V, dtype=q.dtype)
    states = []
    for s in starts:
        e = min(s + C, T)
        states.append(S.clone())
        mask = torch.ones(e - s, e - s, dtype=q.dtype).tril()
        dq[s:e] = scale * (do[s:e] @ S.T + (do[s:e] @ v[s:e].T * mask) @ k[s:e])
        S = S + k[s:e].T @ v[s:e]
    dH = torch.zeros(K, V, dtype=q.dtype)
    dstates = [None] * len(starts)
    for j in range(len(starts) - 1, -1, -1):
        s = starts[j]
        e = min(s + C, T)
        dstates[j] = dH.clone()
        mask = torch.ones(e - s, e - s, dtype=q.dtype).triu()
        dk[s:e] = v[s:e] @ dH.T + scale * (v[s:e] @ do[s:e].T * mask) @ q[s:e]
        dv[s:e] = k[s:e] @ dH + scale * (k[s:e] @ q[s:e].T * mask) @ do[s:e]
        dH = dH + scale * q[s:e].T @ do[s:e]
    return (dq, dk, dv), states, dstates


class BackwardSweeps(View):
    name = "backward_sweeps"
    figsize = (10.5, 4.4)
    margins = dict(left=0.06, right=0.98, bottom=0.12, top=0.86, wspace=0.3, hspace=0.7)

    def __init__(self, *, T: int = 100, K: int = 8, V: int = 8, chunk: int = 16, chunks=(8, 16, 32)):
        self.T, self.K, self.V = T, K, V
        self.scale = K ** -0.5
        self.q, self.k, self.v, self.do = (randn(T, d, seed=s, device="cpu", scale=0.5).double()
                                           for s, d in ((0, K), (1, K), (2, V), (3, V)))
        leaves = [x.clone().requires_grad_() for x in (self.q, self.k, self.v)]
        S = torch.cumsum(leaves[1][:, :, None] * leaves[2][:, None, :], dim=0)
        (self.scale * torch.einsum("tk,tkv->tv", leaves[0], S) * self.do).sum().backward()
        self.autograd = [x.grad for x in leaves]
        self._cache = {c: chunked_gradients(self.q, self.k, self.v, self.do, self.scale, c) for c in chunks}
        super().__init__({"chunk": Choice("chunk size BT", chunk, list(chunks)),
                          "step": Slider("step i", 0, 0, -(-T // chunk) - 1),
                          "show": Toggle("causal matrix of", "dq program", ["dq program", "dk/dv program"])})

    def draw(self, fig, chunk, step, show):
        from matplotlib.colors import ListedColormap

        T = self.T
        n = -(-T // chunk)
        i = self.limit("step", 0, n - 1)
        grads, states, dstates = self._cache[chunk]
        fig.clear()
        grid = fig.add_gridspec(2, 2, width_ratios=[2.3, 1.0])
        top, bottom, mat = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[:, 1])
        j = n - 1 - i
        for ax, held, norms, colour, arrow, title in (
                (top, i, [float(torch.linalg.norm(s)) for s in states], "#4e79a7", 1,
                 f"dq pass (forwards): step {i} holds chunk {i}; ||S_[c]|| entering each chunk"),
                (bottom, j, [float(torch.linalg.norm(s)) for s in dstates], "#e15759", -1,
                 f"dk/dv pass (backwards): step {i} holds chunk {j}; ||dH_[c]|| from the chunks after c")):
            done = range(0, held + 1) if arrow > 0 else range(held, n)
            bars = ax.bar(range(n), norms, color=["#d9d9d9"] * n, edgecolor="#666666", lw=0.4)
            for c in done:
                bars[c].set_color(colour)
            bars[held].set_color("#f28e2b")
            ax.set_xlim(-0.6, n - 0.4)
            ax.set_xticks(range(n))
            ax.set_title(title, fontsize=8)
            top_y = max(norms) or 1.0
            ax.annotate("", xy=(held + 0.5 * arrow, top_y * 0.9), xytext=(held - 0.5 * arrow, top_y * 0.9),
                        arrowprops=dict(arrowstyle="->", color="#333333", lw=1.2))
        bottom.set_xlabel(f"chunk c (the last holds {T - (n - 1) * chunk} tokens)")
        code = np.zeros((T, T))  # 0 future, 1 other pairs, 2 via the carried state, 3 masked intra-chunk
        rows, cols = np.indices((T, T))
        code[cols <= rows] = 1
        if show == "dq program":
            s, e = i * chunk, min((i + 1) * chunk, T)
            here = (rows >= s) & (rows < e)
            code[here & (cols < s)] = 2
            code[here & (cols >= s) & (cols <= rows)] = 3
            what = f"dq rows {s}..{e - 1}: orange (dO Vᵀ ⊙ M) K, blue dO S_[{i}]ᵀ"
        else:
            s, e = j * chunk, min((j + 1) * chunk, T)
            here = (cols >= s) & (cols < e)
            code[here & (rows >= e)] = 2
            code[here & (rows < e) & (cols <= rows)] = 3
            what = f"dk, dv columns {s}..{e - 1}: orange ⊙ Mᵀ, blue through dH_[{j}]"
        mat.imshow(code, cmap=ListedColormap(["#ffffff", "#e6e6e6", "#9ecae1", "#f28e2b"]), vmin=0, vmax=3,
                   interpolation="nearest")
        mat.set_title("causal T x T (row: output token, column: input token)\n" + what, fontsize=7)
        mat.set_xlabel("s (key / value token)")
        mat.set_ylabel("t (query / output token)")
        errs = [float((g - a).abs().max() / a.abs().max()) for g, a in zip(grads, self.autograd)]
        held_s = "S = 0 (no chunk before 0)" if i == 0 else f"S from chunks 0..{i - 1}"
        held_dh = f"dH = 0 (no chunk after {j})" if j == n - 1 else f"dH from chunks {j + 1}..{n - 1}"
        return (f"BT={chunk}: {n} chunks. Step {i}: the dq program uses {held_s} for chunk {i}, then adds "
                f"K_{i}ᵀ V_{i}; the dk/dv program uses {held_dh} for chunk {j}, then adds "
                f"scale · Q_{j}ᵀ dO_{j}. Chunked gradients vs autograd of the recurrence (float64), max relative "
                f"difference: dq {errs[0]:.1e}, dk {errs[1]:.1e}, dv {errs[2]:.1e}.")


def backward_sweeps(*, T: int = 100, K: int = 8, V: int = 8, chunk: int = 16) -> BackwardSweeps:
    """The dq pass (state forwards) and the dk/dv pass (state gradient backwards) of lesson 07, step by step.
    Controls: ``chunk`` (BT), ``step`` (the loop step both programs are at), ``show`` (whose chunk the causal
    matrix shows)."""
    chunks = tuple(sorted({8, 16, 32, chunk}))
    return BackwardSweeps(T=T, K=K, V=V, chunk=chunk, chunks=chunks)
