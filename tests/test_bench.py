"""The benchmark runner (kernels/bench.py): validate, then time, and keep what finished."""

import pytest
import torch


@pytest.mark.parametrize("topic", ["vector_add", "memory", "recurrent", "matmul"])
def test_bench_versions_match_the_oracle(topic):
    """Every version a topic's benchmark times computes what its oracle does, on the quick problems."""
    import importlib

    from kernels.testing import rel_error

    bench = importlib.import_module(f"kernels.{topic}.bench")
    for p in bench.problems(quick=True):
        inputs = p.make_inputs(0)
        ref = p.reference(**inputs)
        for v in bench.versions():
            if v.skip(p) is None:
                assert rel_error(v.output(v.fn(**inputs)), ref) <= p.tol, (p.label, v.name)


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


def test_cli_picks_rows_and_times_the_public_entry(tmp_path):
    """``--rows`` (comma-separated labels, spaces allowed) runs only those problems; ``chunk_linear_attn`` (the
    entry point that picks a version per call) is a version of its own, checked against the oracle like the rest."""
    import json

    from kernels import bench

    assert bench.main(["linear_attention", "--rows", "state,varlen", "--only", "chunk_linear_attn",
                       "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "linear_attention-interpreter.json").read_text())
    assert [r["problem"] for r in saved["rows"]] == ["varlen", "state"]
    for r in saved["rows"]:
        entry = r["versions"]["chunk_linear_attn"]
        assert entry["status"] == "ok" and entry["rel_error"] <= 1e-2, entry


def test_problem_sets_filters_and_budget(tmp_path, monkeypatch):
    """``--set general`` runs the generality rows (normalised, fp32 with a precision, packed with states), each
    checked against float64; ``--where`` keeps rows by parameter and names an unknown one; a budget of 0 s stops
    before the first row and marks the run incomplete."""
    import json

    from kernels import bench

    # What is asserted here is the filtering and the float64 check; a timing is 4 more interpreted calls of every
    # version (a warm-up and 3 timed) and most of the test's time. One timed call keeps the timing path run.
    monkeypatch.setattr(bench, "time_ms", lambda fn, **kw: _once_ms(fn))
    assert bench.main(["linear_attention", "--set", "general", "--where", "normalize=True",
                       "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "linear_attention-general-interpreter.json").read_text())
    assert saved["complete"] and saved["set"] == "general"
    assert {r["normalize"] for r in saved["rows"]} == {True} and len(saved["rows"]) == 2
    for r in saved["rows"]:
        for name in ("chunk_linear_attn", "norm on tensor cores"):  # the normaliser two ways
            entry = r["versions"][name]
            assert entry["status"] == "ok" and entry["rel_error"] <= 1e-2, (name, entry)
        assert "is the default" in r["versions"]["try norm-wide"]["reason"]  # adopted: not timed twice
    with pytest.raises(ValueError, match="not a parameter"):
        bench.run("linear_attention", problem_set="general", where=bench.parse_where("colour=red"), out=tmp_path)
    with pytest.raises(ValueError, match="no problem set"):
        bench.run("linear_attention", problem_set="nope", out=tmp_path)
    result = bench.run("linear_attention", problem_set="targets", budget=0, out=tmp_path)
    assert result["rows"] == [] and not result["complete"] and "budget" in result["stopped"]


def test_resume_keeps_the_rows_done_and_runs_the_rest(tmp_path, monkeypatch):
    """``--resume``: a grid too long for one run goes in slices; the rows an earlier run holds for every version
    asked are kept, not run again, and the file written holds them and the new ones. A row that lacks a version
    asked now runs again; a file of another set, or of another machine, is refused."""
    import json

    from kernels import bench

    monkeypatch.setattr(bench, "time_ms", lambda fn, **kw: _once_ms(fn))
    out = tmp_path / "linear_attention-general-interpreter.json"
    first = bench.run("linear_attention", problem_set="general", only=["chunk_linear_attn"],
                      where=bench.parse_where("normalize=True"), out=tmp_path)
    assert len(first["rows"]) == 2
    timed = []  # the rows timed (a version's calls go through _rotating)
    rotating = bench._rotating
    monkeypatch.setattr(bench, "_rotating", lambda v, p, inputs: timed.append(p.label) or rotating(v, p, inputs))
    second = bench.main(["linear_attention", "--set", "general", "--only", "chunk_linear_attn", "--resume", str(out),
                         "--out", str(tmp_path)])
    assert second == 0
    saved = json.loads(out.read_text())
    assert len(saved["rows"]) == 3 and saved["complete"]
    assert saved["rows"][:2] == json.loads(json.dumps(first["rows"]))  # the two kept as they were
    assert timed == [saved["rows"][2]["problem"]]  # only the third timed
    assert [sl["rows"] for sl in saved["slices"]] == [[r["problem"] for r in saved["rows"][:2]],
                                                      [saved["rows"][2]["problem"]]]  # which run measured which
    timed.clear()
    both = bench.run("linear_attention", problem_set="general", only=["chunk_linear_attn", "norm on tensor cores"],
                     resume=out, out=tmp_path)
    assert len(both["rows"]) == 3 and len(set(timed)) == 3  # no row held the second version: every row ran again
    with pytest.raises(ValueError, match="not linear_attention/targets"):
        bench.run("linear_attention", problem_set="targets", resume=out, out=tmp_path)
    saved["env"]["gpu"] = "NVIDIA H200"
    out.write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="measured on NVIDIA H200"):
        bench.run("linear_attention", problem_set="general", resume=out, out=tmp_path)


def _once_ms(fn) -> float:
    import time

    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def test_backward_set(tmp_path):
    """``--set backward`` times forward + backward after checking dq, dk, dv and the initial state's gradient
    against float64 autograd; a version with a broken gradient is reported WRONG, not timed."""
    import json

    from kernels import bench
    from kernels.linear_attention import bench_backward

    def wrong(q, k, v, scale, h0, final, cu):
        o, ht = bench_backward._ours(q, k, v, scale, h0, final, cu)
        return o.detach() + q.sum(-1, keepdim=True) * 0 + q[..., :1] * 1e-3, ht

    run, extras = bench_backward.fwd_bwd(wrong)
    result = bench.run("linear_attention", problem_set="backward", labels=["varlen state"], out=tmp_path,
                       only=["chunk_linear_attn fwd+bwd", "wrong"], extra=[bench.Version("wrong", run,
                                                                                        output=bench_backward._flat)])
    saved = json.loads((tmp_path / "linear_attention-backward-interpreter.json").read_text())
    assert saved["complete"] and result["rows"][0]["B"] == 1
    entry = saved["rows"][0]["versions"]["chunk_linear_attn fwd+bwd"]
    assert entry["status"] == "ok" and entry["rel_error"] <= 1e-2, entry
    assert saved["rows"][0]["versions"]["wrong"]["status"] == "WRONG"
    # autograd saves q, k, v and the initial state for our backward, and its context keeps the offsets: the
    # step's own inputs, nothing extra
    assert entry["saved_bytes"] == 0 and entry["saved_fraction"] == 0 and entry["saved_tensors"] == 5, entry


def test_backward_memory_counts_saved_intermediates():
    """``fwd_bwd``'s ``saved_bytes`` counts a tensor the forward computes and saves (once, however many views of it
    are saved), never the caller's inputs or the outputs."""
    from kernels.linear_attention import bench_backward

    def keeps_squares(q, k, v, scale, h0, final, cu):
        o, ht = bench_backward._ours(q, k, v, scale, h0, final, cu)
        sq = q * 2.0  # a new [B, T, H, K] tensor; mul saves it, and its view saves it once more
        return o + (sq * sq[:, :, :, :1]).sum(-1, keepdim=True) * 0.0, ht

    inputs = bench_backward.problems(quick=True)[0].make_inputs(0)
    _, extras = bench_backward.fwd_bwd(keeps_squares)
    got = extras(inputs)
    assert got["saved_bytes"] == inputs["q"].numel() * inputs["q"].element_size(), got
    assert abs(got["saved_fraction"] - 1 / 3) < 1e-9, got


def test_backward_memory_counts_what_a_function_keeps_on_its_context():
    """A custom autograd.Function that keeps a tensor as an attribute of its context (``ctx.q = q.float()``) holds
    it for the backward as surely as one that saves it: ``saved_bytes`` counts both alike."""
    from kernels.linear_attention import bench_backward

    def keeping(how):
        class Doubled(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                copy = x.float() * 1.0  # a new fp32 tensor, held for the backward
                if how == "save":
                    ctx.save_for_backward(copy)
                else:
                    ctx.kept = [copy]
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2

        def fn(q, k, v, scale, h0, final, cu):
            o, ht = bench_backward._ours(q, k, v, scale, h0, final, cu)
            return o + Doubled.apply(q)[..., :1] * 0.0, ht

        return fn

    inputs = bench_backward.problems(quick=True)[0].make_inputs(0)
    fp32_q = inputs["q"].numel() * 4
    for how in ("save", "ctx"):
        got = bench_backward.fwd_bwd(keeping(how))[1](inputs)
        assert got["saved_bytes"] == fp32_q, (how, got)


def test_warm_up_in_child_processes(tmp_path):
    """``--warm 2`` first calls every version on every row in child processes (one per group of rows sharing
    kernels), then checks and times as usual; the run records each group's exit status."""
    import json

    from kernels import bench

    assert bench.main(["linear_attention", "--set", "targets", "--where", "normalize=False", "--warm", "2",
                       "--only", "chunk_linear_attn", "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "linear_attention-targets-interpreter.json").read_text())
    (group,) = saved["warm"]["groups"]
    assert group["returncode"] == 0 and group["rows"] == [r["problem"] for r in saved["rows"]]
    assert saved["complete"] and saved["rows"][0]["versions"]["chunk_linear_attn"]["status"] == "ok"


def test_graph_launch_needs_a_gpu():
    from kernels.bench import graph_launch_us
    from kernels.device import ON_GPU

    if ON_GPU:
        pytest.skip("measured on the GPU (test_graph_launch_replays_the_launches)")
    with pytest.raises(RuntimeError, match="needs a GPU"):
        graph_launch_us(lambda: None)


@pytest.mark.gpu
def test_graph_launch_replays_the_launches():
    """Eager calls and graph replays both run the launches: every one adds to the accumulator."""
    import torch

    from kernels.bench import graph_launch_us

    acc = torch.zeros(1024, device="cuda")
    got = graph_launch_us(lambda: acc.add_(1.0), launches=10)
    torch.cuda.synchronize()
    assert got["launches"] == 10 and got["eager_us"] > 0 and got["graph_us"] > 0
    # 3 warm-up calls, then at least one eager timing and one replay of 10 launches each
    assert acc.min().item() >= 3 + 10 + 10


def test_normaliser_cost_pairs_rows():
    """The report sets each normalising row beside the same row without the normaliser, per version."""
    from kernels.linear_attention.bench import _normaliser_cost

    def row(norm, T, times):
        return {"problem": f"{norm} T{T}", "normalize": norm, "B": 4, "T": T, "H": 16, "K": 128, "V": 128,
                "dtype": "bfloat16", "precision": None, "varlen": False, "state": False,
                "versions": {n: {"status": "ok", "ms": ms} for n, ms in times.items()}}

    ours, mma = "chunk_linear_attn", "norm on tensor cores"  # the second is timed on normalising rows only
    rows = [row(True, 16, {ours: 0.8, mma: 0.4}), row(False, 16, {ours: 0.35}), row(True, 64, {ours: 3.0})]
    lines = _normaliser_cost(rows)
    assert lines[1:] == [f"  True T16: {ours} 2.29x, {mma} 1.14x"]  # no raw row at T64: left out
    assert _normaliser_cost(rows[2:]) == []


def test_unchecked_row_gathers_no_output(tmp_path, monkeypatch):
    """A row too big for the oracle (``validate=False``) runs each version without gathering its result for a
    comparison: the backward's gathering (the gradients as one fp32 tensor) took T=256k past an 80 GiB card."""
    import dataclasses

    from kernels import bench
    from kernels.linear_attention import bench as la_bench

    monkeypatch.setattr(bench, "time_ms", lambda fn, **kw: _once_ms(fn))
    first = la_bench.problems(False)[0]
    monkeypatch.setattr(la_bench, "problems", lambda quick: [dataclasses.replace(first, validate=False)])

    def gathered(_):
        raise AssertionError("the output of an unchecked row was gathered")

    ran = []

    def fn(q, k, v, scale, initial_state=None, output_final_state=False, cu_seqlens=None):
        ran.append(q.shape)
        return torch.zeros_like(v), None

    result = bench.run("linear_attention", out=tmp_path, only=["unchecked"],
                       extra=[bench.Version("unchecked", fn, output=gathered)])
    entry = result["rows"][0]["versions"]["unchecked"]
    assert entry["status"] == "ok" and "rel_error" not in entry and ran, entry


def test_fp32_floor_takes_the_rows_precision(tmp_path, monkeypatch):
    """An fp32 row's FLOP floor is the matmul rate at the precision the row runs under (TF32 for "high"), measured
    with torch set to it and the setting restored; the result names each rate it used."""
    import json

    from kernels import bench

    seen = []

    def timed(fn, **kw):
        seen.append(torch.get_float32_matmul_precision())
        return _once_ms(fn)

    monkeypatch.setattr(bench, "time_ms", timed)
    old = torch.get_float32_matmul_precision()
    assert bench.matmul_rate(torch.float32, "medium") > 0
    assert seen == ["medium"] and torch.get_float32_matmul_precision() == old
    seen.clear()
    bench.run("linear_attention", problem_set="general", where=bench.parse_where("dtype=float32"),
              only=["chunk_linear_attn"], out=tmp_path)
    saved = json.loads((tmp_path / "linear_attention-general-interpreter.json").read_text())
    assert [r["precision"] for r in saved["rows"]] == ["high"]
    assert list(saved["matmul_rate_flops"]) == ["torch.float32 high"]
    assert seen[:2] == [old, "high"]  # the copy bandwidth, then the matmul rate at the row's precision
    assert torch.get_float32_matmul_precision() == old
