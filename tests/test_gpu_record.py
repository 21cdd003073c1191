"""The record a GPU run of the tests leaves (tests/conftest.py): each test's outcome, seconds, failure text and
printed lines, in the file ``GPU_TESTS_RECORD`` names. Fed made-up reports here, so it runs without a GPU."""
import json
import pathlib
import types

import pytest
import torch


@pytest.fixture
def conftest(pytestconfig):
    """tests/conftest.py as pytest loaded it (a plugin), not a second copy."""
    path = str(pathlib.Path(__file__).with_name("conftest.py"))
    return next(p for p in pytestconfig.pluginmanager.get_plugins() if getattr(p, "__file__", None) == path)


def report(nodeid, when, outcome="passed", duration=0.5, text="", out=""):
    return types.SimpleNamespace(nodeid=nodeid, when=when, outcome=outcome, duration=duration,
                                 failed=outcome == "failed", longreprtext=text, capstdout=out)


def seen(conftest):
    s = conftest.Seen()
    trace = "\n".join(f"frame {i}" for i in range(40)) + "\nE   assert 0.12 < 0.05\n\ntests/t.py:9: AssertionError\n"
    for r in [report("tests/t.py::ok", "setup", duration=1.0),
              report("tests/t.py::ok", "call", duration=2.0, out="setting up\nbf16 dq: ours 2.35e-03, fla 2.35e-03\n"),
              report("tests/t.py::ok", "teardown", duration=0.25),
              report("tests/t.py::slow", "setup"),
              report("tests/t.py::slow", "call", "failed", 3.0, trace),
              report("tests/t.py::slow", "teardown"),
              report("tests/t.py::broken", "setup", "failed", 0.1, "fixture 'gpu' not found"),
              report("tests/t.py::broken", "teardown", duration=0.1),
              report("tests/t.py::nogpu", "setup", "skipped", 0.0, "needs CUDA"),
              report("tests/t.py::nogpu", "teardown", duration=0.0)]:
        s.note(r)
    return s


def test_the_record_holds_what_each_test_did(conftest, tmp_path):
    path = seen(conftest).write(tmp_path, 1, {"gpu": "made up"}, "pytest-la.json")
    assert path == tmp_path / "pytest-la.json" and not list(tmp_path.glob("*.part"))
    rec = json.loads(path.read_text())
    assert rec["gpu"] == "made up" and rec["finished"] and rec["exitstatus"] == 1
    assert rec["outcomes"] == {"tests/t.py::ok": "passed", "tests/t.py::slow": "failed",
                               "tests/t.py::broken": "failed", "tests/t.py::nogpu": "skipped"}
    assert rec["counts"] == {"passed": 1, "failed": 2, "skipped": 1}
    assert rec["durations"] == {"tests/t.py::ok": 3.25, "tests/t.py::slow": 4.0, "tests/t.py::broken": 0.2,
                                "tests/t.py::nogpu": 0.0}
    # a failure keeps its report's last lines (the assertion and where), not the whole traceback
    slow = rec["failures"]["tests/t.py::slow"]
    assert slow.endswith("tests/t.py:9: AssertionError") and "assert 0.12 < 0.05" in slow
    assert "frame 0\n" not in slow and len(slow.splitlines()) == conftest.Seen.LINES
    assert rec["failures"]["tests/t.py::broken"] == "fixture 'gpu' not found"
    assert set(rec["failures"]) == {"tests/t.py::slow", "tests/t.py::broken"}
    assert rec["output"] == {"tests/t.py::ok": "setting up\nbf16 dq: ours 2.35e-03, fla 2.35e-03"}


def test_the_record_is_capped_and_named(conftest, tmp_path):
    s = conftest.Seen()
    assert s.write(tmp_path, 0, {}) is None and not list(tmp_path.iterdir())  # nothing seen, nothing written
    s.note(report("tests/grader/test_gpu.py::t", "call", "failed", 1.0, "x" * 10_000))
    assert len(s.failures["tests/grader/test_gpu.py::t"]) == conftest.Seen.CHARS
    assert s.write(tmp_path, None, {}) == tmp_path / "grader-tests.json"  # the grader's tests alone
    assert not json.loads((tmp_path / "grader-tests.json").read_text())["finished"]
    s.note(report("tests/kernels/test_x.py::t", "call"))
    assert s.write(tmp_path, 0, {}) == tmp_path / "tests.json"
    # another machine kind's folder beside results/gpu
    assert s.write(tmp_path / "gpu", 0, {}, "../gpu-h100/pytest-la.json").resolve() == \
        tmp_path / "gpu-h100" / "pytest-la.json"


def test_a_gpu_run_writes_the_file_the_batch_names(conftest, tmp_path, monkeypatch):
    """What scripts/gpu_batch.sh relies on: GPU_TESTS_RECORD names the file in results/gpu/."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(conftest, "RESULTS", tmp_path)
    monkeypatch.setattr(conftest, "_seen", seen(conftest))
    monkeypatch.setattr(conftest, "_config", types.SimpleNamespace(invocation_params=types.SimpleNamespace(
        args=("-m", "gpu"))))
    monkeypatch.setattr(conftest.kernels.device, "machine", lambda: {"gpu": "made up"})
    monkeypatch.setenv("GPU_TESTS_RECORD", "pytest-backward.json")
    conftest._record(0)
    rec = json.loads((tmp_path / "pytest-backward.json").read_text())
    assert rec["args"] == ["-m", "gpu"] and rec["gpu"] == "made up" and rec["counts"]["failed"] == 2
    monkeypatch.delenv("GPU_TESTS_RECORD")
    conftest._record(0)
    assert (tmp_path / "tests.json").exists()
