"""The one widget shape every lesson view shares: controls, a matplotlib picture redrawn in place, a caption.

A :class:`View` draws into one Agg figure kept for its lifetime; a control change calls ``draw`` and swaps the
PNG bytes of an ``ipywidgets.Image`` (no re-display, no server, no threads). Displayed, it emits a static PNG of
its first state and then the live widget; where the widget renders, a CSS rule hides the static copy, so
JupyterLab shows one picture while nbconvert and feedback HTML (no widget JavaScript offline) keep the PNG.
``set(**values)`` drives it without a browser; ``save(path)`` writes the PNG.
"""

from __future__ import annotations

import base64
import html
import io
import pathlib
from collections.abc import Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

try:
    import ipywidgets as widgets
except ImportError:  # pragma: no cover - ipywidgets is a dependency; the fallback keeps static use working
    widgets = None

__all__ = ["View", "Slider", "Choice", "Toggle"]


class _Control:
    """What a view needs to know about one control, independent of ipywidgets."""

    def __init__(self, label: str, value):
        self.label, self.value = label, value

    def make(self):
        raise NotImplementedError

    def clean(self, value):
        return value


class Slider(_Control):
    """An integer in ``[lo, hi]``."""

    def __init__(self, label: str, value: int, lo: int, hi: int, step: int = 1):
        super().__init__(label, int(value))
        self.lo, self.hi, self.step = int(lo), int(hi), int(step)

    def make(self):
        return widgets.IntSlider(value=self.value, min=self.lo, max=self.hi, step=self.step,
                                 description=self.label, continuous_update=True,
                                 style={"description_width": "initial"}, layout={"width": "420px"})

    def clean(self, value):
        v = int(value)
        if not self.lo <= v <= self.hi:
            raise ValueError(f"{self.label}={v} is outside [{self.lo}, {self.hi}]")
        return v


class Choice(_Control):
    """One of a list of values (a slider over them, so it can be dragged)."""

    def __init__(self, label: str, value, options: Sequence, labels: Sequence[str] | None = None):
        super().__init__(label, value)
        self.options = list(options)
        self.labels = list(labels) if labels is not None else [str(o) for o in self.options]
        if value not in self.options:
            raise ValueError(f"{label}={value!r} is not one of {self.options}")

    def make(self):
        return widgets.SelectionSlider(options=list(zip(self.labels, self.options)), value=self.value,
                                       description=self.label,
                                       continuous_update=True, style={"description_width": "initial"},
                                       layout={"width": "420px"})

    def clean(self, value):
        if value not in self.options:
            raise ValueError(f"{self.label}={value!r} is not one of {self.options}")
        return value


class Toggle(_Control):
    """One of a few named modes, shown as buttons."""

    def __init__(self, label: str, value, options: Sequence):
        super().__init__(label, value)
        self.options = list(options)

    def make(self):
        return widgets.ToggleButtons(options=self.options, value=self.value, description=self.label,
                                     style={"description_width": "initial"})

    def clean(self, value):
        if value not in self.options:
            raise ValueError(f"{self.label}={value!r} is not one of {self.options}")
        return value


