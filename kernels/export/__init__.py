"""Export Triton kernels as PTX and cubin with a manifest, and launch them without Triton.

``python -m kernels.export`` compiles (no GPU needed); :mod:`kernels.export.launch` launches an export through
the CUDA driver API from Python; the ``rust/`` crate does the same from Rust. Importing this package imports
neither Triton nor CUDA.
"""

from .cli import export, export_spec, main

__all__ = ["export", "export_spec", "main"]
