"""Messages between the grader and its workers: a JSON header and raw tensor bytes, never pickle.

The grader must not unpickle anything a worker sends (unpickling runs code). A message is a 4-byte header length,
the UTF-8 JSON header, then the tensors' bytes in the order the header lists them. Tensors travel as their
contiguous bytes with shape and strides, and come back as CPU tensors.
"""

from __future__ import annotations

import json
import math
import struct

import torch

__all__ = ["WireError", "TooLarge", "encode", "decode", "send_frame", "recv_frame", "moved", "DTYPES"]

DTYPES = {str(d).replace("torch.", ""): d for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16,
                                                     torch.int64, torch.int32, torch.int16, torch.int8,
                                                     torch.uint8, torch.bool)}


class WireError(ValueError):
    """A malformed message."""


def _flatten(obj, tensors: list, path: str):
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        tensors.append(t.to("cpu").contiguous())
        head = {"__tensor__": len(tensors) - 1, "dtype": str(t.dtype).replace("torch.", ""),
                "shape": list(t.shape), "stride": list(t.stride()) if t.is_contiguous() is False else None}
        if t.numel() and t.data_ptr() % _ALIGN:  # a view off the allocator's alignment arrives as one (x[1:])
            head["misalign"] = t.data_ptr() % _ALIGN
        return head
    if isinstance(obj, dict):
        return {str(k): _flatten(v, tensors, f"{path}.{k}") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_flatten(v, tensors, f"{path}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, float) and not math.isfinite(obj):
        return {"__float__": repr(obj)}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise WireError(f"{path}: cannot send a {type(obj).__name__}")


_ALIGN = 64  # bytes: torch's CPU allocator aligns every tensor to this; a tensor keeps its address modulo it


def _placed(shape: list, stride: list, dtype, size: int, misalign: int, device="cpu") -> torch.Tensor:
    """An empty tensor of ``shape`` and ``stride`` (elements of ``size`` bytes) whose first element lies
    ``misalign`` bytes past a multiple of :data:`_ALIGN` (on ``device``, whose allocator aligns to it too)."""
    k = misalign // size
    extent = 1 + sum((n - 1) * st for n, st in zip(shape, stride)) if all(shape) else 0
    return torch.empty(extent + k, dtype=dtype, device=device).as_strided(shape, stride, k)


def moved(t: torch.Tensor, device) -> torch.Tensor:
    """``t`` copied to ``device`` with its strides and its address modulo :data:`_ALIGN` as they are: ``.to()``
    would hand a view one element in (lesson 05's misaligned tensor) over as a fresh, aligned allocation."""
    misalign = t.data_ptr() % _ALIGN if t.numel() else 0
    if not misalign and t.is_contiguous():
        return t.to(device, copy=True)
    out = _placed(list(t.shape), list(t.stride()), t.dtype, t.element_size(), misalign, device)
    out.copy_(t)
    return out


def _contiguous(shape: list) -> list:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return out[::-1]


def encode(message: dict) -> bytes:
    """One message: plain data and tensors, nested in dicts and lists."""
    tensors: list[torch.Tensor] = []
    header = _flatten(message, tensors, "message")
    blobs = [t.view(torch.uint8).reshape(-1).numpy().tobytes() if t.numel() else b"" for t in tensors]
    meta = json.dumps({"body": header, "sizes": [len(b) for b in blobs]}).encode()
    return struct.pack("<I", len(meta)) + meta + b"".join(blobs)


def _rebuild(obj, blobs: list[bytes]):
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            i = obj["__tensor__"]
            if not isinstance(i, int) or not 0 <= i < len(blobs):
                raise WireError("bad tensor index")
            dtype = DTYPES.get(obj.get("dtype"))
            shape = obj.get("shape")
            if dtype is None or not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
                raise WireError("bad tensor header")
            n = math.prod(shape)
            size = torch.empty((), dtype=dtype).element_size()
            if len(blobs[i]) != n * size:
                raise WireError(f"tensor {i}: {len(blobs[i])} bytes for shape {shape} of {dtype}")
            # cloned into torch's own memory, aligned to 64 bytes: a bytearray's buffer need not be 16-aligned, and
            # the tensor may reach code that requires it (lesson 05's launch refuses a misaligned pointer)
            t = torch.frombuffer(bytearray(blobs[i]), dtype=dtype).clone().reshape(shape) if n else \
                torch.empty(shape, dtype=dtype)
            stride = obj.get("stride")
            misalign = obj.get("misalign") or 0
            if not (isinstance(misalign, int) and 0 <= misalign < _ALIGN and misalign % size == 0):
                raise WireError("bad tensor alignment")
            if stride:
                if not (isinstance(stride, list) and len(stride) == len(shape)
                        and all(isinstance(s, int) and s >= 0 for s in stride)):
                    raise WireError("bad tensor strides")
            if stride or (misalign and n):
                out = _placed(shape, stride or _contiguous(shape), dtype, size, misalign if n else 0)
                out.copy_(t)
                return out
            return t
        if "__float__" in obj:
            return float(obj["__float__"])
        return {k: _rebuild(v, blobs) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rebuild(v, blobs) for v in obj]
    return obj


def decode(data: bytes) -> dict:
    """The inverse of :func:`encode`; raises :class:`WireError` on anything malformed."""
    if len(data) < 4:
        raise WireError("short message")
    (n,) = struct.unpack("<I", data[:4])
    try:
        meta = json.loads(data[4: 4 + n].decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise WireError(f"bad header: {e}") from None
    sizes = meta.get("sizes") if isinstance(meta, dict) else None
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes):
        raise WireError("bad sizes")
    if 4 + n + sum(sizes) != len(data):
        raise WireError("length mismatch")
    blobs, off = [], 4 + n
    for s in sizes:
        blobs.append(data[off: off + s])
        off += s
    body = _rebuild(meta.get("body"), blobs)
    if not isinstance(body, dict):
        raise WireError("message is not a dict")
    return body


class TooLarge(WireError):
    """A message over the receiver's cap (its size is known; nothing of it was read)."""

    def __init__(self, size: int, cap: int):
        super().__init__(f"a message of {size / 2**20:.1f} MiB, more than the {cap / 2**20:.1f} MiB allowed")
        self.size, self.cap = size, cap


def send_frame(sock, data: bytes) -> None:
    """One message on a stream socket: its 8-byte length, then the bytes."""
    sock.sendall(struct.pack("<Q", len(data)) + data)


def _exactly(sock, n: int) -> bytes:
    parts, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the channel closed")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def recv_frame(sock, cap: int | None = None) -> bytes:
    """The next message; over ``cap`` bytes raises :class:`TooLarge` before reading any of it."""
    (n,) = struct.unpack("<Q", _exactly(sock, 8))
    if cap is not None and n > cap:
        raise TooLarge(n, cap)
    return _exactly(sock, n)
