"""Widgets that show what kernels do, built on a tracer that records every load and store per program id.

The kernels never import this package. Every view is one function returning a :class:`View`: display it in a
notebook for the live widget (a static PNG where widgets cannot render), drive it with ``.set(...)``, save it with
``.save(path)``. See ``kernels/viz/README.md``.
"""

from . import measure
from .autotune import autotune_scatter, model_rows
from .chunks import chunk_flow, chunk_state_explorer
from .grid import grid_explorer
from .ir import ir_explorer
from .memory import coalescing_view, working_set_view
from .ptx import parse_ptx, ptx_explorer, sample_ptx
from .recurrence import recurrence_stepper
from .sweeps import backward_sweeps
from .tiles import access_explorer, matmul_tile_explorer, tile_explorer
from .tracer import Access, Launch, OutOfBounds, Trace, trace
from .view import View

__all__ = [
    "trace", "Trace", "Launch", "Access", "OutOfBounds",
    "View", "access_explorer",
    "grid_explorer",
    "working_set_view", "coalescing_view", "measure",
    "recurrence_stepper",
    "tile_explorer", "matmul_tile_explorer",
    "chunk_flow", "chunk_state_explorer",
    "backward_sweeps",
    "ptx_explorer", "parse_ptx", "sample_ptx",
    "ir_explorer", "autotune_scatter", "model_rows",
]
