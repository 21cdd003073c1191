"""Reading an export's manifest and turning problem sizes into a launch: grid, scalar values, buffer sizes.

Pure Python with no GPU: the Python launcher and the tests use it, and the Rust crate implements the same rules.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from dataclasses import dataclass

from . import expr

__all__ = ["FORMAT", "FORMAT_VERSION", "ManifestError", "Launch", "load", "image_path", "read_image", "resolve",
           "INT_RANGES", "GRID_LIMITS"]

FORMAT = "gpu-kernel-workbook/kernel-manifest"
FORMAT_VERSION = 1
INT_RANGES = {"u1": (0, 1), "i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1), "u32": (0, 2**32 - 1),
              "u64": (0, 2**64 - 1)}
#: CUDA's limits on gridDim.x, .y, .z.
GRID_LIMITS = (2**31 - 1, 65535, 65535)
_REQUIRED = ("kernel", "entry", "triton_version", "images", "prefer", "threads_per_block", "shared_bytes",
             "constexprs", "sizes", "grid", "params", "scratch")


class ManifestError(ValueError):
    """A manifest that cannot be used, or sizes and arguments that do not fit it."""


def load(path: str | pathlib.Path, *, triton_version: str | None = None) -> dict:
    """Read and check a manifest; ``triton_version``, if given, must match the one that exported it."""
    path = pathlib.Path(path)
    try:
        m = json.loads(path.read_text())
    except FileNotFoundError:
        raise ManifestError(f"no manifest at {path}") from None
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path} is not JSON: {e}") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise ManifestError(f"{path} is not a kernel manifest (format {FORMAT!r})")
    if m.get("format_version") != FORMAT_VERSION:
        raise ManifestError(f"{path} has manifest format version {m.get('format_version')}; this launcher reads "
                            f"version {FORMAT_VERSION}: export the kernel again")
    missing = [k for k in _REQUIRED if k not in m]
    if missing:
        raise ManifestError(f"{path} lacks {missing}")
    if triton_version is not None and m["triton_version"] != triton_version:
        raise ManifestError(f"{path} was exported by Triton {m['triton_version']}, not {triton_version}: "
                            "the hidden-parameter ABI may differ; export it again")
    if m["prefer"] not in m["images"]:
        raise ManifestError(f"{path} prefers {m['prefer']!r} but lists images {sorted(m['images'])}")
    m["_dir"] = str(path.resolve().parent)
    return m


def image_path(m: dict, kind: str | None = None) -> pathlib.Path:
    """The file of the ``kind`` image (``ptx`` or ``cubin``; default: the one the manifest prefers)."""
    kind = kind or m["prefer"]
    if kind not in m["images"]:
        why = f": {m['ptx_refused']}" if kind == "ptx" and m.get("ptx_refused") else ""
        raise ManifestError(f"{m['kernel']}: no {kind} image in this export{why}")
    p = pathlib.Path(m["_dir"]) / m["images"][kind]
    if not p.is_file():
        raise ManifestError(f"{m['kernel']}: the {kind} image {p} is missing")
    return p


def read_image(m: dict, kind: str | None = None) -> bytes:
    """The bytes of an image, checked against the SHA-256 the manifest records (a stale export is refused)."""
    path = image_path(m, kind)
    data = path.read_bytes()
    want = m.get("sha256", {}).get(kind or m["prefer"])
    if want is not None and hashlib.sha256(data).hexdigest() != want:
        raise ManifestError(f"{path} does not match its manifest (sha256 {hashlib.sha256(data).hexdigest()}, "
                            f"manifest says {want}): export again")
    return data


@dataclass
class Launch:
    """What one launch needs, resolved from sizes: values of integer scalars, element counts, grid."""

    env: dict[str, int]
    scalars: dict[str, int | None]  # None: the caller supplies it
    numel: dict[str, int]  # element count per pointer parameter (0 for unused ones)
    grid: tuple[int, int, int]
    block: int
    shared: int
    scratch_bytes: tuple[int, int]


def resolve(m: dict, sizes: dict[str, int]) -> Launch:
    """Evaluate the manifest's expressions for ``sizes``; check its requirements and CUDA's limits."""
    need, got = list(m["sizes"]), set(sizes)
    if set(need) - got:
        raise ManifestError(f"{m['kernel']}: missing sizes {sorted(set(need) - got)} (it needs {need})")
    if got - set(need):
        raise ManifestError(f"{m['kernel']}: unknown sizes {sorted(got - set(need))} (it needs {need})")
    env: dict[str, int] = {}
    for k, v in m["constexprs"].items():
        if isinstance(v, int) and not isinstance(v, bool):
            env[k] = v
    for k in need:
        v = sizes[k]
        if isinstance(v, bool) or not isinstance(v, int):
            raise ManifestError(f"size {k} must be an integer, got {v!r}")
        env[k] = v
    for r in m.get("requires", []):
        if not expr.evaluate(r, env):
            vals = ", ".join(f"{n}={env[n]}" for n in sorted(expr.names(r)))
            raise ManifestError(f"{m['kernel']}: requirement {r!r} fails for {vals}")
    scalars: dict[str, int | None] = {}
    numel: dict[str, int] = {}
    for p in m["params"]:
        if p["kind"] == "pointer":
            numel[p["name"]] = 0 if p["role"] == "unused" else expr.evaluate(p["numel"], env)
        elif p.get("value") is None:
            scalars[p["name"]] = None
        else:
            v = expr.evaluate(p["value"], env)
            check_int(m, p, v)
            scalars[p["name"]] = v
    grid = tuple(expr.evaluate(g, env) for g in m["grid"])
    for axis, (g, lim) in enumerate(zip(grid, GRID_LIMITS)):
        if not 1 <= g <= lim:
            raise ManifestError(f"{m['kernel']}: grid axis {'xyz'[axis]} = {m['grid'][axis]} = {g}, outside "
                                f"CUDA's 1..{lim}")
    programs = grid[0] * grid[1] * grid[2]
    scratch = tuple(s["bytes_per_program"] * programs for s in m["scratch"])
    return Launch(env, scalars, numel, grid, m["threads_per_block"], m["shared_bytes"], scratch)


def check_int(m: dict, p: dict, v) -> None:
    """An integer scalar must fit its parameter type."""
    lo, hi = INT_RANGES[p["type"]]
    if isinstance(v, bool) or not isinstance(v, int):
        raise ManifestError(f"{m['kernel']}: {p['name']} is {p['type']}, got {v!r}")
    if not lo <= v <= hi:
        raise ManifestError(f"{m['kernel']}: {p['name']} = {v} does not fit {p['type']} ({lo}..{hi})")
