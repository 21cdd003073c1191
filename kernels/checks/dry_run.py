"""Compile a check's kernels ahead of time for sm_90, in a process of its own: ``python -m kernels.checks.dry_run``.

Under the interpreter a kernel body is Python, so a call to ``torch.matmul`` inside it would run and pass. The
compiler refuses it. This module dry-runs ``Exercise.run`` over the check's cases with each kernel replaced by a
:class:`~kernels.checks.provenance.Recorder`, so every specialisation that the check will launch (dtypes,
constexprs, ``num_warps``) is compiled by :mod:`kernels.compile`. It needs no GPU. Compiling and interpreting do
not mix in one process (Triton's own ``@jit`` helpers are interpreted functions there), so the interpreter's side
calls :func:`kernels.checks.provenance.verify_compiles`, which runs this module as a subprocess with the
interpreter off; the grader forks it from a compile-mode server instead.

Request (stdin, JSON): ``{"exercise", "hidden", "kernels": [{"entry", "text"} | null, ...], "values": [...],
"paths": [...]}``; reply (stdout, last line): ``{"ok": true, "compiled": N, "notes": [...]}`` or
``{"ok": false, "message"}``.
``--serve``: one request a line and one reply a line, each compiled in a child forked from this process (torch and
Triton imported once; an interpreter start costs seconds), until stdin closes or stays idle.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

__all__ = ["dry_run", "serve", "serve_forever", "main"]

#: ``--serve`` ends after this many seconds without a request (a notebook's checks come minutes apart at most).
IDLE_S = 300.0


def dry_run(exercise_id: str, hidden: bool, kernels: list, values: list, folder: str,
            notes: list | None = None) -> int:
    """Compile every launch of the check's cases; return how many specialisations compiled. Given ``notes``, the
    exercise's :attr:`~kernels.checks.spec.Performance.compiled` note on their PTX is appended to it, if any."""
    import torch

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
    read = ex.performance.compiled if ex.performance is not None else None
    if notes is not None and read is not None and cases:
        # the timed launch (its block size, warps, grid), with the first case's small tensors in fresh (aligned)
        # memory, as the timing allocates its own: a compile reads their dtypes and alignment, never their sizes,
        # and nothing is launched
        first = cases[0][1]
        cpu = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in case_inputs(ex, first, 0).items()}
        outs = {k: torch.empty_like(p.out) for k, p in alloc_outputs(ex, first, cpu, device="cpu").items()}
        hinted = [Recorder(a.jit_fn, hints=True) if isinstance(a, Recorder) else a for a in args]
        ex.run(tuple(hinted), cpu, outs, ex.performance.case)
        note = read([k.asm["ptx"] for r in hinted if isinstance(r, Recorder) for k in r.compiled.values()])
        if note:
            notes.append(note)
    return sum(len(r.compiled) for r in recorders)


def serve(request: dict) -> dict:
    """Answer one request (in a process whose Triton was imported with the interpreter off)."""
    from .spec import CheckFailed

    for p in request.get("paths", []):
        if p not in sys.path:
            sys.path.append(p)
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="aot-") as folder:
        try:
            n = dry_run(request["exercise"], bool(request.get("hidden")), request["kernels"], request["values"],
                        folder, notes)
        except CheckFailed as e:
            return {"ok": False, "message": str(e)}
        except Exception as e:  # a launch that does not fit the kernel, found while compiling
            return {"ok": False, "message": f"compiling for sm_90 failed: {type(e).__name__}: {e}"}
    return {"ok": True, "compiled": n, "notes": notes}


def serve_forever(idle: float = IDLE_S) -> None:
    """Answer requests, one a line on stdin, each in a forked child; a reply line on stdout per request:
    :func:`serve`'s, or ``{"ok": false, "crashed": <exit status>}`` when the child died without one."""
    import select

    from . import engine  # noqa: F401  (what every request needs, imported before the first fork)

    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever a compile prints goes to stderr, never into a reply
    while select.select([sys.stdin], [], [], idle)[0]:
        line = sys.stdin.readline()
        if not line:
            return
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                reply = serve(json.loads(line))
            except BaseException as e:  # noqa: BLE001 (a reply, whatever happened)
                reply = {"ok": False, "message": f"compiling for sm_90 failed: {type(e).__name__}: {e}"}
            os.write(w, json.dumps(reply).encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
        replies.write((data.decode() if data else json.dumps({"ok": False, "crashed": status})) + "\n")
        replies.flush()


def main() -> int:
    from ..compile import enter_compile_mode

    enter_compile_mode()
    if sys.argv[1:] == ["--serve"]:
        serve_forever()
        return 0
    request = json.loads(sys.stdin.read())
    reply = serve(request)
    sys.stdout.write("\n" + json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
