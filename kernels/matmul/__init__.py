"""Matmul: the naive row-at-a-time kernel, the tiled tl.dot kernel, and the reuse arithmetic behind tile sizes."""

from .naive import naive_matmul
from .reference import reference_matmul
from .reuse import Reuse, reuse
from .tiled import tiled_matmul

__all__ = ["naive_matmul", "tiled_matmul", "reference_matmul", "reuse", "Reuse"]
