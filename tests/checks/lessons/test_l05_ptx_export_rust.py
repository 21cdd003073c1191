"""Lesson 05's checks: the solutions pass; twins that forget the scratch pointers, skip a refusal, or get the block
wrong fail with a message that says why; and the expected launch matches the package's own manifest reader."""


import pytest
import torch
from lessonkit import assert_fails as fails
from lessonkit import edit, function, grade, solution_cells

from kernels.checks.lessons.l05_ptx_export_rust import MANIFESTS, expected_launch, manifest
from kernels.export.manifest import resolve

CELLS = solution_cells("05_ptx_export_rust")
PREDICT = CELLS["ex1-predict"]
BUILD = CELLS["ex2-build"]


def namespace():
    """What the build_launch cell sees in the notebook: torch, triton and the lesson's `evaluate`."""
    import triton

    ns = {"torch": torch, "triton": triton}
    exec(CELLS["evaluate"].replace("print(", "(lambda *a: None)("), ns)
    return ns


def build(src=BUILD):
    return function(src, "build_launch", namespace())


def test_expected_launch_agrees_with_the_package_reader():
    sizes = {"yours": dict(B=2, T=100, H=3, K=32, V=40), "package": dict(B=1, T=37, H=2, K=20, V=70),
             "scratch": dict(n=1000), "wide": dict(M=33, N=100)}
    for name in MANIFESTS:
        m = manifest(name)
        plan = resolve(m, sizes[name])
        scalars = {p["name"]: 0.5 for p in m["params"] if p["kind"] == "scalar" and p["value"] is None}
        want = expected_launch(m, sizes[name], scalars)
        assert want["grid"] == plan.grid and want["block"][0] == plan.block and want["shared"] == plan.shared
        assert want["scratch_bytes"] == list(plan.scratch_bytes)
        ints = {p["name"]: v for p, (_, v) in zip(m["params"], want["args"]) if p["kind"] == "scalar"
                and p["value"] is not None}
        assert ints == {k: v for k, v in plan.scalars.items() if v is not None}


@pytest.mark.parametrize("hidden", [False, True])
def test_build_launch_solution_passes(hidden):
    out = grade("05_ptx_export_rust.build_launch", build(), hidden=hidden)
    assert out.passed, out.message


@pytest.mark.parametrize("old, new, words", [
    ('''        args.append(("u64", alloc(nbytes, s["align"]) if nbytes else 0))''', "        pass",
     ["arguments", "scratch pointers"]),
    ('''            raise ValueError(f"requirement {cond!r} fails for sizes {sizes}")''', "            pass",
     ["accepted", "K <= BK"]),
    ('''                raise TypeError(f"{name} has dtype {t.dtype}; the kernel was compiled for {p['dtype']}")''',
     "                pass", ["accepted", "dtype"]),
    ('''            args.append((p["type"], int(value)))''', '''            args.append((p["type"], float(value)))''',
     ["(T) is (i32, 37.0), expected (i32, 37)"]),
    ('''        args.append(("u64", alloc(nbytes, s["align"]) if nbytes else 0))''',
     '''        args.append(("u64", alloc(s["bytes_per_program"], s["align"]) if nbytes else 0))''', ["alloc"]),
    ('''            if not lo <= int(value) <= hi:''', '''            if False:''', ["accepted", "i32"]),
    ("        if not 1 <= g <= limit:", "        if not 1 <= g < limit:", ["refused", "inclusive", "65535"]),
])
def test_broken_build_launch_fails(old, new, words):
    out = grade("05_ptx_export_rust.build_launch", build(edit(BUILD, old, new)), hidden=True)
    fails(out, *words)


def test_predict_launch_solution_and_twins():
    import triton

    ns = {"triton": triton}
    assert grade("05_ptx_export_rust.predict_launch", function(PREDICT, "predict_launch", ns)).passed
    no_warp_size = edit(PREDICT, "metadata.num_warps * metadata.warp_size", "metadata.num_warps")
    fails(grade("05_ptx_export_rust.predict_launch", function(no_warp_size, "predict_launch", ns)), "block")
    swapped = edit(PREDICT, 'grid = (triton.cdiv(sizes["V"], constexprs["BV"]), sizes["B"] * sizes["H"], 1)',
                   'grid = (sizes["B"] * sizes["H"], triton.cdiv(sizes["V"], constexprs["BV"]), 1)')
    fails(grade("05_ptx_export_rust.predict_launch", function(swapped, "predict_launch", ns)), "grid")
    floor_div = edit(PREDICT, 'triton.cdiv(sizes["V"], constexprs["BV"])', 'sizes["V"] // constexprs["BV"]')
    fails(grade("05_ptx_export_rust.predict_launch", function(floor_div, "predict_launch", ns)), "grid")
    import numpy

    numpy_ints = edit(PREDICT, 'grid = (triton.cdiv(sizes["V"], constexprs["BV"]), sizes["B"] * sizes["H"], 1)',
                      'grid = tuple(numpy.array([triton.cdiv(sizes["V"], constexprs["BV"]), sizes["B"] * sizes["H"], '
                      '1]))')
    fails(grade("05_ptx_export_rust.predict_launch", function(numpy_ints, "predict_launch", {**ns, "numpy": numpy})),
          "convert each with int(")


def test_manifests_are_consistent():
    for name in MANIFESTS:
        m = manifest(name)
        assert m["threads_per_block"] % 32 == 0 and len(m["grid"]) == 3 and len(m["scratch"]) == 2
        assert all(p["name"] for p in m["params"])
