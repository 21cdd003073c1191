"""Launch an exported kernel through the CUDA driver API (``cuda.bindings.driver``), without Triton.

    la = Launcher("artifacts/export/linear_attention.json")
    la(q, k, v, o, scale=K**-0.5, sizes=dict(B=B, T=T, H=H, K=K, V=V))

Everything the launch needs comes from the manifest: the entry name, parameter order and types, threads per
block, dynamic shared memory, the grid rule and each buffer's size. Tensors are checked (device, dtype,
contiguity, alignment, element count) before anything is launched; the two trailing scratch pointers get NULL or,
when the kernel asks for scratch, a fresh buffer. Launches go on torch's current stream, in its primary context.
"""

from __future__ import annotations

import ctypes
import functools
import pathlib

from .manifest import ManifestError, check_int, load, read_image, resolve

__all__ = ["Launcher", "LaunchError", "ManifestError", "Prepared", "driver"]

_CTYPES = {"u1": ctypes.c_uint8, "i32": ctypes.c_int32, "i64": ctypes.c_int64, "u32": ctypes.c_uint32,
           "u64": ctypes.c_uint64, "fp32": ctypes.c_float, "fp64": ctypes.c_double}
_MAX_DEFAULT_SHARED = 48 * 1024


class LaunchError(RuntimeError):
    """A CUDA driver call that failed, with the driver's error name and description."""


def driver():
    """``cuda.bindings.driver``, imported on first use."""
    try:
        from cuda.bindings import driver as cu
    except ImportError as e:
        raise LaunchError("the Python launcher needs NVIDIA's cuda-bindings (pip install cuda-bindings); "
                          f"import failed: {e}") from None
    return cu


