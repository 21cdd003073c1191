"""Input checks shared by the recurrent kernels."""

import torch
import triton

from ..validate import FLOAT_DTYPES, check_same, check_tensor

#: The largest key dimension: the kernels hold a [next_pow2(K), BV] state tile per program.
MAX_K = 256


def check_inputs(q, k, v, scale, initial_state, block_v):
    """Validate the recurrence's inputs; returns ``(B, T, H, K, V, scale, BK, BV)``."""
    check_tensor("q", q, ndim=4)
    check_tensor("k", k, ndim=4)
    check_tensor("v", v, ndim=4)
    check_same("dtype", q=q, k=k, v=v)
    check_same("device", q=q, k=k, v=v)
    if q.shape != k.shape:
        raise ValueError(f"q and k must have one shape [B, T, H, K]; got {tuple(q.shape)} and {tuple(k.shape)}")
    B, T, H, K = q.shape
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(f"v must be [B, T, H, V] with q's B, T, H = {B}, {T}, {H}; got {tuple(v.shape)}")
    V = v.shape[3]
    if min(B, T, H, K, V) < 1:
        raise ValueError(f"every dimension must be at least 1; got q {tuple(q.shape)}, v {tuple(v.shape)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if sum((n - 1) * st for n, st in zip(t.shape, t.stride())) >= 2**31:
            raise ValueError(f"{name} spans 2**31 elements or more (shape {tuple(t.shape)}, strides {t.stride()}); "
                             "the kernels index with int32")
    if K > MAX_K:
        raise ValueError(f"K={K} exceeds the limit {MAX_K} (the state tile is next_pow2(K) x BV per program)")
    if initial_state is not None:
        check_tensor("initial_state", initial_state, dtypes=FLOAT_DTYPES, ndim=4, contiguous=True)
        if tuple(initial_state.shape) != (B, H, K, V):
            raise ValueError(f"initial_state must be [B, H, K, V] = {(B, H, K, V)}, got {tuple(initial_state.shape)}")
    if scale is None:
        scale = K**-0.5
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a Python float, got {type(scale).__name__}")
    BK = triton.next_power_of_2(K)
    if block_v is None:
        BV = min(triton.next_power_of_2(V), max(16, 2048 // BK))
    else:
        if block_v < 16 or block_v & (block_v - 1) or block_v > 256:
            raise ValueError(f"block_v={block_v} must be a power of two in [16, 256]")
        BV = block_v
    return B, T, H, K, V, float(scale), BK, BV


def output(name: str, out: torch.Tensor | None, shape: tuple, dtype: torch.dtype, like: torch.Tensor) -> torch.Tensor:
    """``out`` checked against the expected shape and dtype (any strides with a unit last one), or a new tensor."""
    if out is None:
        return torch.empty(shape, dtype=dtype, device=like.device)
    check_tensor(name, out, dtypes=(dtype,), ndim=len(shape))
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(out.shape)}")
    return out
