"""Execute every solution notebook top to bottom on this machine and record the run time of each.

Writes results/gpu/notebooks.json (date, GPU, versions, seconds and status per notebook). Used on the GPU
machine; runs anywhere (on a CPU machine it records interpreter times).
"""

from __future__ import annotations

import json
import pathlib
import sys
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main() -> int:
    import nbclient

    import kernels
    from grader.course import SOLUTIONS, solution_notebook
    from kernels.catalog import lesson_ids

    rows = []
    for lesson in lesson_ids():
        nb = solution_notebook(lesson, validate=False)
        t0 = time.perf_counter()
        try:
            nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                    resources={"metadata": {"path": str(SOLUTIONS)}}).execute()
            status, error = "ok", None
        except Exception as e:  # noqa: BLE001 - record any failure and go on to the next notebook
            status, error = "failed", "".join(traceback.format_exception_only(type(e), e))[-2000:]
        secs = time.perf_counter() - t0
        rows.append({"notebook": lesson, "status": status, "seconds": round(secs, 1), "error": error})
        print(f"{lesson:32s} {status:7s} {secs:7.1f} s", flush=True)
    record = {
        **kernels.device.machine(),
        "notebooks": rows,
    }
    out = ROOT / "results" / ("gpu" if kernels.ON_GPU else "cpu")
    out.mkdir(parents=True, exist_ok=True)
    (out / "notebooks.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
