"""The exercise spec's helpers (kernels/checks/spec.py)."""

import pytest

from kernels.checks.spec import settings_problem


@pytest.mark.parametrize("value, words", [
    (dict(BT=64, BV=32), None),
    ([64, 32], "CHUNK must be a dict with keys BT, BV; got a list"),
    (dict(BT=64), "missing ['BV']"),
    (dict(BT=64, BV=32, BK=16), "unknown ['BK']"),
    (dict(BT=True, BV=32), "BT=True must be a positive integer"),
    (dict(BT=64, BV=0), "BV=0 must be a positive integer"),
    (dict(BT=64.0, BV=32), "BT=64.0 must be a positive integer"),
    (None, "CHUNK is still None: set it in its cell (a dict with keys BT, BV)"),
])
def test_settings_problem_names_the_first_fault(value, words):
    why = settings_problem("CHUNK", value, ("BT", "BV"))
    assert why is None if words is None else words in why, why


def test_every_speed_graded_exercise_is_found():
    from kernels.checks.spec import all_exercises

    timed = {ex.id for ex in all_exercises() if ex.performance is not None}
    assert {"01_memory_hierarchy.copy_speed", "04_chunked_linear_attention.chunked_speed",
            "07_backward.backward_speed"} <= timed, timed


def test_warm_performance_runs_each_baseline_once_and_measures_the_targets(monkeypatch):
    """What the grader does once per class on a GPU: each speed-graded exercise's baseline on its timed case (its
    compiles then cached for every worker), and the target measured there; a baseline or a target that fails is
    left to the check, which reports it."""
    import torch

    from kernels.checks import engine, spec

    calls = []

    def inputs(case, gen):
        return {"x": torch.randn(case["n"], generator=gen)}

    def make(name, baseline, target=None):
        case = spec.Case(f"n={name}", dict(n=37))
        return spec.Exercise(id=f"98_warm.{name}", args=("kernel",), signature="k(x_ptr, out_ptr, n)",
                             description="", make_inputs=inputs, run=lambda *a: None,
                             outputs=lambda case, inputs: {"out": ((case["n"],), torch.float32)},
                             reference=lambda inputs, case: {"out": inputs["x"]}, visible=[case],
                             performance=spec.Performance(case=case, baseline=baseline, min_speedup=0.5,
                                                          floor=lambda case: (8 * case["n"], 0), target=target))

    def copy(args, inputs, outputs, case):
        calls.append((args, outputs["out"].shape))
        outputs["out"].copy_(inputs["x"])

    def broken(*args):
        raise RuntimeError("no such kernel")

    def twice(inputs, case, floor):
        calls.append("target")
        return 2 * floor, "twice"

    exercises = [make("plain", copy), make("targeted", copy, twice),
                 make("broken", broken, broken)]
    monkeypatch.setattr(spec, "all_exercises", lambda: exercises)
    monkeypatch.setattr(engine, "_floor_ms", lambda perf: (0.25, 1e12))
    assert engine.warm_performance(between=lambda: calls.append("between")) == {"98_warm.targeted": (0.5, "twice")}
    assert calls == [((), (37,)), ((), (37,)), "between", "target"]  # the targets after the cache's snapshot
    assert engine.warm_performance(lessons={"97_other"}) == {} and len(calls) == 4  # only the lessons graded


def test_a_floor_measured_beside_other_work_is_measured_again(monkeypatch):
    """The ceilings behind the floor are measured in the grading process; measured while another grader used the
    same GPU they come out low and the floor high, above an honest kernel's time. A time under the floor gets them
    measured again (the highest rate kept) before the kernel is said to skip work; one that stays under it fails."""
    import torch

    from kernels.checks import engine, spec

    def inputs(case, gen):
        return {"x": torch.randn(case["n"], generator=gen)}

    def copy(args, inputs, outputs, case):
        outputs["out"].copy_(inputs["x"])

    case = spec.Case("n=37", dict(n=37))
    ex = spec.Exercise(id="98_floor.copy", args=("kernel",), signature="k(x_ptr, out_ptr, n)", description="",
                       make_inputs=inputs, run=copy,
                       outputs=lambda case, inputs: {"out": ((case["n"],), torch.float32)},
                       reference=lambda inputs, case: {"out": inputs["x"]}, visible=[case],
                       performance=spec.Performance(case=case, baseline=copy, min_speedup=0.01,
                                                    floor=lambda case: (8 * case["n"], 0)))
    for floors, passes in (([1e3, 1e3, 1e-9], True), ([1e3] * (engine.FLOOR_REMEASURES + 1) + [1e-9], False)):
        measured = iter(floors)
        monkeypatch.setattr(engine, "_floor_ms", lambda perf, measured=measured: (next(measured), 1e12))
        timing = engine.time_performance(ex, (), seed=0)
        verdict = engine.perf_verdict(ex, timing)
        assert (verdict == []) is passes, verdict
        if not passes:
            assert "faster than the hardware floor" in verdict[0] and timing["floor_ms"] == 1e3
