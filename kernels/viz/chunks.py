"""Lesson 04: chunked linear attention. For chunk ``i`` the output is an intra-chunk causal block plus the state
carried from every earlier chunk: ``O_i = (Q_i K_i^T * M) V_i + Q_i S_i``, ``S_{i+1} = S_i + K_i^T V_i``. The view
shows which part of the causal T x T matrix each term covers, the state entering the chunk, and checks the
chunked output against the step-by-step recurrence on the same inputs. Given a launch of the learner's kernel
it also traces which rows of Q, K, V each chunk step loads and which rows of O it stores."""

from __future__ import annotations

import numpy as np
import torch

from ..device import DEVICE
from ..testing import randn
from .tracer import trace
from .view import Choice, Slider, View

__all__ = ["ChunkFlow", "chunk_flow", "chunk_state_explorer"]


def _chunked(q, k, v, C: int):
    """Chunked forward in float64; returns the output and the state entering each chunk."""
    T, K = k.shape
    V = v.shape[1]
    S = torch.zeros(K, V, dtype=q.dtype)
    out = torch.empty(T, V, dtype=q.dtype)
    states = []
    for s in range(0, T, C):
        e = min(s + C, T)
        qi, ki, vi = q[s:e], k[s:e], v[s:e]
        mask = torch.tril(torch.ones(e - s, e - s, dtype=q.dtype))
        states.append(S.clone())
        out[s:e] = (qi @ ki.T * mask) @ vi + qi @ S
        S = S + ki.T @ vi
    return out, states


