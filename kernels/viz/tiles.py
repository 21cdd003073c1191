"""Lesson 03: the matmul tile explorer, traced from the learner's own kernel, and a general access heat map.

``tile_explorer(launch)`` traces ``launch(M=, N=, K=, BLOCK_M=, BLOCK_N=, BLOCK_K=[, GROUP_M=])`` for each block
configuration and shows, for one program and one k step, the A and B tiles it loads, the C tile it stores, the
order programs run in (grouped or row-major) and how many distinct bytes the first programs need between them.
``access_explorer(trace)`` shows any traced launch: per tensor, which elements one program touched at one step.
"""

from __future__ import annotations

import inspect

import numpy as np
from matplotlib.patches import Rectangle

from .demo import grouped_matmul_launch
from .tracer import Launch, Trace, trace
from .view import Choice, Slider, Toggle, View

__all__ = ["TileExplorer", "tile_explorer", "matmul_tile_explorer", "AccessExplorer", "access_explorer"]

_BLOCKS = [16, 32, 64]


def _accepts(fn, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    return name in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def _touch_map(la: Launch, tensor: str, pid, step_upto: int, kind: str = "load") -> np.ndarray:
    """0: untouched, 1: loaded at an earlier step, 2: loaded at ``step_upto``; -1: masked-off lanes inside."""
    info = la.tensors[tensor]
    m = np.zeros(info.numel)
    for a in la.select(tensor, kind, pid=pid):
        if a.step <= step_upto:
            m[a.elements()] = np.maximum(m[a.elements()], 2 if a.step == step_upto else 1)
    return m.reshape(info.shape)


class TileExplorer(View):
    name = "tile_explorer"
    figsize = (10.0, 4.4)

    def __init__(self, launch=None, *, M: int = 48, N: int = 40, K: int = 64, BLOCK_M: int = 16,
                 BLOCK_N: int = 16, BLOCK_K: int = 16, GROUP_M: int = 2, a: str | None = None,
                 b: str | None = None, c: str | None = None, note: str = "", first: Launch | None = None):
        self.launch = launch or grouped_matmul_launch
        self.note = note
        self.sizes = dict(M=M, N=N, K=K)
        self.names = dict(a=a, b=b, c=c)
        self.grouped = _accepts(self.launch, "GROUP_M")
        self._cache: dict = {}
        if first is not None:
            blocks = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, **({"GROUP_M": GROUP_M}
                                                                                 if self.grouped else {}))
            self._cache[tuple(sorted(blocks.items()))] = first
        controls = {"pid": Slider("program id", 0, 0, 0), "step": Slider("k step", 0, 0, 0),
                    "BLOCK_M": Choice("BLOCK_M", BLOCK_M, _BLOCKS), "BLOCK_N": Choice("BLOCK_N", BLOCK_N, _BLOCKS),
                    "BLOCK_K": Choice("BLOCK_K", BLOCK_K, _BLOCKS)}
        if self.grouped:
            controls["GROUP_M"] = Choice("GROUP_M", GROUP_M, [1, 2, 4, 8])
        super().__init__(controls)
        # every GROUP_M (the control the lesson asks to play with) traced now, not on the learner's first drag
        start = {k: self.values[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M") if k in self.values}
        for option in controls["GROUP_M"].options if self.grouped else ():
            try:
                self.traced(**{**start, "GROUP_M": option})
            except Exception:  # noqa: BLE001 - shown in the picture if the learner picks this configuration
                continue

    def traced(self, **blocks) -> Launch:
        key = tuple(sorted(blocks.items()))
        if key not in self._cache:
            if len(self._cache) > 16:
                self._cache.clear()
            self._cache[key] = trace(self.launch, **self.sizes, **blocks)[-1]
        return self._cache[key]

    def roles(self, la: Launch) -> tuple[str, str, str]:
        M, N, K = self.sizes["M"], self.sizes["N"], self.sizes["K"]
        stored = la.written()
        loaded = [n for n in la.tensors if la.select(n, "load")]
        c = self.names["c"] or next((n for n in stored if la.tensors[n].shape == (M, N)), stored[0] if stored else None)
        a = self.names["a"] or next((n for n in loaded if la.tensors[n].shape == (M, K)), None)
        b = self.names["b"] or next((n for n in loaded if la.tensors[n].shape == (K, N) and n != a), None)
        if None in (a, b, c):
            raise ValueError(f"cannot tell A ({M}x{K}), B ({K}x{N}) and C ({M}x{N}) apart among {list(la.tensors)}; "
                             "pass a=, b=, c= with the kernel's parameter names")
        return a, b, c

    def _artists(self, fig, la, roles):
        """Axes and images, made once (their shapes are the problem's); controls only update them."""
        a, b, c = roles
        fig.clear()
        ax = fig.subplots(1, 3, width_ratios=[self.sizes["K"], self.sizes["N"], self.sizes["N"]])
        cmap = _cmap()
        M, N = self.sizes["M"], self.sizes["N"]
        art = {"ax": ax, "key": None}
        art["a"] = ax[0].imshow(np.zeros(la.tensors[a].shape), cmap=cmap, vmin=0, vmax=2, interpolation="nearest")
        art["b"] = ax[1].imshow(np.zeros(la.tensors[b].shape), cmap=cmap, vmin=0, vmax=2, interpolation="nearest")
        art["done"] = ax[2].imshow(np.zeros((M, N)), cmap="viridis", interpolation="nearest")
        art["todo"] = ax[2].imshow(np.zeros((M, N)), cmap="Greys", vmin=0, vmax=4, interpolation="nearest")
        art["box"] = ax[2].add_patch(Rectangle((0, 0), 1, 1, fill=False, lw=2, edgecolor="#d62728"))
        for axis in ax:
            axis.tick_params(labelsize=7)
        return art

    def draw(self, fig, pid, step, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M=1):
        blocks = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
        if self.grouped:
            blocks["GROUP_M"] = GROUP_M
        la = self.traced(**blocks)
        a, b, c = self.roles(la)
        programs = la.programs()
        pid = self.limit("pid", 0, len(programs) - 1)
        p = programs[pid]
        step = self.limit("step", 0, la.steps(p) - 1)
        key = tuple(sorted(blocks.items()))
        art = getattr(self, "_art", None)
        if art is None or not fig.axes:
            art = self._art = self._artists(fig, la, (a, b, c))
        if art["key"] != key:  # launch order of the C tiles under this configuration
            order = np.full((self.sizes["M"], self.sizes["N"]), np.nan)
            for i, q in enumerate(programs):
                for acc in la.select(c, "store", pid=q):
                    order.reshape(-1)[acc.elements()] = i
            art["order"], art["key"] = order, key
            art["done"].set_clim(0, max(1, len(programs) - 1))
        ax = art["ax"]
        art["a"].set_data(_touch_map(la, a, p, step))
        art["b"].set_data(_touch_map(la, b, p, step))
        ax[0].set_title(f"A = {a}: tiles program {pid} loads\n(dark: step {step}, light: earlier)", fontsize=9)
        ax[1].set_title(f"B = {b}\n(dark: step {step}, light: earlier)", fontsize=9)
        # C: programs by launch order; the selected program's tile outlined, later ones grey
        order = art["order"]
        art["done"].set_data(np.where(order <= pid, order, np.nan))
        art["todo"].set_data(np.where(order > pid, 1.0, np.nan))
        mine = np.argwhere(order == pid)
        if mine.size:
            (r0, c0), (r1, c1) = mine.min(0), mine.max(0)
            art["box"].set_bounds(c0 - 0.5, r0 - 0.5, c1 - c0 + 1, r1 - r0 + 1)
        ax[2].set_title(f"C = {c}: programs 0..{pid} in launch order", fontsize=9)
        # reuse and the footprint of the first programs
        isz = la.tensors[a].itemsize
        loaded_a = la.bytes()[a]["load"]
        loaded_b = la.bytes()[b]["load"]
        reuse_a = loaded_a / max(1, len(la.elements(a, "load")) * isz)
        reuse_b = loaded_b / max(1, len(la.elements(b, "load")) * la.tensors[b].itemsize)
        first = programs[: pid + 1]
        dist_a = len(set().union(*(la.elements(a, "load", pid=q) for q in first))) * isz
        dist_b = len(set().union(*(la.elements(b, "load", pid=q) for q in first))) * la.tensors[b].itemsize
        mine_bytes = la.bytes(p)
        grouping = f"GROUP_M={GROUP_M}" if self.grouped else "row-major order"
        stray = la.out_of_bounds
        warn = (f"Warning: {sum(o.offsets.size for o in stray)} lanes of this launch fall outside their tensor "
                f"(first: {stray[0]}); they are left out of the picture, and on a GPU they would read garbage or "
                "fault: check your masks.\n") if stray else ""
        return (warn + self.note + f"{la.kernel}: grid {la.grid[:2]}, {len(programs)} programs, {la.steps(p)} k steps, "
                f"{grouping}. "
                f"Program {pid} moves {mine_bytes[a]['load']} B of A, {mine_bytes[b]['load']} B of B, "
                f"stores {mine_bytes[c]['store']} B of C.\n"
                f"Reuse over the launch: each A element loaded {reuse_a:.1f}x, each B element {reuse_b:.1f}x "
                f"(cdiv(N, BLOCK_N) and cdiv(M, BLOCK_M) with full tiles). Programs 0..{pid} need "
                f"{(dist_a + dist_b) / 1024:.1f} KiB of distinct A+B (what L2 must hold for them to share it).")


def _cmap():
    from matplotlib.colors import ListedColormap

    return ListedColormap(["#f4f4f4", "#9ecae1", "#08519c"])


class AccessExplorer(View):
    name = "access_explorer"
    figsize = (9.0, 4.2)

    def __init__(self, traced: Trace | Launch, tensor: str | None = None):
        self.la = traced[-1] if isinstance(traced, Trace) else traced
        if not isinstance(self.la, Launch):
            raise TypeError("access_explorer needs the result of kernels.viz.trace(...)")
        names = list(self.la.tensors)
        if not names:
            raise ValueError(f"{self.la.kernel}: the launch has no tensor arguments to show")
        super().__init__({"tensor": Toggle("tensor", tensor or names[0], names),
                          "pid": Slider("program id", 0, 0, len(self.la.programs()) - 1),
                          "step": Slider("step", 0, 0, max(0, self.la.steps() - 1))})

    def draw(self, fig, tensor, pid, step):
        la = self.la
        p = la.programs()[pid]
        step = self.limit("step", 0, la.steps(p, tensor) - 1)
        info = la.tensors[tensor]
        shape = info.shape if len(info.shape) == 2 else (-(-info.numel // 64), 64) if info.numel > 64 else \
            (1, info.numel)
        pad = shape[0] * shape[1]
        view = np.zeros(pad)
        for acc in la.select(tensor, pid=p):
            if acc.step <= step:
                code = {"load": 1, "store": 2, "atomic": 3}[acc.kind] + (3 if acc.step == step else 0)
                view[acc.elements()] = np.maximum(view[acc.elements()], code)
        reuse = np.zeros(pad)
        reuse[: info.numel] = la.counts(tensor).reshape(-1)
        fig.clear()
        ax, bx = fig.subplots(1, 2)
        from matplotlib.colors import ListedColormap

        cm = ListedColormap(["#f4f4f4", "#c6dbef", "#c7e9c0", "#fdd0a2", "#2171b5", "#238b45", "#d94801"])
        ax.imshow(view.reshape(shape), cmap=cm, vmin=0, vmax=6, interpolation="nearest", aspect="auto")
        ax.set_title(f"{tensor}: program {p} up to step {step}\n(blue load, green store, orange atomic; dark: "
                     "this step)", fontsize=9)
        im = bx.imshow(reuse.reshape(shape), cmap="magma", interpolation="nearest", aspect="auto")
        fig.colorbar(im, ax=bx, shrink=0.8)
        bx.set_title(f"{tensor}: accesses per element, all programs", fontsize=9)
        by = la.bytes(p)[tensor]
        oob = [o for o in la.out_of_bounds if o.tensor == tensor and o.pid == p]
        unw = la.unwritten().get(tensor)
        return (f"{la.kernel} grid {la.grid}: program {p} loads {by['load']} B and stores {by['store']} B of "
                f"{tensor} {tuple(info.shape)}; out-of-bounds accesses of this program: {len(oob)}"
                + (f"; {unw.size} elements of {tensor} never written" if unw is not None and unw.size else "")
                + ("\n" + str(oob[0]) if oob else ""))


def tile_explorer(launch=None, *, M: int = 48, N: int = 40, K: int = 64, BLOCK_M: int = 16, BLOCK_N: int = 16,
                  BLOCK_K: int = 16, GROUP_M: int = 2, a: str | None = None, b: str | None = None,
                  c: str | None = None) -> TileExplorer:
    """Matmul tile explorer (lesson 03), traced from the learner's kernel.

    ``launch(M=, N=, K=, BLOCK_M=, BLOCK_N=, BLOCK_K=[, GROUP_M=])`` allocates small CPU inputs and launches the
    learner's matmul (default: the demo's grouped kernel). A, B and C are found by shape, or named with ``a=``,
    ``b=``, ``c=`` (the kernel's parameter names). Controls: ``pid``, ``step``, the block sizes, ``GROUP_M``
    (when ``launch`` takes it).
    """
    return TileExplorer(launch, M=M, N=N, K=K, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                        a=a, b=b, c=c)


def _lesson_launch(kernel):
    """A launch of lesson 03's ``tiled_matmul_kernel`` signature (fp32, IEEE dots), returning C and A @ B."""
    import torch
    import triton

    from ..testing import randn

    def launch(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M):
        a, b = randn(M, K, seed=0), randn(K, N, seed=1)
        c = torch.full((M, N), float("nan"), device=a.device)
        grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
        kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                     BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, PRECISION="ieee")
        return c, a.double() @ b.double()

    return launch


def _package_launch(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M):
    from ..matmul.tiled import tiled_matmul
    from ..testing import randn

    a, b = randn(M, K, seed=0), randn(K, N, seed=1)
    c = tiled_matmul(a, b, input_precision="ieee", block_m=BLOCK_M, block_n=BLOCK_N, block_k=BLOCK_K, group_m=GROUP_M)
    return c, a.double() @ b.double()


def matmul_tile_explorer(kernel=None, *, M: int = 48, N: int = 40, K: int = 64, BLOCK_M: int = 16,
                         BLOCK_N: int = 16, BLOCK_K: int = 16, GROUP_M: int = 2) -> TileExplorer:
    """Lesson 03's tile explorer for the learner's ``tiled_matmul_kernel`` (the exercise's signature: A, B, C,
    M, N, K, six strides, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PRECISION). ``None``, or a kernel that raises
    (an unfinished exercise), shows the package's tiled kernel and says so; a kernel that runs but computes a
    wrong C is shown as it is, with the error in the caption."""
    from ..testing import rel_error

    sizes = dict(M=M, N=N, K=K, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M)
    note = "Showing the package's tiled kernel (no kernel of yours given). "
    launch, first = _package_launch, None
    if kernel is not None:
        mine = _lesson_launch(kernel)
        try:
            tr = trace(mine, **sizes)
            c, ref = tr.result
            first = tr[-1]
            err = rel_error(c, ref)
            note = "Your kernel. " if err < 1e-4 else f"Your kernel; its C is WRONG (relative error {err:.1e}). "
            launch = mine
        except Exception as e:  # the learner's kernel failed: explain, and show a working one
            note = f"Showing the package's tiled kernel: yours raised {type(e).__name__}: {str(e)[:120]}. "
    return TileExplorer(launch, M=M, N=N, K=K, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                        GROUP_M=GROUP_M, note=note, first=first)


def access_explorer(traced: Trace | Launch, tensor: str | None = None) -> AccessExplorer:
    """Heat maps of any traced launch: which elements one program loaded/stored up to a step, and reuse counts.
    Controls: ``tensor``, ``pid``, ``step``."""
    return AccessExplorer(traced, tensor)
