"""The vector-add oracle."""

import torch

__all__ = ["reference_vector_add"]


def reference_vector_add(x: torch.Tensor, y: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``x + y`` computed in ``dtype`` (default float64), whatever the inputs' dtype."""
    dtype = dtype or torch.float64
    return x.to(dtype) + y.to(dtype)