class ChunkFlow(View):
    name = "chunk_flow"
    figsize = (10.5, 4.2)

    def __init__(self, launch=None, *, T: int = 100, K: int = 16, V: int = 16, chunk: int = 16,
                 chunks=(4, 8, 16, 32, 64), note: str = ""):
        self.T, self.K, self.V = T, K, V
        self.launch, self.note = launch, note
        self.q, self.k, self.v = (randn(T, d, seed=s, device="cpu").double() for s, d in ((0, K), (1, K), (2, V)))
        S = torch.cumsum(self.k[:, :, None] * self.v[:, None, :], dim=0)
        self.recurrent = torch.einsum("tk,tkv->tv", self.q, S)
        self._cache: dict = {}
        self._traced: dict = {}
        super().__init__({"chunk": Choice("chunk size BT", chunk, list(chunks)),
                          "i": Slider("chunk i", 0, 0, -(-T // chunk) - 1)})
        for c in chunks:  # every chunk size now, so dragging BT never waits for torch or the interpreter
            self._cache.setdefault(c, _chunked(self.q, self.k, self.v, c))
            if launch is not None:
                self.traced(c)

    def traced(self, chunk: int):
        """Trace the learner's launch at this chunk size: (launch record, {role: tensor name}, relative error)."""
        if chunk not in self._traced:
            T, K, V = self.T, self.K, self.V
            q, k = (x.float().view(1, T, 1, K).to(DEVICE) for x in (self.q, self.k))
            v = self.v.float().view(1, T, 1, V).to(DEVICE)
            tr = trace(self.launch, q, k, v, chunk)
            o = tr.result
            la = tr[-1]
            by_addr = {info.source_ptr: name for name, info in la.tensors.items()}
            roles = {r: by_addr.get(t.data_ptr()) for r, t in (("Q", q), ("K", k), ("V", v), ("O", o))}
            err = float((o.reshape(T, V).cpu().double() - self.recurrent).norm() / self.recurrent.norm())
            self._traced[chunk] = (la, roles, err)
        return self._traced[chunk]

    def _artists(self, fig):
        """Axes and images, made once; a chunk-size change redraws only the chunk grid and the state bars."""
        from matplotlib.colors import ListedColormap

        T = self.T
        fig.clear()
        traced = self.launch is not None
        axes = fig.subplots(1, 4 if traced else 3, width_ratios=[2.2, 0.9, 1.2, 1.8] if traced else [2.2, 1.2, 2.0])
        ax, sx = axes[0], axes[-2]
        art = {"axes": axes, "chunk": None, "lines": []}
        art["code"] = ax.imshow(np.zeros((T, T)), cmap=ListedColormap(["#ffffff", "#e6e6e6", "#9ecae1", "#f28e2b"]),
                                vmin=0, vmax=3, interpolation="nearest")
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
        art["state"] = sx.imshow(np.zeros((self.K, self.V)), cmap="RdBu", interpolation="nearest")
        if traced:
            art["rows"] = axes[1].imshow(np.zeros((T, 4)), cmap=ListedColormap(["#f4f4f4", "#c6dbef", "#2171b5",
                                                                                 "#c7e9c0", "#238b45"]),
                                         vmin=0, vmax=4, aspect="auto", interpolation="nearest")
            axes[1].set_xticks(range(4), ["Q", "K", "V", "O"], fontsize=8)
        return art

    def _chunk_artists(self, art, chunk, states):
        ax, bx = art["axes"][0], art["axes"][-1]
        for line in art["lines"]:
            line.remove()
        art["lines"] = [f(b - 0.5, color="#888888", lw=0.4) for b in range(0, self.T, chunk)
                        for f in (ax.axhline, ax.axvline)]
        bx.cla()
        n = len(states)
        norms = [float(torch.linalg.norm(x)) for x in states]
        art["bars"] = bx.bar(range(n), norms, color="#4e79a7")
        bx.set_xticks(range(n))
        for j in range(n - 1):
            bx.annotate("", xy=(j + 1, norms[j + 1]), xytext=(j, norms[j]),
                        arrowprops=dict(arrowstyle="->", color="#555555", lw=0.8))
        bx.set_xlabel("chunk")
        bx.set_ylabel("||S_i|| (Frobenius)")
        bx.set_title("the state carried forward, chunk to chunk", fontsize=8)
        art["chunk"] = chunk

    def draw(self, fig, chunk, i):
        T = self.T
        n = -(-T // chunk)
        i = self.limit("i", 0, n - 1)
        if chunk not in self._cache:
            self._cache[chunk] = _chunked(self.q, self.k, self.v, chunk)
        out, states = self._cache[chunk]
        art = getattr(self, "_art", None)
        if art is None or not fig.axes:
            art = self._art = self._artists(fig)
        if art["chunk"] != chunk:
            self._chunk_artists(art, chunk, states)
        s, e = i * chunk, min((i + 1) * chunk, T)
        code = np.zeros((T, T))  # 0 masked (future), 1 other rows' past, 2 via the state, 3 intra-chunk block
        rows, cols = np.indices((T, T))
        code[cols <= rows] = 1
        here = (rows >= s) & (rows < e)
        code[here & (cols < s)] = 2
        code[here & (cols >= s) & (cols <= rows)] = 3
        art["code"].set_data(code)
        axes = art["axes"]
        axes[0].set_title(f"causal T x T, chunk {i} = rows {s}..{e - 1}\norange: intra-chunk (Q K^T * M) V; "
                          "blue: through the state Q S", fontsize=8)
        lim = max(1e-9, float(states[i].abs().max()))
        art["state"].set_data(states[i].numpy())
        art["state"].set_clim(-lim, lim)
        axes[-2].set_title(f"S_{i} [K, V] entering chunk {i}\n= sum of K_j^T V_j, j < {i}", fontsize=8)
        for j, bar in enumerate(art["bars"]):
            bar.set_color("#f28e2b" if j == i else "#4e79a7")
        err = float((out - self.recurrent).abs().max() / self.recurrent.abs().max())
        L = e - s
        K, V = self.K, self.V
        text = (f"BT={chunk}: {n} chunks (the last holds {T - (n - 1) * chunk} rows). Chunk {i}: intra block "
                f"{L}x{L} costs {2 * L * L * (K + V)} FLOPs, the state term {2 * L * K * V}, the state update "
                f"{2 * L * K * V}. Chunked (float64) vs the recurrence: max relative difference {err:.1e}.")
        if self.launch is not None:
            text += "\n" + self._draw_rows(axes[1], chunk, i)
        return self.note + text

    def _draw_rows(self, ax, chunk, i) -> str:
        la, roles, err = self.traced(chunk)
        p = la.programs()[0]
        grid = np.zeros((self.T, 4))
        for col, role in enumerate(("Q", "K", "V", "O")):
            name = roles[role]
            if name is None:
                continue
            width = self.V if role in ("V", "O") else self.K
            for a in la.select(name, pid=p):
                if a.step <= i:
                    rows = np.unique(a.elements() // width)
                    grid[rows, col] = np.maximum(grid[rows, col], (2 if a.step == i else 1) + (2 * (role == "O")))
        self._art["rows"].set_data(grid)
        ax.set_title(f"rows program {p[:2]}\nloads/stores, step {i}", fontsize=8)
        reuse = []
        for role in ("Q", "K", "V"):
            name = roles[role]
            if name is not None:
                c = la.counts(name, "load")
                reuse.append(f"{role} {c.sum() / max(1, c.size):.2f}x")
        others = [n for n in la.tensors if n not in roles.values() and la.select(n)]
        verdict = "matches" if err < 1e-4 else "DOES NOT match"
        return (f"Traced: {la.kernel}, grid {la.grid[:2]}; loads per element over the launch: {', '.join(reuse)}; "
                f"other tensors touched: {others or 'none (the state stays in registers)'}. Its output {verdict} "
                f"the recurrence (relative error {err:.1e}).")


def chunk_flow(launch=None, *, T: int = 100, K: int = 16, V: int = 16, chunk: int = 16) -> ChunkFlow:
    """Chunk and state-flow view with the causal mask (lesson 04). ``T`` need not be a multiple of ``chunk``.
    ``launch(q, k, v, chunk) -> o`` (q, k: [1, T, 1, K], v: [1, T, 1, V], fp32 CPU), if given, is traced for
    each chunk size. Controls: ``chunk`` (BT), ``i`` (which chunk)."""
    chunks = (16, 32, 64) if launch is not None else (4, 8, 16, 32, 64)
    return ChunkFlow(launch, T=T, K=K, V=V, chunk=chunk, chunks=chunks)


def _lesson_launch(kernel):
    import triton

    def launch(q, k, v, chunk):
        B, T, H, K = q.shape
        V = v.shape[-1]
        o = torch.full((B, T, H, V), float("nan"), device=q.device)
        BK, BV = max(16, triton.next_power_of_2(K)), max(16, triton.next_power_of_2(V))
        kernel[(triton.cdiv(V, BV), B * H)](q, k, v, o, T, H, K, V, 1.0, q.stride(0), q.stride(1), q.stride(2),
                                            k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1),
                                            v.stride(2), o.stride(0), o.stride(1), o.stride(2),
                                            BT=chunk, BK=BK, BV=BV, PRECISION="ieee")
        return o

    return launch


def _package_launch(q, k, v, chunk):
    from ..linear_attention.chunked import chunked_linear_attention

    return chunked_linear_attention(q, k, v, 1.0, chunk_size=chunk)[0]


def chunk_state_explorer(kernel=None, *, T: int = 100, K: int = 16, V: int = 16, chunk: int = 16) -> ChunkFlow:
    """Lesson 04's view for the learner's fused ``chunked_attention_kernel`` (the exercise's signature: q, k, v,
    o, T, H, K, V, scale, twelve strides, BT, BK, BV, PRECISION), traced per chunk size. ``None``, or a kernel
    that raises, shows the package's chunked kernel and says so."""
    note, launch = "Showing the package's chunked kernel (no kernel of yours given). ", _package_launch
    if kernel is not None:
        mine = _lesson_launch(kernel)
        try:
            view = ChunkFlow(mine, T=T, K=K, V=V, chunk=chunk, chunks=(16, 32, 64), note="Your kernel. ")
            return view
        except Exception as e:  # the learner's kernel failed: explain, and show a working one
            note = f"Showing the package's chunked kernel: yours raised {type(e).__name__}: {str(e)[:120]}. "
    return ChunkFlow(launch, T=T, K=K, V=V, chunk=chunk, chunks=(16, 32, 64), note=note)
