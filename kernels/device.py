"""Where the workbook's kernels run, decided once.

With CUDA present, kernels run on the GPU. Without it, ``TRITON_INTERPRET=1`` is set before any kernel is
decorated, so every ``@triton.jit`` function (the package's and the learner's own) runs in Triton's interpreter
on CPU tensors, and :func:`sizes` hands out shapes small enough for that to finish in seconds.
"""

from __future__ import annotations

import os
import sys

import torch

__all__ = [
    "DEVICE",
    "INTERPRET",
    "ON_GPU",
    "MODE",
    "describe",
    "machine",
    "sizes",
    "pick",
    "sync",
    "upcast_for_dot",
]


_ENV = os.environ.get("TRITON_INTERPRET", "").strip().lower()
#: ``TRITON_INTERPRET=0`` set by hand: this process compiles kernels ahead of time (the checks' sm_90 compile),
#: so Triton's own ``@jit`` helpers must stay compiled-mode functions.
_COMPILE_ONLY = _ENV in ("0", "false", "no", "off")


def _decide() -> tuple[bool, bool]:
    forced = _ENV in ("1", "true", "yes", "on")
    cuda = torch.cuda.is_available()
    if not cuda and not forced:
        os.environ["TRITON_INTERPRET"] = "1"
        forced = True
    return cuda and not forced, forced


def _interpret_preloaded_triton() -> None:
    """Triton's own ``@jit`` helpers (``tl.zeros``, ``tl.cdiv``, ...) are decorated when ``triton.language`` is
    imported: imported before this module set TRITON_INTERPRET, they are compiled-mode functions that the
    interpreter refuses to call. Rewrap them, so the import order of a notebook does not matter."""
    if "triton.language" not in sys.modules:
        return
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    wrapped: dict[int, InterpretedFunction] = {}
    for name, mod in list(sys.modules.items()):
        if not name.startswith("triton.language") or mod is None:
            continue
        for attr, obj in list(vars(mod).items()):
            if isinstance(obj, JITFunction):
                setattr(mod, attr, wrapped.setdefault(id(obj), InterpretedFunction(obj.fn)))


ON_GPU, INTERPRET = _decide()
if INTERPRET and not _COMPILE_ONLY:
    _interpret_preloaded_triton()
#: Device for every tensor a kernel touches: ``cuda`` on a GPU, ``cpu`` under the interpreter.
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
#: ``"gpu"`` or ``"interpreter"``.
MODE = "gpu" if ON_GPU else "interpreter"


def describe() -> str:
    """One line saying where kernels run, with versions."""
    import triton

    if ON_GPU:
        props = torch.cuda.get_device_properties(0)
        where = f"GPU: {props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB"
    else:
        where = "no GPU: Triton interpreter on the CPU (TRITON_INTERPRET=1), small sizes"
    return f"{where} | torch {torch.__version__}, triton {triton.__version__}"


# Shapes per topic: small enough for the interpreter on two CPU cores, large enough to fill an H200.
_SIZES: dict[str, dict[str, dict]] = {
    "vector_add": {
        "interpreter": dict(n=1000),
        "gpu": dict(n=2**26 + 17),
    },
    "memory": {
        "interpreter": dict(n=10_000, stride=4, reuse=4),
        "gpu": dict(n=2**28 + 17, stride=8, reuse=8),
    },
    "recurrent": {
        "interpreter": dict(B=1, H=2, T=37, K=16, V=16),
        "gpu": dict(B=4, H=16, T=2048, K=64, V=64),
    },
    "matmul": {
        "interpreter": dict(M=45, N=37, K=70),
        "gpu": dict(M=4096 + 3, N=4096 + 5, K=4096 + 7),
    },
    "linear_attention": {
        "interpreter": dict(B=1, H=2, T=100, K=32, V=32),
        "gpu": dict(B=4, H=16, T=4096, K=128, V=128),
    },
}


def sizes(topic: str) -> dict:
    """The default shapes for ``topic`` in the current mode (a fresh dict each call)."""
    try:
        return dict(_SIZES[topic][MODE])
    except KeyError:
        raise KeyError(f"no sizes for topic {topic!r}; known: {sorted(_SIZES)}") from None


def pick(*, cpu, gpu):
    """``gpu`` on a GPU, ``cpu`` under the interpreter."""
    return gpu if ON_GPU else cpu


_DRIVER: list[str] = []


def machine() -> dict:
    """The record of where a result was measured, for every results file: date, mode, the one-line description,
    torch, Triton and Python versions, and on a GPU its name and driver version."""
    import datetime
    import platform

    import triton

    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "mode": MODE,
              "where": describe(), "torch": torch.__version__, "triton": triton.__version__,
              "python": platform.python_version()}
    if ON_GPU:
        if not _DRIVER:
            import subprocess

            try:
                _DRIVER.append(subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                              capture_output=True, text=True, timeout=30).stdout.strip())
            except (OSError, subprocess.SubprocessError):
                _DRIVER.append("unknown")
        record.update(gpu=torch.cuda.get_device_name(0), driver=_DRIVER[0])
    return record


def sync() -> None:
    """Wait for the GPU's queued work (before reading a clock or a result); nothing under the interpreter, and
    nothing where this process has not touched CUDA (a sync would create a context)."""
    if ON_GPU and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _workspace(size: int, alignment: int, stream) -> torch.Tensor:
    """Global memory for the descriptors a kernel builds on the device (128 bytes per descriptor)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def ensure_triton_allocator() -> None:
    """Give Triton an allocator for descriptors built on the device (``tl.make_tensor_descriptor``: TMA loads and
    stores), unless the caller has set one of their own. Triton keeps it per thread (a context variable): call it
    in the thread that launches."""
    import triton
    from triton.runtime import _allocation

    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(_workspace)


def upcast_for_dot(dtype: torch.dtype) -> bool:
    """Whether a kernel must upcast its tiles to fp32 before ``tl.dot``.

    Triton's interpreter computes bf16 ``tl.dot`` wrongly (relative error ~1e9, triton 3.6 and 3.9), while
    fp16 and fp32 dots and bf16 loads and stores are right. Kernels take this as a constexpr.
    """
    return INTERPRET and dtype == torch.bfloat16
