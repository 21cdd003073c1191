"""The matmul oracle."""

import torch

__all__ = ["reference_matmul"]


def reference_matmul(a: torch.Tensor, b: torch.Tensor, *, dtype=torch.float64) -> torch.Tensor:
    """``a @ b`` computed in ``dtype`` (float64 by default)."""
    return a.to(dtype) @ b.to(dtype)
