"""Oracles for the memory kernels, computed in float64 (or a dtype you pass)."""

import torch

__all__ = ["reference_memory", "reference_copy", "reference_strided", "reference_l2_reread", "reference_sram_reuse"]


def reference_copy(x: torch.Tensor, *, dtype=torch.float64) -> torch.Tensor:
    return x.to(dtype).clone()


def reference_strided(x: torch.Tensor, *, stride: int, dtype=torch.float64) -> torch.Tensor:
    return x.reshape(-1)[::stride].to(dtype)


def reference_l2_reread(x: torch.Tensor, *, reuse: int, shift: int, dtype=torch.float64) -> torch.Tensor:
    """``Σ_{r<reuse} x[(i + r·shift) mod n]``."""
    xd = x.to(dtype)
    n = xd.numel()
    idx = torch.arange(n, device=x.device)
    out = torch.zeros_like(xd)
    for r in range(reuse):
        out += xd[(idx + r * shift) % n]
    return out


def reference_sram_reuse(x: torch.Tensor, *, reuse: int, a: float = 0.5, dtype=torch.float64) -> torch.Tensor:
    """``y_0 = x``, ``y_{r+1} = a·y_r + x``, returned after ``reuse`` rounds."""
    xd = x.to(dtype)
    y = xd.clone()
    for _ in range(reuse):
        y = y * a + xd
    return y


_PATTERNS = {
    "copy": reference_copy,
    "strided": reference_strided,
    "l2_reread": reference_l2_reread,
    "sram_reuse": reference_sram_reuse,
}


def reference_memory(pattern: str, x: torch.Tensor, **params) -> torch.Tensor:
    """The oracle for one access ``pattern`` (copy, strided, l2_reread, sram_reuse) with its parameters."""
    try:
        fn = _PATTERNS[pattern]
    except KeyError:
        raise ValueError(f"unknown memory pattern {pattern!r}; known: {sorted(_PATTERNS)}") from None
    return fn(x, **params)
