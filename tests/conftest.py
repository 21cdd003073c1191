import pytest
import torch

import kernels  # noqa: F401  (decides the mode before any test module decorates a kernel)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (run `make test-gpu` on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config):
    return f"kernels: {kernels.describe()}"


_outcomes: dict[str, str] = {}


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _outcomes[report.nodeid] = report.outcome


def pytest_sessionfinish(session, exitstatus):
    """On a GPU, record what ran where: results/gpu/tests.json (date, GPU, driver, versions, outcomes)."""
    if not torch.cuda.is_available() or not _outcomes or hasattr(session.config, "workerinput"):
        return  # (xdist workers: the controller sees every report and writes the file)
    import datetime
    import json
    import pathlib
    import subprocess

    import triton

    root = pathlib.Path(__file__).resolve().parent.parent
    out = root / "results" / "gpu"
    out.mkdir(parents=True, exist_ok=True)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        driver = "unknown"
    counts: dict[str, int] = {}
    for v in _outcomes.values():
        counts[v] = counts.get(v, 0) + 1
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(0),
        "driver": driver,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "args": session.config.invocation_params.args,
        "counts": counts,
        "exitstatus": int(exitstatus),
        "outcomes": _outcomes,
    }
    (out / "tests.json").write_text(json.dumps(record, indent=1) + "\n")
