"""In the notebook's sandbox the package's references and kernels are closed: a lesson's imports of them still
succeed (a setup cell compares with a reference), but nothing in them can compute a graded function's answer."""

import pathlib

import pytest

from grader.sandbox import SandboxConfig, Worker

ROOT = pathlib.Path(__file__).resolve().parents[2]

PROBE = f'''
import importlib, os
from kernels.linear_attention.reference import recurrent_linear_attention
import kernels.linear_attention as la
from kernels.device import DEVICE
from kernels.testing import randn
import kernels.viz, kernels.bench, kernels.export.ptx
facts = {{"file": os.path.exists({str(ROOT / "kernels/linear_attention/reference.py")!r}),
         "listing": sorted(os.listdir({str(ROOT / "kernels/recurrent")!r})), "device": str(DEVICE)}}
for name, call in (("reference", lambda: recurrent_linear_attention(1, 2, 3)),
                   ("package", lambda: la.chunk_linear_attn(1)),
                   ("built", lambda: importlib.import_module("kernels.linear_" + "attention.chunked_torch")
                    .chunked_forward(1)),
                   ("export", lambda: importlib.import_module("kernels.export.manifest").resolve({{}}, {{}})),
                   ("matmul", lambda: importlib.import_module("kernels.matmul").reference_matmul(1, 2))):
    try:
        call()
        facts[name] = "ran"
    except RuntimeError as e:
        facts[name] = str(e)
'''


@pytest.fixture(scope="module")
def cfg():
    box = SandboxConfig(mode="interpreter", memory_limit=1 << 30)
    yield box
    box.close()


def test_references_are_closed_to_the_notebook(cfg):
    w = Worker(cfg, uid=cfg.uid_base + 89, mode="interpreter", kind="notebook", name="closed")
    try:
        w.send({"op": "notebook", "cells": [{"index": 0, "source": PROBE}]})
        while True:
            m = w.recv(120)
            if m["event"] == "cell_done":
                assert m.get("error") is None, m
            if m["event"] == "ready":
                break
        w.send({"op": "value", "name": "facts"})
        facts = w.recv(30)["value"]
    finally:
        w.close()
    assert facts["file"] is False and facts["listing"] == ["__init__.py"] and facts["device"] == "cpu"
    for name in ("reference", "package", "built", "export", "matmul"):
        assert "is not available while your notebook is graded" in facts[name], (name, facts[name])
