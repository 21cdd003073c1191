import os
import pathlib

import pytest
import torch

import kernels  # noqa: F401  (decides the mode before any test module decorates a kernel)

#: The longest single tests (10 minutes for the demo class on 2 cores), queued first: pytest-xdist hands tests out in
#: collection order, and one of these handed out last would run on alone while the other workers idle.
LONGEST = ("tests/grader/test_demo.py::test_demo_class",)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: next((i for i, n in enumerate(LONGEST) if item.nodeid.startswith(n)), len(LONGEST)))
    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs CUDA (run `make test-gpu` on a GPU machine)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    yield
    _name_groups(config, items)


def _name_groups(config, items):
    """``--dist loadgroup`` sends the tests of one ``xdist_group`` to one worker by the ``<id>@<group>`` name that
    pytest-xdist gives them; pytest 9 builds a node's id from a structured ``NodeId``, and xdist 3.8's renaming no
    longer takes (every group was scattered). Name them here, after xdist's own hook (a no-op where it worked)."""
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # pytest 8: xdist's renaming works
        return
    for item in items:
        groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                         for m in item.iter_markers("xdist_group")})
        tag = "@" + "_".join(groups)
        old = getattr(item, "_id", None)
        if groups and isinstance(old, NodeId) and old.names and not item.nodeid.endswith(tag):
            # the tag after the parameters, as xdist writes it: in the last name, so that the id reads the same
            # however pytest rebuilds its string
            last = old.names[-1] + ("" if old.params is None else f"[{old.params}]") + tag
            item._id = NodeId(path=old.path, names=(*old.names[:-1], last))


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


class Seen:
    """What a run saw, test by test: its outcome, its seconds (setup, call and teardown), for a failure the last
    lines of its report, and the last lines it printed where pytest captured them (``--capture=tee-sys`` keeps
    them on the screen too). Written as a JSON record that stands in for the run's log."""

    LINES, CHARS = 15, 2000  # what a failure's text or a test's output keeps, at most

    def __init__(self):
        self.outcomes: dict[str, str] = {}
        self.durations: dict[str, float] = {}
        self.failures: dict[str, str] = {}
        self.output: dict[str, str] = {}

    @classmethod
    def tail(cls, text: str) -> str:
        return "\n".join(text.rstrip().splitlines()[-cls.LINES:])[-cls.CHARS:]

    def note(self, report) -> bool:
        """Take one of pytest's reports (setup, call or teardown); True where it decided the test's outcome."""
        nodeid = report.nodeid
        self.durations[nodeid] = self.durations.get(nodeid, 0.0) + (report.duration or 0.0)
        if not (report.when == "call" or (report.when == "setup" and report.outcome != "passed")):
            return False
        self.outcomes[nodeid] = report.outcome
        if report.failed:
            self.failures[nodeid] = self.tail(report.longreprtext)
        if report.capstdout.strip():
            self.output[nodeid] = self.tail(report.capstdout)
        return True

    def write(self, folder, exitstatus, about: dict, name: str | None = None):
        """Write the record into ``folder`` (replaced whole): ``about`` (where, when) and what was seen; ``finished``
        is false while the run goes on. ``name`` (a file name, or a path from ``folder``) defaults to tests.json,
        grader-tests.json for the grader's tests alone. Returns its path, or None when no test was seen."""
        if not self.outcomes:
            return None
        import json

        counts: dict[str, int] = {}
        for v in self.outcomes.values():
            counts[v] = counts.get(v, 0) + 1
        record = {
            **about,
            "finished": exitstatus is not None,
            "counts": counts,
            "exitstatus": exitstatus,
            "outcomes": self.outcomes,
            "durations": {k: round(v, 3) for k, v in self.durations.items() if k in self.outcomes},
            "failures": self.failures,
            "output": self.output,
        }
        # the grader's GPU tests run on their own (scripts/gpu_grader.sh): their record must not replace the kernels'
        name = name or ("grader-tests.json" if all(n.startswith("tests/grader/") for n in self.outcomes)
                        else "tests.json")
        path = pathlib.Path(folder) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        tmp.replace(path)
        return path


#: where a GPU run's record goes
RESULTS = pathlib.Path(__file__).resolve().parent.parent / "results" / "gpu"
_seen = Seen()
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
    if _seen.note(report):
        import time

        if time.monotonic() - _last_write > 5:  # a run cut off by a time limit still leaves what it saw
            _last_write = time.monotonic()
            _record(None)


def pytest_sessionfinish(session, exitstatus):
    _record(int(exitstatus))


def _record(exitstatus):
    """On a GPU, record what ran where: results/gpu/tests.json (date, GPU, driver, versions, what each test did), or
    the file ``GPU_TESTS_RECORD`` names there (scripts/gpu_batch.sh names one per stage)."""
    if (not torch.cuda.is_available() or not _seen.outcomes or _config is None
            or hasattr(_config, "workerinput")):
        return  # (xdist workers: the controller sees every report and writes the file)
    _seen.write(RESULTS, exitstatus,
                {**kernels.device.machine(), "args": _config.invocation_params.args},  # date, GPU, driver, versions
                os.environ.get("GPU_TESTS_RECORD") or None)
