"""The leaderboard (grader/leaderboard.py): who is listed, in which table, in what order, from recorded results."""

import csv
import json

from grader import leaderboard

H200 = "GPU: NVIDIA H200, 132 SMs, 141 GiB | torch 2.11.0+cu130, triton 3.6.0"
A100 = "GPU: NVIDIA A100-SXM4-80GB, 108 SMs, 79 GiB | torch 2.11.0+cu130, triton 3.6.0"
EX = "03_tiled_sram.matmul"


def _result(student, where, *, ms, passed=True, lines=None, status=None, faults=(), mismatch=(), exercise=EX):
    perf = {"student_ms": ms, "baseline_ms": 1.0, "floor_ms": 0.25, "case": "2048x2048x2048 fp16",
            "faults": list(faults), "mismatch": list(mismatch)}
    check = {"exercise": exercise, "hidden": False, "passed": passed, "status": status or ("passed" if passed
                                                                                          else "failed"),
             "lines": lines or [f"✓ {exercise}"], "not_graded": [], "perf": perf, "seconds": 1.0}
    return {"student": student, "lesson": exercise.split(".")[0], "where": where, "mode": "gpu",
            "cells": [{"grade_id": "c", "points": 4, "score": 4 if passed else 0, "checks": [check], "error": ""}]}


def test_only_correct_results_ranked_per_gpu_model(tmp_path):
    results = [
        _result("alice", H200, ms=0.5),
        _result("bob", H200, ms=0.4),
        _result("slow", H200, ms=4.0, passed=False, lines=[f"{EX}: too slow at 2048: 4.0 ms vs torch.matmul"]),
        _result("recheck", H200, ms=0.3, passed=False,
                lines=[f"{EX} failed after timing on case x:", "  - relative error 1.0"]),
        _result("cheat", H200, ms=0.01, passed=False,
                lines=[f"{EX}: 0.0100 ms is faster than the hardware floor (0.2500 ms ...)"]),
        _result("mismatch", H200, ms=0.3, mismatch=["differs"]),
        _result("elsewhere", A100, ms=0.9),
        _result("interp", "no GPU: Triton interpreter on the CPU", ms=0.9),
        _result("capstone", H200, ms=0.5, exercise="04_chunked_linear_attention.chunk_fwd"),
    ]
    rows = [r for d in results for r in leaderboard.rows_of(d)]
    assert sorted({r.student for r in rows}) == ["alice", "bob", "capstone", "elsewhere", "slow"]
    html_path, csv_path = leaderboard.write(rows, tmp_path, progress=(3, 9))
    table = list(csv.DictReader(csv_path.open()))
    h200 = [(t["rank"], t["student"], t["x_floor"], t["meets_requirement"]) for t in table
            if t["gpu"] == "NVIDIA H200" and t["exercise"] == EX]
    assert h200 == [("1", "bob", "1.600", "yes"), ("2", "alice", "2.000", "yes"), ("3", "slow", "16.000", "no")]
    assert [t["student"] for t in table if t["gpu"].startswith("NVIDIA A100")] == ["elsewhere"]
    assert [t for t in table if t["gpu"] == "NVIDIA H200"][0]["exercise"].startswith("04_"), "capstone first"
    page = html_path.read_text()
    assert "grading: 3 of 9 done" in page and "http-equiv='refresh'" in page
    assert page.index("on NVIDIA A100") < page.index("04_chunked_linear_attention.chunk_fwd on NVIDIA H200")
    leaderboard.write(rows, tmp_path)
    assert "refresh" not in html_path.read_text() and "final" in html_path.read_text()


def test_from_recorded_results_and_live(tmp_path):
    d = tmp_path / "reports" / "results" / "alice"
    d.mkdir(parents=True)
    (d / "03_tiled_sram.json").write_text(json.dumps(_result("alice", H200, ms=0.5)))
    (d / "broken.json").write_text("{")
    rows = leaderboard.from_results_dir(tmp_path)
    assert [(r.student, r.x_floor) for r in rows] == [("alice", 2.0)]
    live = leaderboard.Live(tmp_path / "reports")
    live.add(1, 2, _result("bob", H200, ms=0.75))
    assert "grading: 1 of 2 done" in live.html.read_text() and "bob" in live.html.read_text()
    live.finish(rows)
    assert "bob" not in live.html.read_text() and "alice" in live.html.read_text()
