"""PTX ISA versions: what a PTX file declares, and what a CUDA driver can load.

A driver JIT-compiles PTX only up to the ISA version its CUDA release knows; newer PTX fails at load time with
``CUDA_ERROR_UNSUPPORTED_PTX_VERSION``. The exporter reads the ``.version`` line and refuses, before anything
reaches a GPU, PTX that the target driver cannot load. A cubin does not have this limit (it is machine code
for one architecture), so it is the fallback.
"""

from __future__ import annotations

import re

__all__ = ["CUDA_TO_PTX_ISA", "PtxVersionError", "ptx_isa", "ptx_target", "ptx_entry", "max_isa_for_cuda", "parse_isa",
           "check_loadable"]

#: Highest PTX ISA each CUDA release (driver or toolkit) accepts, from NVIDIA's PTX release history.
CUDA_TO_PTX_ISA: dict[str, str] = {
    "11.0": "7.0", "11.1": "7.1", "11.2": "7.2", "11.3": "7.3", "11.4": "7.4", "11.5": "7.5", "11.6": "7.6",
    "11.7": "7.7", "11.8": "7.8",
    "12.0": "8.0", "12.1": "8.1", "12.2": "8.2", "12.3": "8.3", "12.4": "8.4", "12.5": "8.5", "12.6": "8.5",
    "12.8": "8.7", "12.9": "8.8",
    "13.0": "9.0", "13.1": "9.1", "13.2": "9.2", "13.3": "9.3", "13.4": "9.4",
}

_VERSION = re.compile(r"^\s*\.version\s+(\d+)\.(\d+)\s*$", re.MULTILINE)
_TARGET = re.compile(r"^\s*\.target\s+(\S+?)\s*(?:,.*)?$", re.MULTILINE)
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(([^)]*)\)", re.DOTALL)


class PtxVersionError(ValueError):
    """PTX whose ISA version is newer than the target driver accepts."""


def parse_isa(text: str) -> tuple[int, int]:
    """``"9.0"`` -> ``(9, 0)``; also accepts Triton's ``ptx_version`` form ``90``."""
    text = str(text).strip()
    m = re.fullmatch(r"(\d+)\.(\d+)", text)
    if m:
        return int(m.group(1)), int(m.group(2))
    if re.fullmatch(r"\d{2}", text):
        return int(text[0]), int(text[1])
    raise ValueError(f"a PTX ISA version looks like 9.0 (or 90), got {text!r}")


def ptx_isa(ptx: str) -> str:
    """The ISA version a PTX module declares (its ``.version`` directive)."""
    m = _VERSION.search(ptx)
    if not m:
        raise ValueError("not PTX: no '.version X.Y' directive")
    return f"{m.group(1)}.{m.group(2)}"


def ptx_target(ptx: str) -> str:
    m = _TARGET.search(ptx)
    if not m:
        raise ValueError("not PTX: no '.target' directive")
    return m.group(1)


def ptx_entry(ptx: str) -> tuple[str, list[str]]:
    """The entry kernel's name and its parameter declarations (``.param .u64 ...``) as PTX lists them."""
    m = _ENTRY.search(ptx)
    if not m:
        raise ValueError("no .entry kernel in this PTX")
    params = [p.strip() for p in m.group(2).split(",") if p.strip()]
    return m.group(1), params


def max_isa_for_cuda(cuda: str) -> str:
    """The highest PTX ISA a CUDA ``major.minor`` driver loads."""
    cuda = str(cuda).strip()
    if re.fullmatch(r"\d+", cuda):
        cuda += ".0"
    if cuda in CUDA_TO_PTX_ISA:
        return CUDA_TO_PTX_ISA[cuda]
    known = ", ".join(CUDA_TO_PTX_ISA)
    raise ValueError(f"no PTX ISA known for CUDA {cuda!r} (known: {known}); pass --max-ptx X.Y instead")


def check_loadable(ptx: str, max_isa: str, *, what: str = "the target driver") -> str:
    """Return the PTX's ISA version, or raise :class:`PtxVersionError` if it is newer than ``max_isa``."""
    isa = ptx_isa(ptx)
    if parse_isa(isa) > parse_isa(max_isa):
        lower = "".join(str(x) for x in parse_isa(max_isa))
        raise PtxVersionError(
            f"the PTX declares ISA .version {isa}, but {what} loads at most {max_isa} "
            f"(CUDA_ERROR_UNSUPPORTED_PTX_VERSION at load time). Either use the cubin (--fallback cubin), "
            f"ask Triton for older PTX (--ptx-version {lower}), or raise --max-ptx/--driver-cuda to match the driver")
    return isa
