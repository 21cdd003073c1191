"""fla's own linear-attention op tests run against this package's ``chunk_linear_attn``.

fla-core's test file (``tests/ops/test_linear_attn.py`` of flash-linear-attention; not part of this repository and
not in fla-core's wheel) is kept in the git-ignored folder ``.fla-tests/``, put there by ``--get`` from a checkout of
fla's repository. Before pytest imports it, ``fla.ops.linear_attn.chunk_linear_attn`` is replaced by ours, so the
file's ``from fla.ops.linear_attn import chunk_linear_attn`` binds ours: its ``test_chunk`` (forward and
backward, with initial and final states, against fla's ``fused_recurrent_linear_attn`` in fp32) and the ``chunk``
cases of its normaliser tests (split and resume, gradients against fla's naive recurrence, gradients through a
resumed ``z_state``) then test this package with fla's own tolerances. The rest of the file tests fla's other
kernels and runs only with ``--all``.

    python scripts/gpu_fla_tests.py --get /path/to/flash-linear-attention   # copies the test file
    python scripts/gpu_fla_tests.py [--all] [--device cpu] [-k EXPR]        # results/gpu/fla-tests.json

On a machine without CUDA, ``--device cpu`` with ``TRITON_INTERPRET=1`` runs the small cases in Triton's
interpreter (``-k "T63 or T256"``), a check of the mechanism rather than of the kernels' speed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
FOLDER = ROOT / ".fla-tests"
TEST_FILE = "test_linear_attn.py"
SOURCE = "tests/ops/" + TEST_FILE


def get(repo: pathlib.Path) -> None:
    """Copy fla's test file from a checkout (a work tree, or a bare git directory: its HEAD) into ``.fla-tests/``."""
    FOLDER.mkdir(exist_ok=True)
    if (repo / SOURCE).is_file():
        shutil.copyfile(repo / SOURCE, FOLDER / TEST_FILE)
        commit = "work tree"
    else:
        text = subprocess.run(["git", f"--git-dir={repo}", "show", f"HEAD:{SOURCE}"], check=True,
                              capture_output=True, text=True).stdout
        (FOLDER / TEST_FILE).write_text(text)
        commit = subprocess.run(["git", f"--git-dir={repo}", "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
    (FOLDER / "SOURCE.json").write_text(json.dumps({"repository": str(repo), "commit": commit, "path": SOURCE}))
    print(f"copied {SOURCE} ({commit}) to {FOLDER / TEST_FILE}")


def swap_in_ours(device: str | None):
    """Make ``fla.ops.linear_attn.chunk_linear_attn`` this package's; returns (ours, fla's)."""
    import fla.ops.linear_attn as fla_la
    import fla.utils

    from kernels.linear_attention import chunk_linear_attn as ours

    theirs = fla_la.chunk_linear_attn
    fla_la.chunk_linear_attn = ours
    if device is not None:  # the test file reads fla.utils.device when it is imported
        fla.utils.device = device
    return ours, theirs


def no_autotuning() -> None:
    """Triton's interpreter has no benchmarker: fla's autotuned kernels take their first config there."""
    from triton.runtime.autotuner import Autotuner

    Autotuner._bench = lambda self, *args, config, **meta: 0.0


class Recorder:
    """A pytest plugin: keeps only the tests that call ours (unless ``everything``) and records each outcome."""

    def __init__(self, ours, everything: bool):
        self.ours, self.everything = ours, everything
        self.uses_ours: dict[str, bool] = {}
        self.results: list[dict] = []
        self.swapped = None

    def _calls_ours(self, item) -> bool:
        fn = getattr(item, "callspec", None) and item.callspec.params.get("fn")
        if fn is not None:
            return fn is self.ours
        return item.originalname == "test_chunk"

    def pytest_collection_modifyitems(self, config, items):
        modules = {item.module for item in items}
        self.swapped = all(getattr(m, "chunk_linear_attn", None) is self.ours for m in modules)
        keep, drop = [], []
        for item in items:
            self.uses_ours[item.nodeid] = self._calls_ours(item)
            (keep if self.everything or self.uses_ours[item.nodeid] else drop).append(item)
        items[:] = keep
        if drop:
            config.hook.pytest_deselected(items=drop)

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            message = ""
            if report.outcome == "failed":
                message = str(getattr(report.longrepr, "reprcrash", None) and report.longrepr.reprcrash.message
                              or report.longrepr)[:400]
            self.results.append({"test": report.nodeid.split("::", 1)[-1], "phase": report.when,
                                 "outcome": report.outcome, "seconds": round(report.duration, 3),
                                 "ours": self.uses_ours.get(report.nodeid, False), "message": message})


def _count(results: list[dict], ours: bool) -> dict:
    return {o: sum(r["ours"] == ours and r["outcome"] == o for r in results) for o in ("passed", "failed", "skipped")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--get", type=pathlib.Path, metavar="FLA_REPO", help="copy fla's test file from this checkout")
    ap.add_argument("--all", action="store_true", help="also run the file's tests of fla's own kernels")
    ap.add_argument("--device", help="the device the tests use (default: fla's choice, CUDA on a GPU)")
    ap.add_argument("-k", dest="select", help="pytest -k expression")
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "results/gpu/fla-tests.json")
    args = ap.parse_args()
    if args.get:
        get(args.get)
        return 0
    if not (FOLDER / TEST_FILE).is_file():
        print(f"{FOLDER / TEST_FILE} is missing: copy fla's {SOURCE} there first "
              f"(python scripts/gpu_fla_tests.py --get /path/to/flash-linear-attention)", file=sys.stderr)
        return 2
    os.environ.pop("FLA_CI_ENV", None)  # fla's assert_close only warns under its CI flag; here it must assert
    sys.path.insert(0, str(ROOT))
    import pytest

    if os.environ.get("TRITON_INTERPRET") == "1":
        os.environ["FLA_CACHE_RESULTS"] = "0"
        no_autotuning()
    ours, theirs = swap_in_ours(args.device)
    recorder = Recorder(ours, args.all)
    argv = [str(FOLDER / TEST_FILE), "-v", "-p", "no:cacheprovider", "--rootdir", str(FOLDER), "-c", os.devnull,
            "-W", "ignore::DeprecationWarning"] + (["-k", args.select] if args.select else [])
    t0 = time.perf_counter()
    code = pytest.main(argv, plugins=[recorder])
    calls = [r for r in recorder.results if r["phase"] == "call" or r["outcome"] != "passed"]
    import fla
    import torch

    from kernels.device import machine

    source = FOLDER / "SOURCE.json"
    summary = {
        **machine(),
        "fla_version": getattr(fla, "__version__", "?"),
        "test_file": {**(json.loads(source.read_text()) if source.is_file() else {}),
                      "sha256": hashlib.sha256((FOLDER / TEST_FILE).read_bytes()).hexdigest()},
        "device": args.device or (torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"),
        "swapped": recorder.swapped, "fla_chunk_replaced": f"{theirs.__module__}.{theirs.__name__}",
        "pytest_exit": int(code), "seconds": round(time.perf_counter() - t0, 1),
        "ours": _count(calls, True), "fla_only": _count(calls, False),
        "results": calls,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"\nours: {summary['ours']}  fla's own kernels: {summary['fla_only']}  "
          f"(chunk_linear_attn swapped in: {recorder.swapped}) -> {args.out}")
    for r in calls:
        print(f"  {'ours' if r['ours'] else 'fla ':4} {r['outcome']:7} {r['seconds']:8.2f}s  {r['test']}"
              + (f"  [{r['phase']}] {r['message'].splitlines()[0] if r['message'] else ''}"
                 if r["outcome"] == "failed" else ""))
    return 0 if recorder.swapped and code in (0, 5) else 1


if __name__ == "__main__":
    sys.exit(main())
