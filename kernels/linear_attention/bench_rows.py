"""The row layout that the linear-attention problem sets (the ladder, ``general``, ``backward``) share: packed
sequences, their offsets, and a row's parameters as the JSON results record them."""

from __future__ import annotations

import torch

from ..device import DEVICE

__all__ = ["packed", "cu_seqlens", "row_params"]


def packed(B: int, T: int, lens: list[int] | None) -> tuple[int, int, int]:
    """(B, T, the number of sequences N) of a row: ``lens`` packs sequences of those lengths into a batch of one."""
    return (B, T, B) if lens is None else (1, sum(lens), len(lens))


def cu_seqlens(lens: list[int] | None) -> torch.Tensor | None:
    """The packed sequences' start offsets and the total, on the device (None without ``lens``)."""
    return None if lens is None else torch.tensor([0] + lens, device=DEVICE).cumsum(0)


def row_params(B: int, T: int, H: int, K: int, V: int, dtype: torch.dtype, lens: list[int] | None, state: bool,
               **more) -> dict:
    """A row's parameters as the JSON results record them (``more``: a problem set's own)."""
    return dict(B=B, T=T, H=H, K=K, V=V, dtype=str(dtype).removeprefix("torch."), **more, varlen=lens is not None,
                state=state)
