"""The grader's half of the cubin path (GPU mode): the kernel's Python runs in two sandboxes, never where the
verdict is made.

1. ``precheck``: the ``kernel`` worker runs the small cases in the interpreter, bounds-checked on CPU copies, and
   reports out-of-bounds accesses and the exercise's traffic rule (as :func:`kernels.checks.engine.run_case` does
   before a GPU launch); it is stopped before anything runs on the GPU.
2. ``relay``: the ``launch`` worker (the exercise's ``run``, the package's driver-API launcher, the poisoned
   buffers and the CUDA events; it never imports the student's source) asks for each specialisation it launches;
   the ``compile`` worker, where the source is loaded, compiles it; the reply is checked here
   (:func:`kernels.checks.cubin.check_reply`) and only a cubin and its numbers go on.
"""

from __future__ import annotations

import time

from kernels.checks import engine
from kernels.checks.cubin import CubinError, check_reply

from .results import CheckResult
from .sandbox import WorkerDied

__all__ = ["precheck", "relay"]


def precheck(session, ex, call, kernels: list, values: list, request: list, items: list):
    """Run the interpreter's pre-check of the small cases in the ``kernel`` worker; return a failed
    ``CheckResult`` (an out-of-bounds access, a crash) or {case index: traffic objections}."""
    # ``items`` and ``request`` go together, one per run: the case and seed here, the inputs sent there
    if not any(engine._small(ex, it["case"], r["inputs"]) for it, r in zip(items, request)):  # nothing to run cheaply
        return {}
    w = session.worker("kernel")
    w.send({"op": "precheck", "exercise": ex.id, "kernels": kernels, "values": values, "cases": request})
    by_index = {it["index"]: it for it in items}
    traffic, label = {}, None
    deadline = time.time() + session.s.problem_timeout
    try:
        while True:
            m = w.recv(session.budget(max(1.0, deadline - time.time())),
                       what=f"in the interpreter's pre-check of case {label!r}" if label else "")
            ev = m.get("event")
            if ev == "case":
                label = m.get("label")
            elif ev == "prechecked":
                item = by_index.get(m.get("index"))
                problems = [str(p) for p in (m.get("problems") or [])][:20]
                if problems and item is not None:
                    return CheckResult(ex.id, call.hidden, False, "failed",
                                       [f"{ex.id} failed on {engine.describe_case(ex, item['case'], item['seed'])}:"]
                                       + [f"  - {p}" for p in problems])
                if m.get("traffic"):
                    traffic[m.get("index")] = [str(t) for t in m["traffic"]][:5]
            elif ev == "error":
                return CheckResult(ex.id, call.hidden, False, "failed", session._error_lines(ex, label, m))
            elif ev == "done":
                return traffic
    except WorkerDied as e:
        status = "timeout" if "stopped after" in str(e) else "crashed"
        return CheckResult(ex.id, call.hidden, False, status, [f"{ex.id}: {e}"])
    finally:
        session.drop("kernel")  # its part is done: nothing of it stays beside the launch


def relay(session, launcher, m: dict, kernels: list) -> None:
    """One specialisation the launch worker needs: compiled in the ``compile`` worker (started on the first
    request of a problem, with the graded kernels' sources) within the compile's own limit, checked here, sent on
    as a cubin or an error."""
    try:
        cw = session.workers.get("compile")
        if cw is None or not cw.alive():
            cw = session.worker("compile")
            cw.send({"op": "cubin", "kernels": kernels})
        cw.send({"op": "spec", "kernel": int(m.get("kernel", 0)), "spec": m.get("spec") or {}})
        reply = cw.recv(session.budget(session.s.compile_timeout),
                        what="compiling the kernel for the GPU")
        if reply.get("error"):
            launcher.send({"op": "cubin", "error": str(reply["error"])[:4000]})
            return
        blob, meta = check_reply(reply)
        launcher.send({"op": "cubin", "cubin": reply["cubin"], "meta": meta, "bytes": len(blob)})
    except WorkerDied as e:
        session.drop("compile")
        launcher.send({"op": "cubin", "error": f"the compile {e}"})
    except CubinError as e:
        launcher.send({"op": "cubin", "error": f"the compiled kernel was refused: {e}"})