def _check(cu, result, what: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        _, desc = cu.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(err)
        desc = desc.decode() if isinstance(desc, bytes) else ""
        raise LaunchError(f"{what} failed: {name} ({desc})")
    return rest[0] if len(rest) == 1 else tuple(rest)


@functools.cache
def _torch_dtypes():
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64,
            "i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8}


class Prepared:
    """One fully packed launch: call :meth:`launch` any number of times (the benchmark's inner loop)."""

    def __init__(self, launcher: Launcher, grid, values: list, keep: list):
        self._l, self.grid, self._keep = launcher, grid, keep
        self._storage = values
        self._array = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        self._addr = ctypes.addressof(self._array)

    def launch(self, stream: int | None = None) -> None:
        lc = self._l
        s = lc._stream(stream)
        _check(lc._cu, lc._cu.cuLaunchKernel(lc._function, *self.grid, lc.block, 1, 1, lc.shared, s, self._addr, 0),
               f"cuLaunchKernel({lc.manifest['entry']})")


class Launcher:
    """A loaded export: ``Launcher(manifest_path, image="ptx"|"cubin")``, then call it with tensors.

    ``Launcher(manifest_dict, data=image_bytes)`` loads an image held in memory instead (the grader's cubins).
    """

    def __init__(self, manifest: str | pathlib.Path | dict, *, image: str | None = None, device: int = 0,
                 data: bytes | None = None):
        self.manifest = m = manifest if isinstance(manifest, dict) else load(manifest)
        self.image = image or m["prefer"]
        data = read_image(m, self.image) if data is None else data
        self.block, self.shared = m["threads_per_block"], m["shared_bytes"]
        self._pointers = [p for p in m["params"] if p["kind"] == "pointer" and p["role"] != "unused"]
        self._free = [p for p in m["params"] if p["kind"] == "scalar" and p.get("value") is None]
        self._plans: dict[tuple, object] = {}  # sizes -> resolved plan: a launch loop resolves once
        self._cu = cu = driver()
        _check(cu, cu.cuInit(0), "cuInit")
        dev = _check(cu, cu.cuDeviceGet(device), f"cuDeviceGet({device})")
        self._ctx = _check(cu, cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _check(cu, cu.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")
        image_buf = ctypes.create_string_buffer(data)  # NUL-terminated, as PTX must be
        self._module = _check(cu, cu.cuModuleLoadData(ctypes.addressof(image_buf)),
                              f"cuModuleLoadData({m['images'][self.image]})")
        self._function = _check(cu, cu.cuModuleGetFunction(self._module, m["entry"].encode()),
                                f"cuModuleGetFunction({m['entry']})")
        if self.shared > _MAX_DEFAULT_SHARED:
            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(cu, cu.cuFuncSetAttribute(self._function, attr, self.shared),
                   f"cuFuncSetAttribute(max dynamic shared = {self.shared})")

    def _stream(self, stream):
        if stream is None:
            import torch

            stream = torch.cuda.current_stream().cuda_stream
        return self._cu.CUstream(int(stream))

    def signature(self) -> str:
        ptrs = ", ".join(p["name"] for p in self._pointers)
        free = ", ".join(p["name"] for p in self._free)
        return f"{self.manifest['kernel']}({ptrs}{', ' + free if free else ''}, sizes={self.manifest['sizes']})"

    def prepare(self, *args, sizes: dict[str, int] | None = None, **kwargs) -> Prepared:
        """Check the arguments against the manifest and pack them; tensors first, then free scalars.

        A pointer may also be given as an ``int`` device address (from another library): only its alignment can
        be checked then.
        """
        import torch

        m = self.manifest
        order = self._pointers + self._free
        if len(args) > len(order):
            raise TypeError(f"{self.signature()} takes {len(order)} arguments, got {len(args)}")
        bound = dict(zip((p["name"] for p in order), args))
        for k, v in kwargs.items():
            if k in bound:
                raise TypeError(f"{m['kernel']}: {k} given twice")
            if k not in {p["name"] for p in order}:
                raise TypeError(f"{m['kernel']}: unknown argument {k!r}; {self.signature()}")
            bound[k] = v
        missing = [p["name"] for p in order if p["name"] not in bound]
        if missing:
            raise TypeError(f"{m['kernel']}: missing {missing}; {self.signature()}")
        key = tuple(sorted((sizes or {}).items()))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = resolve(m, dict(sizes or {}))
        dtypes = _torch_dtypes()
        values, keep = [], []
        for p in m["params"]:
            name = p["name"]
            if p["kind"] == "pointer":
                if p["role"] == "unused":
                    values.append(ctypes.c_uint64(0))
                    continue
                t = bound[name]
                if isinstance(t, int) and not isinstance(t, bool):
                    if t <= 0 or t >= 2**64 or t % p["align"]:
                        raise ValueError(f"{name}: device address {t:#x} is not a valid {p['align']}-byte aligned "
                                         "pointer")
                    values.append(ctypes.c_uint64(t))
                    continue
                if not isinstance(t, torch.Tensor):
                    raise TypeError(f"{name} must be a torch.Tensor (or a device address), got {type(t).__name__}")
                if t.device.type != "cuda":
                    raise ValueError(f"{name} is on {t.device}; the kernel reads GPU memory (use .cuda())")
                want = dtypes.get(p["dtype"])
                if t.dtype != want:
                    raise TypeError(f"{name} has dtype {t.dtype}; the export was compiled for {want} ({p['type']})")
                if not t.is_contiguous():
                    raise ValueError(f"{name} must be contiguous (strides {t.stride()}); the manifest's strides "
                                     "assume a packed layout")
                if t.numel() < plan.numel[name]:
                    raise ValueError(f"{name} holds {t.numel()} elements; {p['numel']} = {plan.numel[name]} needed")
                if t.data_ptr() % p["align"]:
                    raise ValueError(f"{name} starts at {t.data_ptr():#x}, not {p['align']}-byte aligned as the "
                                     "kernel was compiled to assume")
                keep.append(t)
                values.append(ctypes.c_uint64(t.data_ptr()))
            else:
                v = plan.scalars[name] if plan.scalars[name] is not None else bound[name]
                if p["type"].startswith("fp"):
                    if isinstance(v, bool) or not isinstance(v, (int, float)):
                        raise TypeError(f"{name} must be a number ({p['type']}), got {v!r}")
                    v = float(v)
                else:
                    check_int(m, p, v)
                values.append(_CTYPES[p["type"]](v))
        for (size, spec) in zip(plan.scratch_bytes, m["scratch"]):
            if size:
                buf = torch.empty(size + spec["align"], dtype=torch.uint8, device="cuda")
                keep.append(buf)
                addr = buf.data_ptr()
                values.append(ctypes.c_uint64(addr + (-addr) % spec["align"]))
            else:
                values.append(ctypes.c_uint64(0))
        return Prepared(self, plan.grid, values, keep)

    def __call__(self, *args, sizes: dict[str, int] | None = None, stream: int | None = None, **kwargs) -> None:
        self.prepare(*args, sizes=sizes, **kwargs).launch(stream)

    def __repr__(self) -> str:
        return f"Launcher({self.signature()}, image={self.image})"

