"""Input checks shared by every linear-attention version: a clear error before anything is launched."""

from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass

import torch

from ..validate import FLOAT_DTYPES, check_same, check_tensor

__all__ = ["MAX_HEAD_K", "Shape", "check_inputs", "check_scale", "check_cu_seqlens", "host_offsets",
           "offsets_read_once"]

#: The key head size a version keeps whole on-chip: the state tile is [K, BV] fp32.
MAX_HEAD_K = 256


@dataclass(frozen=True)
class Shape:
    """The sizes a checked call describes: ``N`` sequences (``B``, or ``len(cu_seqlens) - 1``)."""

    B: int
    T: int
    H: int
    K: int
    V: int
    N: int
    varlen: bool


# (the cu_seqlens tensor, its offsets on the host) while one chunk_linear_attn call runs: the dispatch rule, the
# checks and the lookback's segment table each need the offsets, and each read of a device tensor waits for it
_KNOWN_OFFSETS: contextvars.ContextVar = contextvars.ContextVar("known_offsets", default=None)


def host_offsets(cu_seqlens: torch.Tensor) -> list[int]:
    """``cu_seqlens`` as a list on the host: read from the device once per :func:`offsets_read_once` block."""
    known = _KNOWN_OFFSETS.get()
    if known is not None and known[0] is cu_seqlens:
        return known[1]
    return _read(cu_seqlens)


def _read(cu_seqlens: torch.Tensor) -> list[int]:
    return cu_seqlens.tolist()  # waits for the device when the tensor lives there


_NOTHING = contextlib.nullcontext()


def offsets_read_once(cu_seqlens):
    """Within this block, :func:`host_offsets` of this very tensor reuses one read. Only for the span of one
    call: the tensor cannot change under it, as it could between calls (a kernel writing new offsets)."""
    if cu_seqlens is None:
        return _NOTHING  # no offsets: no generator to run (a step enters this four times)
    known = _KNOWN_OFFSETS.get()
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or (known and known[0] is cu_seqlens):
        return _NOTHING  # not offsets (the checks say what is wrong), or read already by an enclosing block
    return _read_once(cu_seqlens)


@contextlib.contextmanager
def _read_once(cu_seqlens):
    token = _KNOWN_OFFSETS.set((cu_seqlens, _read(cu_seqlens)))
    try:
        yield
    finally:
        _KNOWN_OFFSETS.reset(token)


def check_cu_seqlens(cu_seqlens, T: int, B: int) -> int:
    """``cu_seqlens`` holds N+1 non-decreasing offsets from 0 to T into a batch of one; return N."""
    check_tensor("cu_seqlens", cu_seqlens, dtypes=(torch.int32, torch.int64), ndim=1)
    if B != 1:
        raise ValueError(f"with cu_seqlens the batch size must be 1 (sequences packed along T), got B={B}; "
                         "flatten the batch first")
    if cu_seqlens.numel() < 2:
        raise ValueError(f"cu_seqlens needs at least 2 offsets [0, ..., T], got {cu_seqlens.numel()}")
    offsets = host_offsets(cu_seqlens)
    if offsets[0] != 0 or offsets[-1] != T:
        raise ValueError(f"cu_seqlens must start at 0 and end at T={T}, got {offsets[0]} ... {offsets[-1]}")
    steps = [b - a for a, b in zip(offsets, offsets[1:])]
    if min(steps) < 0:
        at = steps.index(min(steps))
        raise ValueError(f"cu_seqlens must be non-decreasing (monotonic), but it drops from {offsets[at]} to "
                         f"{offsets[at + 1]} at index {at + 1}")
    return len(offsets) - 1


def check_scale(scale) -> None:
    """``scale`` is a finite number (not a bool)."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise TypeError(f"scale must be a finite number, got {scale!r}")


def check_inputs(q, k, v, scale, initial_state=None, output_final_state=False, cu_seqlens=None, *,
                 max_k: int = MAX_HEAD_K) -> Shape:
    """Validate one call of ``<version>_linear_attention``; return its sizes."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, ndim=4)
    check_same("dtype", q=q, k=k, v=v)
    if k.shape != q.shape:
        raise ValueError(f"k must have q's shape [B, T, H, K] = {tuple(q.shape)}, got {tuple(k.shape)}")
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(f"v must be [B, T, H, V] with q's B, T, H = {tuple(q.shape[:3])}, got {tuple(v.shape)}")
    B, T, H, K = q.shape
    V = v.shape[-1]
    if H < 1 or K < 1 or V < 1:
        raise ValueError(f"H, K and V must be at least 1, got H={H}, K={K}, V={V}")
    if K > max_k:
        raise ValueError(f"head size K={K} exceeds the limit {max_k} (the whole [K, BV] state stays on-chip)")
    check_scale(scale)
    if not isinstance(output_final_state, bool):
        raise TypeError(f"output_final_state must be a bool, got {type(output_final_state).__name__}")
    N = B if cu_seqlens is None else check_cu_seqlens(cu_seqlens, T, B)
    if initial_state is not None:
        if isinstance(initial_state, tuple):
            raise TypeError("initial_state must be a tensor [N, H, K, V] here; the (kv_state, z_state) tuple "
                            "belongs to normalize=True")
        check_tensor("initial_state", initial_state, dtypes=FLOAT_DTYPES, ndim=4, contiguous=True)
        if tuple(initial_state.shape) != (N, H, K, V):
            what = "len(cu_seqlens) - 1" if cu_seqlens is not None else "B"
            raise ValueError(f"initial_state must have shape [N, H, K, V] = {(N, H, K, V)} (N = {what}), "
                             f"got {tuple(initial_state.shape)}")
    return Shape(B, T, H, K, V, N, cu_seqlens is not None)
