"""The GPU stage's family check (scripts/gpu_la_check.py) on its CPU path: its grid covers every family, its cases
pass at interpreter sizes, a wrong output is reported as FAIL, and a child that dies costs that case alone."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import pathlib
import sys

import pytest
import torch

_PATH = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "gpu_la_check.py"
_spec = importlib.util.spec_from_file_location("gpu_la_check", _PATH)
la_check = sys.modules.setdefault("gpu_la_check", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(la_check)


def test_grid_covers_every_family():
    cases = la_check.cases()
    families = {(c.norm, c.dtype) for c in cases.values()}
    assert families == {(n, d) for n in (True, False) for d in la_check.DTYPES}
    for dtype, pairs in la_check.PAIRS.items():
        for K, V in pairs:
            shapes = {(c.shape, c.norm) for c in cases.values() if (c.dtype, c.K, c.V) == (dtype, K, V)}
            assert {("small", True), ("large", True), ("small", False), ("large", False)} <= shapes
    assert any(c.shape == "packed" and c.L == 0 for c in cases.values())
    assert any(c.shape == "packed" and c.L for c in cases.values())
    assert {c.L for c in cases.values() if c.shape == "small" and c.L} >= {256, 512}
    assert sum(c.states for c in cases.values()) >= len(cases) // 2
    assert set(la_check.SANITIZE) <= set(cases)
    plain = [c for c in cases.values() if not c.mma and not c.tried]
    # every case a candidate launch change applies to is checked again with it, before the others
    # (an adopted candidate is the default: the plain cases check it)
    from kernels.linear_attention import dispatch

    pending = {name for name in dispatch.CANDIDATES if name not in dispatch.ADOPTED}
    assert all(dataclasses.replace(c, tried="norm-wide").name in cases for c in plain
               if c.norm and c.dtype in ("bf16", "fp16") and "norm-wide" in pending)
    assert all(dataclasses.replace(c, tried="fp32-kt").name in cases for c in plain
               if c.dtype == "fp32-high" and max(c.K, c.V) <= 128 and "fp32-kt" in pending)
    assert {c.tried for c in cases.values()} == {""} | pending
    order = [bool(c.tried) for c in cases.values()]
    assert order == sorted(order, reverse=True)
    assert {c.mma for c in cases.values()} == {"", "ksum", "qzt"}
    assert not any(c.mma and not c.norm for c in cases.values())


def _first(**want):
    return next(c for c in la_check.cases().values() if all(getattr(c, k) == v for k, v in want.items()))


@pytest.mark.parametrize("want", [dict(norm=True, dtype="fp16", K=64, V=256, shape="large"),
                                  dict(norm=True, dtype="bf16", shape="small", L=256),
                                  dict(norm=False, dtype="fp32-high", shape="small", states=True),
                                  dict(norm=True, dtype="bf16", shape="packed", L=1024),
                                  dict(norm=False, dtype="fp32-high", shape="small", tried="fp32-kt"),
                                  dict(norm=True, dtype="fp16", K=256, mma="qzt"), dict(norm=True, mma="ksum")],
                         ids=["norm-fp16-K64V256", "norm-bf16-chained", "raw-fp32-states", "norm-bf16-packed-chained",
                              "raw-fp32-kt", "norm-fp16-D256-mma-qzt", "norm-mma-ksum"])
def test_tiny_cases_pass(want):
    r = la_check.run_case(_first(**want), tiny=True)
    assert r["status"] == "pass", r["problems"]
    assert set(r["errors"]) == ({"o", "final_state", "z_state"} if want["norm"] else {"o", "final_state"})


def test_wrong_output_fails(monkeypatch):
    import kernels.linear_attention as la

    real = la.chunk_linear_attn

    def off_by_one_percent(*a, **kw):
        o, final = real(*a, **kw)
        return o * 1.01 + (o == o).to(o.dtype) * 1e-2, final

    monkeypatch.setattr(la, "chunk_linear_attn", off_by_one_percent)
    r = la_check.run_case(_first(norm=True, dtype="fp16", shape="large", tried="", mma="", L=None), tiny=True)
    assert r["status"] == "FAIL" and any(p.startswith("o: relative error") for p in r["problems"])


def test_children_fail_alone_and_memcheck_decides(tmp_path, monkeypatch):
    """Each case in a process of its own: one that aborts (as on a CUDA fault) is a CRASH with its last words, the
    others are unharmed. Under compute-sanitizer (a stand-in here that runs the case and prints memcheck's
    summary) the summary decides: no errors passes, errors (exit 99) is SANITIZER; the numbers are kept beside."""
    import os
    import stat

    good, bad = (_first(norm=n, dtype="bf16", K=64, V=64, shape="large", mma="", tried="").name for n in (True, False))
    tool = tmp_path / "bin" / "compute-sanitizer"
    tool.parent.mkdir()
    tool.write_text('#!/bin/sh\nshift 6\ncase "$*" in *raw*) bad=1;; *) bad=0;; esac\n"$@" || exit $?\n'
                    'if [ $bad = 1 ]; then echo "========= Invalid __global__ read of size 4"; '
                    'echo "========= ERROR SUMMARY: 1 error"; exit 99; fi\necho "========= ERROR SUMMARY: 0 errors"\n')
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "la-check.json"
    r = la_check.run_all([good, "selftest-abort"], out=out, tiny=True, jobs=4, sanitize=[good, bad], timeout=120)
    saved = json.loads(out.read_text())
    assert saved["cases"][good]["status"] == "pass"
    crash = saved["cases"]["selftest-abort"]
    assert crash["status"] == "CRASH" and "aborting on purpose" in crash["stderr_tail"]
    ok, fault = saved["sanitized"][good], saved["sanitized"][bad]
    assert ok["status"] == "pass" and ok["numeric_status"] == "pass" and "0 errors" in ok["sanitizer"]
    assert fault["status"] == "SANITIZER" and fault["numeric_status"] == "pass"
    assert "Invalid __global__ read" in fault["problems"][0]
    assert r["summary"] == {"pass": 2, "CRASH": 1, "SANITIZER": 1} and saved["complete"]
    assert "  norm bf16 K64V64 tensor cores (wide): 1 pass" in la_check.families(saved).splitlines()  # adopted
    assert torch.get_float32_matmul_precision() == "highest"  # nothing leaked into this process
