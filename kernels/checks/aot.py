"""Compile a check's kernels ahead of time for sm_90, in a process of its own: ``python -m kernels.checks.aot``.

Under the interpreter a kernel body is Python, so a call to ``torch.matmul`` inside it would run and pass. The
compiler refuses it. This module dry-runs ``Exercise.run`` over the check's cases with each kernel replaced by a
:class:`~kernels.checks.provenance.Recorder`, so every specialisation that the check will launch (dtypes,
constexprs, ``num_warps``) is compiled with ``triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))``.
It needs no GPU. Compiling and interpreting do not mix in one process (Triton's own ``@jit`` helpers are
interpreted functions there), so the interpreter's side calls :func:`verify`, which runs this module as a
subprocess with ``TRITON_INTERPRET=0``; the grader forks it from a compile-mode server instead.

Request (stdin, JSON): ``{"exercise", "hidden", "kernels": [{"entry", "text"} | null, ...], "values": [...],
"paths": [...]}``; reply (stdout, last line): ``{"ok": true, "compiled": N}`` or ``{"ok": false, "message"}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

__all__ = ["dry_run", "verify", "main"]

_CACHE: dict[str, None] = {}


def dry_run(exercise_id: str, hidden: bool, kernels: list, values: list, folder: str) -> int:
    """Compile every launch of the check's cases; return how many specialisations compiled."""
    from .engine import active_cases, alloc_outputs, case_inputs
    from .provenance import KernelSource, Recorder, load
    from .spec import get

    ex = get(exercise_id)
    args, recorders = [], []
    for kind, ks, value in zip(ex.args, kernels, values):
        if kind == "kernel":
            rec = Recorder(load(KernelSource(ks["entry"], ks["text"]), folder, interpret=False))
            recorders.append(rec)
            args.append(rec)
        elif kind == "value":
            args.append(value)
        else:
            args.append(None)
    cases, _ = active_cases(ex, hidden)
    for _, case in cases:
        cpu = case_inputs(ex, case, 0)
        outs = alloc_outputs(ex, case, cpu, device="cpu")
        ex.run(tuple(args), cpu, {k: p.out for k, p in outs.items()}, case)
    return sum(len(r.compiled) for r in recorders)


def verify(exercise_id: str, hidden: bool, kernels: list, values: list, *, timeout: float = 600) -> None:
    """Run :func:`dry_run` in a subprocess with the interpreter off; raise ``CheckFailed`` with its reason."""
    from .spec import CheckFailed

    request = {"exercise": exercise_id, "hidden": hidden, "kernels": kernels, "values": values,
               "paths": [p for p in sys.path if p]}
    key = json.dumps(request, sort_keys=True, default=str)
    if key in _CACHE:
        return
    env = dict(os.environ, TRITON_INTERPRET="0")
    try:
        proc = subprocess.run([sys.executable, "-m", "kernels.checks.aot"], input=key, capture_output=True,
                              text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"compiling the kernel for sm_90 took longer than {timeout:.0f} s") from None
    reply = _last_json(proc.stdout)
    if reply is None:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise CheckFailed(f"the ahead-of-time compile crashed (exit {proc.returncode}): {tail}")
    if not reply.get("ok"):
        raise CheckFailed(reply.get("message", "the kernel does not compile for sm_90"))
    _CACHE[key] = None


def _last_json(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        try:
            out = json.loads(line)
        except ValueError:
            continue
        if isinstance(out, dict) and "ok" in out:
            return out
    return None


def serve(request: dict) -> dict:
    """Answer one request (in a process whose Triton was imported with the interpreter off)."""
    from .spec import CheckFailed

    for p in request.get("paths", []):
        if p not in sys.path:
            sys.path.append(p)
    with tempfile.TemporaryDirectory(prefix="aot-") as folder:
        try:
            n = dry_run(request["exercise"], bool(request.get("hidden")), request["kernels"], request["values"],
                        folder)
        except CheckFailed as e:
            return {"ok": False, "message": str(e)}
        except Exception as e:  # a launch that does not fit the kernel, found while compiling
            return {"ok": False, "message": f"compiling for sm_90 failed: {type(e).__name__}: {e}"}
    return {"ok": True, "compiled": n}


def main() -> int:
    os.environ["TRITON_INTERPRET"] = "0"
    import triton  # noqa: F401  (Triton's own @jit helpers become compilable functions)

    import kernels  # noqa: F401  (sets TRITON_INTERPRET=1 without a GPU; the kernels below are built compiled)

    os.environ["TRITON_INTERPRET"] = "0"
    request = json.loads(sys.stdin.read())
    reply = serve(request)
    sys.stdout.write("\n" + json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
