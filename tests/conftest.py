import os

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


@pytest.fixture(autouse=True)
def _gpu_turn(request):
    """GPU tests of all xdist workers share the GPU; a ``timed`` test has it alone (its speed and the rates its
    floor is computed from would otherwise be measured against the other workers' kernels). Waiting timed tests
    go first: a gate lock stops new shared holders while one waits."""
    if not torch.cuda.is_available() or "gpu" not in request.keywords:
        yield
        return
    import fcntl
    import os
    import tempfile

    def lock(name):
        return os.open(os.path.join(tempfile.gettempdir(), f"kernels-tests-gpu-{name}.lock"), os.O_RDWR | os.O_CREAT,
                       0o666)

    gate, turn = lock("gate"), lock("turn")
    try:
        if "timed" in request.keywords:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(turn, fcntl.LOCK_EX)
            fcntl.flock(gate, fcntl.LOCK_UN)
        else:
            fcntl.flock(gate, fcntl.LOCK_SH)
            fcntl.flock(turn, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        os.close(turn)
        os.close(gate)


_outcomes: dict[str, str] = {}
_config = None
_last_write = 0.0


def pytest_configure(config):
    global _config
    _config = config
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers and not torch.cuda.is_available():
        # xdist workers share the cores: each one's torch using all of them would make them fight over every core
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(workers)))


def pytest_runtest_logreport(report):
    global _last_write
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _outcomes[report.nodeid] = report.outcome
        import time

        if time.monotonic() - _last_write > 5:  # a run cut off by a time limit still leaves what it saw
            _last_write = time.monotonic()
            _record(None)


def pytest_sessionfinish(session, exitstatus):
    _record(int(exitstatus))


def _record(exitstatus):
    """On a GPU, record what ran where: results/gpu/tests.json (date, GPU, driver, versions, outcomes); while the
    run goes on, ``finished`` is false."""
    if (not torch.cuda.is_available() or not _outcomes or _config is None
            or hasattr(_config, "workerinput")):
        return  # (xdist workers: the controller sees every report and writes the file)
    import json
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    out = root / "results" / "gpu"
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for v in _outcomes.values():
        counts[v] = counts.get(v, 0) + 1
    record = {
        **kernels.device.machine(),  # date, GPU, driver (asked once per run), versions
        "args": _config.invocation_params.args,
        "finished": exitstatus is not None,
        "counts": counts,
        "exitstatus": exitstatus,
        "outcomes": _outcomes,
    }
    # the grader's GPU tests run on their own (scripts/gpu_grader.sh): their record must not replace the kernels'
    name = "grader-tests.json" if all(n.startswith("tests/grader/") for n in _outcomes) else "tests.json"
    tmp = out / f"{name}.part"
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(out / name)

