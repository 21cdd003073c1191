"""The benchmark runner (kernels/bench.py): validate, then time, and keep what finished."""

import pytest
import torch


def test_bench_writes_each_finished_problem(tmp_path):
    """A run stopped part-way (a time limit on the GPU machine) still leaves the problems it finished, marked
    incomplete; a whole run is marked complete and has its table and plot."""
    import json

    from kernels import bench
    from kernels.linear_attention.bench import problems

    first = problems(False)[0].label
    calls = []

    def stop_on_second_problem(q, k, v, scale, initial_state=None, output_final_state=False, cu_seqlens=None):
        calls.append(q.shape)
        if len(calls) > 1:
            raise SystemExit("time limit")
        return torch.zeros_like(v), None

    stopper = bench.Version("stopper", stop_on_second_problem, output=lambda r: r[0])
    with pytest.raises(SystemExit):
        bench.run("linear_attention", out=tmp_path, only=["stopper"], extra=[stopper])
    saved = json.loads((tmp_path / "linear_attention-interpreter.json").read_text())
    assert saved["complete"] is False and [r["problem"] for r in saved["rows"]] == [first]
    assert saved["rows"][0]["versions"]["stopper"]["status"] == "WRONG"  # zeros are not the oracle's answer

    result = bench.run("linear_attention", out=tmp_path, only=["chunked"])
    saved = json.loads((tmp_path / "linear_attention-interpreter.json").read_text())
    assert saved["complete"] is True and len(saved["rows"]) == len(problems(False)) == len(result["rows"])
    assert all(r["versions"]["chunked"]["status"] == "ok" for r in saved["rows"]), saved["rows"]
    assert (tmp_path / "linear_attention-interpreter.png").stat().st_size > 0