class View:
    """Base class: subclasses set ``controls`` (name -> control) and implement ``draw(fig, **values) -> caption``.

    ``fig`` is the same figure every time. An error in the first draw propagates (a lesson can fall back to a
    demo); a later one, from a control change, is drawn in red and the widget stays alive.
    """

    name = "view"
    figsize = (9.0, 4.2)
    dpi = 80
    #: fixed margins (a layout engine would re-solve the layout on every redraw, doubling its cost)
    margins = dict(left=0.07, right=0.98, bottom=0.14, top=0.84, wspace=0.35)

    def __init__(self, controls: dict[str, _Control]):
        self.spec = controls
        self.values = {k: c.value for k, c in controls.items()}
        self.fig = Figure(figsize=self.figsize, dpi=self.dpi)
        FigureCanvasAgg(self.fig)
        self.caption = ""
        self.error = ""
        self._widget = None
        self._controls: dict = {}
        self._png: bytes | None = None
        self.caption = self.draw(self.fig, **self.values) or ""  # a failure here reaches the caller
        self._finish()

    # --- driving it --------------------------------------------------------------------------------------------
    def set(self, **values) -> View:
        """Change controls (as a learner would) and redraw once; the live widget follows."""
        for k, v in values.items():
            if k not in self.spec:
                raise KeyError(f"{type(self).__name__} has no control {k!r}; controls: {list(self.spec)}")
            self.values[k] = self.spec[k].clean(v)
        self.redraw()
        return self

    def redraw(self) -> None:
        try:
            self.caption = self.draw(self.fig, **self.values) or ""
            self._finish()
            self.error = ""
        except (ValueError, TypeError, KeyError, IndexError, RuntimeError, NotImplementedError,
                AssertionError) as e:
            # the learner's kernel or a control combination failed: say so in the picture, keep the widget alive
            self.error = f"{type(e).__name__}: {e}"
            self.fig.clear()
            self.fig.text(0.02, 0.5, _wrap(self.error, 100), family="monospace", fontsize=9, color="#b00020",
                          va="center")
            self.caption = self.error
        self._png = None
        if self._widget is not None:
            self._sync_controls()
            self._image.value = self.png()
            self._text.value = _caption_html(self.caption, self.error)

    def draw(self, fig: Figure, **values) -> str:
        raise NotImplementedError

    def _finish(self):
        # few ticks: drawing tick labels is most of a redraw's cost
        self.fig.subplots_adjust(**self.margins)
        for ax in self.fig.axes:
            for axis in (ax.xaxis, ax.yaxis):
                if type(axis.get_major_locator()).__name__ == "AutoLocator" and axis.get_scale() == "linear":
                    axis.set_major_locator(MaxNLocator(nbins=4, integer=bool(ax.images)))

    # --- pictures ------------------------------------------------------------------------------------------------
    def png(self) -> bytes:
        """The current picture as PNG bytes."""
        if self._png is None:
            from PIL import Image

            self.fig.canvas.draw()
            rgb = np.asarray(self.fig.canvas.buffer_rgba())[..., :3]
            buf = io.BytesIO()
            Image.fromarray(rgb).save(buf, format="png", compress_level=1)  # fast to encode, a slider's pace
            self._png = buf.getvalue()
        return self._png

    def save(self, path: str | pathlib.Path) -> pathlib.Path:
        """Write the current picture to ``path`` (a ``.png``); return the path."""
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.png())
        return path

    # --- the live widget -----------------------------------------------------------------------------------------
    @property
    def widget(self):
        """The ipywidgets box (built on first use)."""
        if widgets is None:
            raise RuntimeError("ipywidgets is not installed; use .png() / .save() for a static picture")
        if self._widget is None:
            self._build()
        return self._widget

    def _build(self):
        for k, c in self.spec.items():
            w = c.make()
            w.observe(lambda ch, k=k: self._on_change(k, ch["new"]), names="value")
            self._controls[k] = w
        self._sync_controls()  # the view may have been driven with set() before it was displayed
        self._image = widgets.Image(value=self.png(), format="png", layout={"max_width": "100%"})
        self._image.add_class("kw-view-image")
        self._text = widgets.HTML(_caption_html(self.caption, self.error))
        save = widgets.Button(description="Save PNG", icon="download", layout={"width": "120px"})
        saved = widgets.HTML()

        def on_save(_):
            p = self.save(pathlib.Path("artifacts") / f"{self.name}.png")
            saved.value = f"<code>saved {html.escape(str(p))}</code>"

        save.on_click(on_save)
        rows = list(self._controls.values()) + [widgets.HBox([save, saved])]
        self._widget = widgets.VBox([widgets.VBox(rows), self._image, self._text])
        self._widget.add_class("kw-view")

    def _on_change(self, key, value):
        if self.values.get(key) == value:
            return
        self.values[key] = value
        self.redraw()

    def _sync_controls(self):
        for k, w in self._controls.items():
            c = self.spec[k]
            if isinstance(c, Slider) and (w.max != c.hi or w.min != c.lo):
                w.min, w.max = min(w.min, c.lo), max(w.max, c.hi)
                w.min, w.max = c.lo, c.hi
            if w.value != self.values[k]:
                w.value = self.values[k]

    def limit(self, key: str, lo: int, hi: int) -> int:
        """Change a slider's range (from ``draw``, when it depends on other controls); return its clamped value."""
        c = self.spec[key]
        c.lo, c.hi = int(lo), int(max(lo, hi))
        self.values[key] = min(max(int(self.values[key]), c.lo), c.hi)
        return self.values[key]

    def static_bundle(self) -> dict:
        """The current picture as a plain display output: PNG, an ``<img>`` with the caption, and text."""
        b64 = base64.b64encode(self.png()).decode()
        page = (f"<style>{_HIDE_STATIC}</style><div class=\"kw-static\"><img src=\"data:image/png;base64,{b64}\" "
                f"alt=\"{html.escape(self.name)}\">{_caption_html(self.caption, self.error)}</div>")
        return {"text/html": page, "image/png": b64, "text/plain": f"<{type(self).__name__}: {self.caption}>"}

    def _ipython_display_(self):
        # two outputs: a static picture every renderer shows, then the live widget; where the widget renders, a
        # CSS rule hides the static copy, so JupyterLab shows one picture and static HTML keeps the PNG
        from IPython.display import display

        display(self.static_bundle(), raw=True)
        if widgets is not None:
            display(self.widget)

    def _repr_png_(self):
        return self.png()


_HIDE_STATIC = ".jp-OutputArea-child:has(.kw-static):has(+ .jp-OutputArea-child .kw-view){display:none}"


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.fill(p, width) for p in text.splitlines())


def _caption_html(caption: str, error: str) -> str:
    colour = "#b00020" if error else "inherit"
    body = html.escape(caption).replace("\n", "<br>")
    return f'<div class="kw-view-caption" style="font-family:monospace;font-size:12px;color:{colour}">{body}</div>'
