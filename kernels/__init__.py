"""The GPU Kernel Workbook's importable package: reference kernels, checks, benchmarks, widgets and export.

Importing it decides where kernels run (see :mod:`kernels.device`); nothing else runs at import.
"""

from .device import DEVICE, INTERPRET, MODE, ON_GPU, describe, sizes

__all__ = ["DEVICE", "INTERPRET", "MODE", "ON_GPU", "describe", "sizes"]
__version__ = "0.1.0"
