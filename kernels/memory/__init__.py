"""Memory hierarchy: an HBM copy, a strided gather, an L2-resident re-read and on-chip reuse, each with bytes_moved."""

from .copy import copy_memory
from .l2_reread import l2_reread_memory
from .reference import reference_memory
from .sram_reuse import sram_reuse_memory
from .strided import strided_memory

__all__ = ["copy_memory", "strided_memory", "l2_reread_memory", "sram_reuse_memory", "reference_memory"]
