"""``python -m kernels.export``: compile named kernels to PTX + cubin + manifest, on any machine.

    python -m kernels.export vector_add matmul linear_attention --out artifacts/export
    python -m kernels.export matmul --dtype fp16 --constexpr BLOCK_M=64 --num-warps 4 --driver-cuda 13.0
    python -m kernels.export --list

No GPU is needed: Triton compiles ahead of time for ``--arch`` (default 90, an H100/H200). ``--driver-cuda``
(or ``--max-ptx``) names the driver the PTX is for; PTX newer than it accepts is refused (exit status 3) unless
``--fallback cubin``, which writes only the cubin and makes the manifest prefer it.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile

from ..compile import run_compiled

__all__ = ["export", "export_many", "export_spec", "main", "parse_constexpr"]

_EXIT_EXPORT, _EXIT_PTX = 2, 3
_OPTIONS = ("dtype", "constexprs", "num_warps", "num_stages", "arch", "max_ptx", "driver_cuda", "ptx_version",
            "fallback", "align", "hint16", "stem")


def parse_constexpr(text: str) -> tuple[str, object]:
    """``NAME=VALUE`` with VALUE an int, a float, true/false, none, or else a string."""
    name, sep, raw = text.partition("=")
    if not sep or not name.isidentifier():
        raise ValueError(f"--constexpr wants NAME=VALUE, got {text!r}")
    low = raw.strip().lower()
    if low in ("true", "false"):
        return name, low == "true"
    if low in ("none", "null"):
        return name, None
    for cast in (int, float):
        try:
            return name, cast(raw)
        except ValueError:
            pass
    return name, raw


def export(kernel: str, out_dir: str | os.PathLike, **options) -> dict:
    """Export the registered ``kernel`` into ``out_dir``; return its manifest.

    Options are those of :func:`kernels.export.aot.export_here`. Where this process runs kernels in Triton's
    interpreter (no GPU), the compile happens in a fresh ``python -m kernels.export`` process, whose errors come
    back as the same exception types.
    """
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise TypeError(f"unknown export options {sorted(unknown)}; known: {', '.join(_OPTIONS)}")
    from . import aot, registry
    from .ptx import PtxVersionError

    spec = registry.get(kernel)
    if not aot.interpreting():
        return aot.export_here(spec, out_dir, **options)
    _precheck(spec, options)
    argv = [kernel, "--out", str(out_dir)]
    for key, value in options.items():
        if value is None:
            continue
        if key == "constexprs":
            for k, v in value.items():
                argv += ["--constexpr", f"{k}={'none' if v is None else v}"]
        elif key == "hint16":
            argv += ["--hint16", ",".join(value)] if value else []
        else:
            argv += [f"--{key.replace('_', '-')}", str(value)]
    proc = run_compiled("kernels.export", [*argv, "--quiet"])
    if proc.returncode:
        message = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        message = message.removeprefix("error: ")
        raise (PtxVersionError if proc.returncode == _EXIT_PTX else aot.ExportError)(message)
    stem = options.get("stem") or kernel
    return json.loads((pathlib.Path(out_dir) / f"{stem}.json").read_text())


def export_many(jobs: list[dict]) -> list[dict | Exception]:
    """Several exports at once, each ``{"kernel": ..., "out_dir": ..., **options}``: a manifest or the exception
    for each, in order. Without a GPU they share one fresh compiler process instead of starting one each."""
    from . import aot, registry

    if not aot.interpreting():
        results: list[dict | Exception] = []
        for job in jobs:
            job = dict(job)
            try:
                results.append(export(job.pop("kernel"), job.pop("out_dir"), **job))
            except ValueError as e:
                results.append(e)
        return results
    for job in jobs:
        unknown = set(job) - set(_OPTIONS) - {"kernel", "out_dir"}
        if unknown:
            raise TypeError(f"unknown export options {sorted(unknown)}; known: {', '.join(_OPTIONS)}")
        _precheck(registry.get(job["kernel"]), job)
    return _in_compile_process(jobs)


def export_spec(spec: dict, out_dir: str | os.PathLike, *, paths: list[str] | tuple[str, ...] = (),
                **options) -> dict:
    """Export a kernel that is not registered: ``spec`` holds the fields of :class:`~kernels.export.aot.KernelSpec`
    as plain data, its ``module`` importable from ``paths`` (lesson 05 exports the learner's kernel so). It always
    compiles in a fresh compile process, which imports the module as it is now. Returns the manifest; raises as
    :func:`export` does."""
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise TypeError(f"unknown export options {sorted(unknown)}; known: {', '.join(_OPTIONS)}")
    [answer] = _in_compile_process([{"spec": spec, "out_dir": out_dir, **options}], paths)
    if isinstance(answer, Exception):
        raise answer
    return answer


def _in_compile_process(jobs: list[dict], paths=()) -> list[dict | Exception]:
    from .aot import ExportError
    from .ptx import PtxVersionError

    with tempfile.TemporaryDirectory() as tmp:
        request = pathlib.Path(tmp) / "jobs.json"
        request.write_text(json.dumps([{**j, "out_dir": str(j["out_dir"])} for j in jobs]))
        proc = run_compiled("kernels.export", ["--batch", str(request), "--quiet"], paths=paths)
        if proc.returncode:
            raise ExportError(f"the export process failed: {proc.stderr.strip()[-2000:]}")
        answers = json.loads(request.with_suffix(".out.json").read_text())
    kinds = {"ptx": PtxVersionError, "export": ExportError}
    return [a["manifest"] if "manifest" in a else kinds[a["kind"]](a["error"]) for a in answers]


#: The KernelSpec fields that are tuples (JSON brings them as lists).
_TUPLES = ("sizes", "grid", "requires", "aligned", "dtypes")


def _batch(path: pathlib.Path) -> int:
    from . import aot
    from .ptx import PtxVersionError

    answers = []
    for job in json.loads(path.read_text()):
        job = dict(job)
        try:
            if "spec" in job:
                spec = aot.KernelSpec(**{k: tuple(v) if k in _TUPLES and isinstance(v, list) else v
                                         for k, v in job.pop("spec").items()})
                answers.append({"manifest": aot.export_here(spec, job.pop("out_dir"), **job)})
            else:
                answers.append({"manifest": export(job.pop("kernel"), job.pop("out_dir"), **job)})
        except PtxVersionError as e:
            answers.append({"kind": "ptx", "error": str(e)})
        except ValueError as e:
            answers.append({"kind": "export", "error": str(e)})
    path.with_suffix(".out.json").write_text(json.dumps(answers))
    return 0


def _precheck(spec, options: dict) -> None:
    """The checks that need no compiler, here, so that a bad call fails without starting a process."""
    from .aot import ExportError
    from .ptx import max_isa_for_cuda, parse_isa

    dtype = options.get("dtype") or spec.dtypes[0]
    if dtype not in spec.dtypes:
        raise ExportError(f"{spec.name}: dtype {dtype!r} not supported; choose from {', '.join(spec.dtypes)}")
    if options.get("fallback", "fail") not in ("fail", "cubin"):
        raise ExportError(f"fallback must be 'fail' or 'cubin', got {options['fallback']!r}")
    if options.get("max_ptx") is not None and options.get("driver_cuda") is not None:
        raise ExportError("give --max-ptx or --driver-cuda, not both")
    if options.get("max_ptx") is not None:
        parse_isa(options["max_ptx"])
    if options.get("driver_cuda") is not None:
        max_isa_for_cuda(options["driver_cuda"])
    if spec.check:
        spec.check({**spec.constexprs, **(options.get("constexprs") or {})})
    for name in options.get("hint16") or ():
        if name != "aligned" and (spec.signature.get(name) not in ("i32", "i64", "u32", "u64")
                                  or spec.values.get(name, name if name in spec.sizes else None) is None):
            raise ExportError(f"{spec.name}: --hint16 {name}: only integer scalars computed from the sizes take "
                              "the multiple-of-16 hint")


def _table(manifest: dict, out: pathlib.Path) -> str:
    params = ", ".join(f"{p['name']}:{p['type']}" for p in manifest["params"])
    images = ", ".join(str(out / v) for v in manifest["images"].values())
    return (f"{manifest['kernel']}: .entry {manifest['entry']} ({manifest['target']['ptx_target']}, PTX ISA "
            f"{manifest['ptx_isa']}, prefer {manifest['prefer']})\n"
            f"  {manifest['threads_per_block']} threads/block, {manifest['shared_bytes']} B dynamic shared, "
            f"grid ({', '.join(manifest['grid'])})\n  params: {params} + 2 scratch pointers\n  wrote {images}")


def main(argv: list[str] | None = None) -> int:
    from . import aot, registry
    from .ptx import PtxVersionError

    ap = argparse.ArgumentParser(prog="python -m kernels.export", description=__doc__.splitlines()[0].replace("``", ""))
    ap.add_argument("kernels", nargs="*", help=f"kernels to export: {', '.join(registry.KERNELS)}")
    ap.add_argument("--list", action="store_true", help="list the exportable kernels and exit")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("artifacts/export"),
                    help="output folder (artifacts/export)")
    ap.add_argument("--dtype", help="element type of the tensors (fp32, fp16, bf16; per kernel default)")
    ap.add_argument("--constexpr", action="append", default=[], metavar="NAME=VALUE",
                    help="override a constexpr (repeatable)")
    ap.add_argument("--num-warps", type=int)
    ap.add_argument("--num-stages", type=int)
    ap.add_argument("--arch", type=int, default=90, help="compute capability as one number: 80, 90, 100 (90)")
    lim = ap.add_mutually_exclusive_group()
    lim.add_argument("--max-ptx", help="highest PTX ISA the target driver loads, e.g. 9.0")
    lim.add_argument("--driver-cuda", help="CUDA version of the target driver, e.g. 13.0 (sets --max-ptx)")
    ap.add_argument("--ptx-version", type=int, help="ask Triton for this PTX ISA, as Triton spells it (e.g. 87)")
    ap.add_argument("--fallback", choices=("fail", "cubin"), default="fail",
                    help="what to do with PTX the driver cannot load (fail)")
    ap.add_argument("--align", type=int, default=16, choices=(1, 16),
                    help="pointer alignment the kernel may assume, in bytes (16)")
    ap.add_argument("--hint16", action="append", default=[], metavar="NAME[,NAME...]",
                    help="integer parameters the kernel may assume are multiples of 16 (the manifest then "
                         "requires it), or 'aligned' for the kernel's usual set; vectorises loads as a JIT "
                         "launch would")
    ap.add_argument("--stem", help="file name stem (the kernel name); only with one kernel")
    ap.add_argument("--quiet", action="store_true", help="print nothing on success")
    ap.add_argument("--batch", type=pathlib.Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.batch:
        return _batch(args.batch)
    if args.list:
        for name, spec in registry.KERNELS.items():
            print(f"{name:18} {spec.module}.{spec.attr}: {spec.doc}")
        return 0
    if not args.kernels:
        ap.error("name at least one kernel (or --list)")
    if args.stem and len(args.kernels) > 1:
        ap.error("--stem needs exactly one kernel")
    if aot.interpreting():
        print("error: this process imported Triton in interpreter mode; run `python -m kernels.export` "
              "directly", file=sys.stderr)
        return _EXIT_EXPORT
    try:
        constexprs = dict(parse_constexpr(c) for c in args.constexpr)
        for name in args.kernels:
            manifest = aot.export_here(
                registry.get(name), args.out, dtype=args.dtype, constexprs=constexprs, num_warps=args.num_warps,
                num_stages=args.num_stages, arch=args.arch, max_ptx=args.max_ptx, driver_cuda=args.driver_cuda,
                ptx_version=args.ptx_version, fallback=args.fallback, align=args.align,
                hint16=[n for h in args.hint16 for n in h.split(",") if n], stem=args.stem)
            if not args.quiet:
                print(_table(manifest, args.out))
    except PtxVersionError as e:
        print(f"error: {e}", file=sys.stderr)
        return _EXIT_PTX
    except ValueError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return _EXIT_EXPORT
    return 0
