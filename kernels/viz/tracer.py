"""Record every load and store a Triton kernel makes, per program id, by running it in Triton's interpreter.

``trace(kernel, *args, grid=grid)`` (or ``trace(wrapper, *args)``, which records every launch the wrapper makes)
runs the launch with the interpreter's builder wrapped: each masked load/store (plain pointers, block pointers
and descriptors all end there) and each atomic is mapped back to the tensor argument whose address range holds
its lanes. Unmasked lanes that fall outside that tensor are recorded as out of bounds and masked off before the
access runs, so a wrong kernel is reported instead of corrupting memory. The masked-off lanes of a float load
without ``other=`` read NaN (compiled, they are undefined; the plain interpreter reads 0). Works on a kernel
defined in a notebook cell, unchanged; on a GPU machine a ``@triton.jit`` kernel is run through the interpreter
on CPU copies.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
import triton
import triton.runtime.interpreter as _interp
from triton.runtime.jit import JITFunction

__all__ = ["trace", "Trace", "Launch", "Access", "OutOfBounds", "TensorInfo", "recording"]

_TRITON_DIR = os.path.dirname(triton.__file__)
_THIS_FILE = __file__


@dataclass
class TensorInfo:
    """One tensor argument of a launch, named by its parameter (``args[0]`` inside a tuple: ``name[0]``)."""

    name: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    itemsize: int
    base: int  # address of element 0
    lo: int  # lowest byte address of any element
    hi: int  # one past the highest byte of any element
    lookup: np.ndarray | None  # storage offset (from lo) -> flat index, -1 for gaps; None when dense row-major
    source_ptr: int = 0  # data_ptr() of the tensor the caller passed (a CUDA tensor is traced on a CPU copy)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1

    def unravel(self, flat) -> tuple:
        return np.unravel_index(np.asarray(flat), self.shape) if self.shape else ()


@dataclass
class Access:
    """One load, store or atomic of one program: ``index`` holds the tensor's flat element index of every lane
    (``-1`` where the kernel's mask is off or the lane is out of bounds), shaped like the kernel's block."""

    kind: str  # "load", "store" or "atomic"
    tensor: str
    pid: tuple[int, int, int]
    step: int  # how many times this program ran this line before (the loop step)
    order: int  # position among this program's accesses
    line: int
    source: str
    index: np.ndarray
    offset: np.ndarray  # every lane's element offset from the tensor's first element, masked or not
    mask: np.ndarray  # the kernel's own mask (True: lane active)
    oob: np.ndarray  # active lanes outside the tensor
    nbytes: int  # bytes of in-bounds active lanes

    def elements(self) -> np.ndarray:
        """Flat indices of the in-bounds active lanes."""
        return self.index[self.index >= 0]


@dataclass
class OutOfBounds:
    """Unmasked lanes of one access outside the tensor they point into (offsets in elements from its start)."""

    kind: str
    tensor: str
    pid: tuple[int, int, int]
    step: int
    line: int
    source: str
    offsets: np.ndarray
    numel: int

    def __str__(self) -> str:
        offs = np.sort(self.offsets)
        shown = ", ".join(str(int(o)) for o in offs[:6]) + (", ..." if offs.size > 6 else "")
        return (f"program {self.pid} {self.kind} of {self.tensor!r} (line {self.line}, step {self.step}): "
                f"{offs.size} unmasked lane(s) outside its {self.numel} elements, at element offsets {shown}")


@dataclass
class Launch:
    """Everything one kernel launch did, program by program."""

    kernel: str
    grid: tuple[int, int, int]
    tensors: dict[str, TensorInfo]
    accesses: list[Access] = field(default_factory=list)
    out_of_bounds: list[OutOfBounds] = field(default_factory=list)
    outputs: tuple[str, ...] | None = None

    # --- queries -------------------------------------------------------------------------------------------
    def programs(self) -> list[tuple[int, int, int]]:
        """Program ids in launch order."""
        return [(x, y, z) for x in range(self.grid[0]) for y in range(self.grid[1]) for z in range(self.grid[2])]

    def select(self, tensor: str | None = None, kind: str | None = None, pid=None, step: int | None = None,
               line: int | None = None) -> list[Access]:
        """The accesses matching every given filter (``pid`` as an int means ``(pid, 0, 0)``)."""
        pid = _pid(pid)
        self._known(tensor)
        return [a for a in self.accesses
                if (tensor is None or a.tensor == tensor) and (kind is None or a.kind == kind)
                and (pid is None or a.pid == pid) and (step is None or a.step == step)
                and (line is None or a.line == line)]

    def elements(self, tensor: str, kind: str | None = None, pid=None, step: int | None = None,
                 coords: bool = False) -> set:
        """The set of elements of ``tensor`` touched (flat indices, or index tuples with ``coords=True``)."""
        acc = self.select(tensor, kind, pid, step)
        flat = np.unique(np.concatenate([a.elements() for a in acc])) if acc else np.empty(0, np.int64)
        if not coords:
            return {int(i) for i in flat}
        return {tuple(int(c) for c in t) for t in zip(*self.tensors[tensor].unravel(flat))}

    def counts(self, tensor: str, kind: str | None = None, pid=None, step: int | None = None) -> np.ndarray:
        """How many times each element of ``tensor`` was touched, shaped like the tensor."""
        info = self.tensors[tensor]
        n = np.zeros(info.numel, dtype=np.int64)
        for a in self.select(tensor, kind, pid, step):
            np.add.at(n, a.elements(), 1)
        return n.reshape(info.shape)

    def steps(self, pid=None, tensor: str | None = None) -> int:
        """The number of loop steps (the most times any one line ran in one program)."""
        acc = self.select(tensor, pid=pid)
        return 1 + max((a.step for a in acc), default=0)

    def bytes(self, pid=None) -> dict[str, dict[str, int]]:
        """Bytes loaded and stored per tensor (``pid``: one program only)."""
        out = {name: {"load": 0, "store": 0} for name in self.tensors}
        for a in self.select(pid=pid):
            kinds = ("load", "store") if a.kind == "atomic" else (a.kind,)
            for k in kinds:
                out[a.tensor][k] += a.nbytes
        return out

    def bytes_per_program(self) -> dict[tuple[int, int, int], int]:
        """Total bytes (loaded + stored) per program id."""
        tot: dict[tuple[int, int, int], int] = defaultdict(int)
        for a in self.accesses:
            tot[a.pid] += a.nbytes * (2 if a.kind == "atomic" else 1)
        return {p: tot.get(p, 0) for p in self.programs()}

    def written(self) -> list[str]:
        """Tensors the launch stored to (or the ``outputs`` named when tracing)."""
        if self.outputs is not None:
            return list(self.outputs)
        return [n for n in self.tensors if any(a.tensor == n and a.kind != "load" for a in self.accesses)]

    def unwritten(self) -> dict[str, np.ndarray]:
        """Per output tensor, the flat indices of elements no program stored."""
        res = {}
        for name in self.written():
            done = np.zeros(self.tensors[name].numel, dtype=bool)
            for a in self.select(name):
                if a.kind != "load":
                    done[a.elements()] = True
            res[name] = np.flatnonzero(~done)
        return res

    def summary(self) -> str:
        """A table: per tensor, bytes moved, distinct elements, reuse, out-of-bounds lanes, unwritten elements."""
        rows = [f"{self.kernel}  grid={self.grid}  programs={len(self.programs())}",
                f"{'tensor':<12}{'shape':<16}{'dtype':<10}{'loaded B':>11}{'stored B':>11}{'reuse':>7}"
                f"{'OOB lanes':>11}{'unwritten':>11}"]
        by = self.bytes()
        unw = self.unwritten()
        for name, info in self.tensors.items():
            distinct = len(self.elements(name, "load")) * info.itemsize
            reuse = by[name]["load"] / distinct if distinct else 0.0
            oob = sum(o.offsets.size for o in self.out_of_bounds if o.tensor == name)
            rows.append(f"{name:<12}{str(tuple(info.shape)):<16}{str(info.dtype).replace('torch.', ''):<10}"
                        f"{by[name]['load']:>11}{by[name]['store']:>11}{reuse:>7.2f}{oob:>11}"
                        f"{(unw[name].size if name in unw else '-'):>11}")
        for o in self.out_of_bounds[:5]:
            rows.append("out of bounds: " + str(o))
        if len(self.out_of_bounds) > 5:
            rows.append(f"... and {len(self.out_of_bounds) - 5} more out-of-bounds accesses")
        return "\n".join(rows)

    def check(self) -> None:
        """Raise ``AssertionError`` naming the first problem: out-of-bounds lanes, then unwritten elements."""
        if self.out_of_bounds:
            raise AssertionError(f"{len(self.out_of_bounds)} access(es) out of bounds; first: {self.out_of_bounds[0]}")
        for name, idx in self.unwritten().items():
            if idx.size:
                first = tuple(int(c) for c in self.tensors[name].unravel(idx[0]))
                raise AssertionError(f"{name}: {idx.size} of {self.tensors[name].numel} elements never written "
                                     f"(first at {first})")

    def _known(self, tensor):
        if tensor is not None and tensor not in self.tensors:
            raise KeyError(f"no tensor argument named {tensor!r}; this launch has {list(self.tensors)}")


class Trace(list):
    """The launches one traced call made (a list of :class:`Launch`); attribute access goes to the only or last
    launch, so ``trace(kernel, ..., grid=g).elements("x")`` reads naturally. ``result`` is the call's return."""

    result: object = None

    def __getattr__(self, name):
        if name.startswith("_") or not len(self):
            raise AttributeError(name)
        return getattr(self[-1], name)

    def __repr__(self) -> str:
        return "\n\n".join(la.summary() for la in self) or "Trace(no kernel launches)"


def _pid(pid):
    if pid is None:
        return None
    if isinstance(pid, int | np.integer):
        return (int(pid), 0, 0)
    pid = tuple(int(p) for p in pid)
    return pid + (0,) * (3 - len(pid))


def _tensor_info(name: str, t: torch.Tensor) -> TensorInfo:
    itemsize = t.element_size()
    base = t.data_ptr()
    if t.numel() == 0:
        return TensorInfo(name, tuple(t.shape), tuple(t.stride()), t.dtype, itemsize, base, base, base, None)
    lo_off = sum(min(0, (s - 1) * st) for s, st in zip(t.shape, t.stride()))
    hi_off = sum(max(0, (s - 1) * st) for s, st in zip(t.shape, t.stride()))
    lookup = None
    if not t.is_contiguous():
        offs = torch.zeros((), dtype=torch.int64)
        for d, (s, st) in enumerate(zip(t.shape, t.stride())):
            shape = [1] * t.dim()
            shape[d] = s
            offs = offs + (torch.arange(s, dtype=torch.int64) * st).view(shape)
        lookup = np.full(hi_off - lo_off + 1, -1, dtype=np.int64)
        lookup[(offs.reshape(-1) - lo_off).numpy()] = np.arange(t.numel())
    return TensorInfo(name, tuple(t.shape), tuple(t.stride()), t.dtype, itemsize, base,
                      base + lo_off * itemsize, base + (hi_off + 1) * itemsize, lookup)


def _base(value):
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, triton.runtime.jit.TensorWrapper) or isinstance(getattr(value, "base", None), torch.Tensor):
        return value.base  # a reinterpreted tensor, or a TensorDescriptor
    return None


def _collect(name, value, source, out: dict):
    if isinstance(value, tuple):
        for i, (v, src) in enumerate(zip(value, source)):
            _collect(f"{name}[{i}]", v, src, out)
        return
    t = _base(value)
    if t is not None:
        info = _tensor_info(name, t)
        src = _base(source)
        info.source_ptr = src.data_ptr() if src is not None else info.base
        out[name] = info


def _caller() -> tuple[int, str, str]:
    """(line, file, source) of the kernel line making the current access."""
    f = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        if fn != _THIS_FILE and not fn.startswith(_TRITON_DIR):
            break
        f = f.f_back
    if f is None:
        return 0, "", ""
    import linecache

    return f.f_lineno, f.f_code.co_filename, linecache.getline(f.f_code.co_filename, f.f_lineno).strip()


class _Recorder:
    def __init__(self, outputs):
        self.trace = Trace()
        self.outputs = outputs
        self.pid = (0, 0, 0)
        self.order = 0
        self.seen: dict[tuple, int] = {}
        self.pending: tuple[str, dict] | None = None

    # launch bookkeeping --------------------------------------------------------------------------------------
    def begin(self, name: str, tensors: dict[str, TensorInfo]):
        self.pending = (name, tensors)

    def grid(self, nx, ny, nz):
        name, tensors = self.pending or ("kernel", {})
        self.pending = None
        self.launch = Launch(name, (int(nx), int(ny), int(nz)), tensors, outputs=self.outputs)
        self.regions = list(tensors.values())  # parameter order: aliases are reported under the first name
        self.trace.append(self.launch)

    def program(self, x, y, z):
        self.pid = (int(x), int(y), int(z))
        self.order = 0
        self.seen = {}

    # one memory access -----------------------------------------------------------------------------------------
    def access(self, kind: str, ptrs, mask) -> np.ndarray:
        """Record the access; return the mask to run it with (out-of-bounds lanes switched off)."""
        addr = np.asarray(ptrs.data).astype(np.uint64)
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addr.shape) if mask is not None \
            else np.ones(addr.shape, dtype=bool)
        width = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        if not self.regions:
            return active
        flat_a, flat_m = addr.reshape(-1), active.reshape(-1).copy()
        # the lanes each tensor argument holds (views of one storage may overlap or interleave)
        hits, indices = [], []
        for info in self.regions:
            byte_off = flat_a.astype(np.int64) - np.int64(info.base)
            hit = (flat_a >= np.uint64(info.lo)) & (flat_a < np.uint64(info.hi)) & (byte_off % info.itemsize == 0)
            idx = np.full(flat_a.shape, -1, dtype=np.int64)
            if info.lookup is None:
                idx[hit] = byte_off[hit] // info.itemsize
            else:
                idx[hit] = info.lookup[(flat_a[hit] - np.uint64(info.lo)).astype(np.int64) // info.itemsize]
                hit &= idx >= 0
            hits.append(hit)
            indices.append(idx)
        owner = self._owner(hits, flat_m, flat_a)
        info, ok, index = self.regions[owner], hits[owner], indices[owner]
        elem_off = (flat_a.astype(np.int64) - np.int64(info.base)) // info.itemsize
        index[~ok] = -1
        oob = flat_m & ~ok
        index[~flat_m] = -1
        line, _file, src = _caller()
        key = (kind, line, _file)
        step = self.seen.get(key, 0)
        self.seen[key] = step + 1
        shape = addr.shape
        nbytes = int((flat_m & ok).sum()) * width
        self.launch.accesses.append(Access(kind, info.name, self.pid, step, self.order, line, src,
                                           index.reshape(shape), elem_off.reshape(shape),
                                           flat_m.reshape(shape).copy(),
                                           oob.reshape(shape), nbytes))
        self.order += 1
        if oob.any():
            self.launch.out_of_bounds.append(OutOfBounds(kind, info.name, self.pid, step, line, src,
                                                         elem_off[oob], info.numel))
        return (flat_m & ok).reshape(shape)

    def undefined(self, lanes: int) -> None:
        """A load without ``other=`` left ``lanes`` lanes masked off (they read NaN, :func:`_undefined`)."""

    def stored_nan(self) -> None:
        """A store wrote NaN in one of its lanes."""

    def _owner(self, hits, active, addr) -> int:
        """The tensor most active lanes point into (else most lanes; else the nearest one below)."""
        for sel in (active, np.ones_like(active)):
            counts = [int((h & sel).sum()) for h in hits]
            if max(counts):
                return int(np.argmax(counts))
        below = [i for i, r in enumerate(self.regions) if r.lo <= int(addr.min())]
        return max(below, key=lambda i: self.regions[i].lo) if below else 0


def _undefined(ptrs):
    """What the masked-off lanes of a load without ``other=`` read under the hooks: NaN where the element type is a
    float, so a kernel that lets them reach an output shows it. Compiled, such a lane is undefined (whatever the
    register held, often 0, sometimes not); Triton's interpreter alone reads 0, which hides the mistake. Integer
    lanes keep the interpreter's 0 (None)."""
    ty = ptrs.get_element_ty()
    if not ty.is_floating():
        return None
    np_dtype = np.dtype(_interp._get_np_dtype(ty))
    if ty.is_bf16():  # the interpreter holds bf16 as its bits
        nan = 0x7FC0
    elif np_dtype.kind == "f":
        nan = np.nan
    else:  # fp8, held as bits too
        return None
    return _interp.TensorHandle(np.full(ptrs.data.shape, nan, dtype=np_dtype), ty)


def _nan_lanes(value, active: np.ndarray) -> bool:
    """Whether a store writes NaN in any of its ``active`` lanes."""
    ty = value.get_element_ty()
    if not ty.is_floating():
        return False
    data = np.broadcast_to(np.asarray(value.data), active.shape)[active]
    if ty.is_bf16():
        return bool(((data.view(np.uint16) & 0x7FFF) > 0x7F80).any())
    return data.dtype.kind == "f" and bool(np.isnan(data).any())


#: how many traced calls (:func:`_hooks`) are under way in this process: a launch inside one is recorded already
_RECORDING = [0]


def recording() -> bool:
    """Whether a traced or bounds-checked call is under way (its recorder sees every launch inside it)."""
    return _RECORDING[0] > 0


@contextmanager
def _hooks(rec: _Recorder):
    """Wrap the interpreter's builder and launcher for the duration of one traced call."""
    b = _interp.interpreter_builder
    GE = _interp.GridExecutor
    saved_builder = {k: b.__dict__.get(k) for k in ("create_masked_load", "create_masked_store",
                                                    "create_atomic_rmw", "create_atomic_cas",
                                                    "set_grid_dim", "set_grid_idx")}
    orig_load, orig_store = b.create_masked_load, b.create_masked_store
    orig_rmw, orig_cas = b.create_atomic_rmw, b.create_atomic_cas
    orig_dim, orig_idx = b.set_grid_dim, b.set_grid_idx
    orig_init = GE._init_args_hst
    orig_run, orig_call = JITFunction.run, JITFunction.__call__
    interpreted: dict = {}

    def as_interpreted(jit_fn):
        if jit_fn.fn not in interpreted:
            interpreted[jit_fn.fn] = _interp.InterpretedFunction(jit_fn.fn)
        return interpreted[jit_fn.fn]

    undefined_seen = [False]  # a store's NaN can only come from undefined lanes once some were loaded

    def lanes(m, mask):
        # a block pointer's load or store (tl.make_block_ptr) hands its boundary mask as a bare numpy array
        return _interp.TensorHandle(m, mask.dtype if isinstance(mask, _interp.TensorHandle) else triton.language.int1)

    def load(ptrs, mask, other, *a, **k):
        m = rec.access("load", ptrs, mask)
        if other is None:
            other = _undefined(ptrs)
            if other is not None and not m.all():
                undefined_seen[0] = True
                rec.undefined(int(m.size - m.sum()))
        return orig_load(ptrs, lanes(m, mask), other, *a, **k)

    def store(ptrs, value, mask, *a, **k):
        m = rec.access("store", ptrs, mask)
        if undefined_seen[0] and _nan_lanes(value, m):
            rec.stored_nan()
        return orig_store(ptrs, value, lanes(m, mask), *a, **k)

    def rmw(op, ptr, val, mask, *a, **k):
        m = rec.access("atomic", ptr, mask)
        return orig_rmw(op, ptr, val, lanes(m, mask), *a, **k)

    def cas(ptr, cmp, val, *a, **k):
        m = rec.access("atomic", ptr, None)
        if not m.all():
            raise IndexError("atomic_cas out of bounds: " + str(rec.launch.out_of_bounds[-1]))
        return orig_cas(ptr, cmp, val, *a, **k)

    def init_args(self, args_dev, kwargs):
        args_hst, kwargs_hst = orig_init(self, args_dev, kwargs)
        tensors: dict[str, TensorInfo] = {}
        for name, value, source in zip(self.arg_names, args_hst, args_dev):
            _collect(name, value, source, tensors)
        for name, value in kwargs_hst.items():
            _collect(name, value, kwargs[name], tensors)
        rec.begin(getattr(self.fn, "__name__", "kernel"), tensors)
        return args_hst, kwargs_hst

    def grid_dim(nx, ny, nz):
        rec.grid(nx, ny, nz)
        return orig_dim(nx, ny, nz)

    orig_patch_tensor = _interp._patch_lang_tensor

    def patch_tensor(tensor, scope):
        orig_patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", _index)

    def grid_idx(x, y, z):
        rec.program(x, y, z)
        return orig_idx(x, y, z)

    def jit_run(self, *args, grid, warmup, **kwargs):
        return as_interpreted(self).run(*args, grid=grid, warmup=warmup, **kwargs)

    def jit_call(self, *args, **kwargs):
        # a @triton.jit helper called from a traced kernel; patch its module's triton.language only for the call
        fn = as_interpreted(self).rewrite()
        scope = _interp._patch_lang(self.fn)
        try:
            return fn(*args, **kwargs)
        finally:
            scope.restore()

    b.create_masked_load, b.create_masked_store = load, store
    b.create_atomic_rmw, b.create_atomic_cas = rmw, cas
    b.set_grid_dim, b.set_grid_idx = grid_dim, grid_idx
    GE._init_args_hst = init_args
    JITFunction.run, JITFunction.__call__ = jit_run, jit_call
    if _numpy_too_new():
        _interp._patch_lang_tensor = patch_tensor
    interpret_knob = triton.knobs.runtime.interpret
    triton.knobs.runtime.interpret = True
    _RECORDING[0] += 1
    try:
        yield
    finally:
        _RECORDING[0] -= 1
        triton.knobs.runtime.interpret = interpret_knob
        JITFunction.run, JITFunction.__call__ = orig_run, orig_call
        _interp._patch_lang_tensor = orig_patch_tensor
        GE._init_args_hst = orig_init
        for k, v in saved_builder.items():
            if v is None:
                b.__dict__.pop(k, None)
            else:
                setattr(b, k, v)


def _index(self) -> int:
    # numpy >= 2.4 no longer converts a one-element array to a scalar implicitly (triton#9171)
    return int(np.asarray(self.handle.data).reshape(-1)[0])


def _numpy_too_new() -> bool:
    major, minor = (int(p) for p in np.__version__.split(".")[:2])
    return (major, minor) >= (2, 4)


def trace(fn, *args, grid=None, outputs=None, **kwargs) -> Trace:
    """Run ``fn`` under the interpreter and record every kernel launch it makes.

    ``fn`` is a ``@triton.jit`` kernel (give ``grid``: a tuple or a callable of the meta-parameters), a launcher
    ``kernel[grid]``, or any Python function that launches kernels (a wrapper). ``outputs`` names the tensors
    whose unwritten elements to report (default: every tensor the launch stored to). Use small CPU inputs; CUDA
    tensors are copied to the CPU by the interpreter and back after the launch.
    """
    is_kernel = isinstance(fn, JITFunction | _interp.InterpretedFunction)
    if is_kernel and grid is None:
        raise TypeError(f"trace({fn.__name__}, ...): a kernel needs grid=(programs, ...)")
    if not is_kernel and grid is not None:
        raise TypeError("grid= is only for a @triton.jit kernel; a launcher or wrapper sets its own grid")
    if not callable(fn):
        raise TypeError(f"trace() needs a kernel or a callable, got {type(fn).__name__}")
    rec = _Recorder(tuple(outputs) if outputs is not None else None)
    with _hooks(rec):
        try:
            result = fn[grid](*args, **kwargs) if is_kernel else fn(*args, **kwargs)
        except _interp.InterpreterError as e:
            cause = e.__cause__
            if isinstance(cause, TypeError) and _numpy_too_new() and "0-dimensional" in str(cause):
                raise RuntimeError(f"numpy {np.__version__}: Triton 3.6's interpreter breaks on `range(0, K, BK)` "
                                   "loops with numpy >= 2.4 (triton#9171); install numpy<2.4 to trace this "
                                   "kernel") from cause
            if isinstance(cause, Exception):
                raise cause from None
            raise
    rec.trace.result = result
    return rec.trace
