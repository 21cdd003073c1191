"""The zoo (``kernels/checks/zoo``): every plausible-wrong answer fails its checks with a message naming the
fault, every plausible-right one passes, under the interpreter (the GPU batch's ``zoo`` stage runs the same entries
on the H200 and writes ``results/gpu/zoo.json``)."""

import collections

import pytest

from kernels.checks.spec import get
from kernels.checks.zoo import OBJECTS, entries, grade_entry

ENTRIES = entries()

#: The answers the issue that started the zoo found passing or crashing, by exercise and zoo name.
REPORTED = {
    ("01_memory_hierarchy.copy", "fast-path-off-by-one"), ("01_memory_hierarchy.column", "load-unmasked"),
    ("04_chunked_linear_attention.intra_chunk", "loads-unmasked"), ("03_tiled_sram.tiled_matmul", "unit-stride-ak"),
    ("03_tiled_sram.tiled_matmul", "unit-stride-bn"), ("00_setup.vector_add", "stride-128"),
    ("05_ptx_export_rust.build_launch", "no-int-range"), ("03_tiled_sram.tiled_matmul", "fp16-accumulator"),
    ("02_naive_hbm_loops.naive", "state-in-registers"), ("03_tiled_sram.tile_traffic", "true-division"),
    ("02_naive_hbm_loops.naive", "padded-state"), ("04_chunked_linear_attention.intra_chunk", "q-strides-for-k"),
    ("04_chunked_linear_attention.chunked_torch", "batch-head-loop"),
    ("05_ptx_export_rust.build_launch", "refuses-misaligned"), ("00_setup.vector_add", "no-upcast"),
    ("03_tiled_sram.tiled_matmul", "no-k-mask"), ("02_naive_hbm_loops.naive", "k-load-unmasked"),
    ("03_tiled_sram.tile_choice", "small-tiles-skip-filled"), ("05_ptx_export_rust.build_launch", "sizes-only-env"),
}


#: Exercises without zoo entries of their own, and why.
WITHOUT_ZOO: dict[str, str] = {}


def test_every_kernel_exercise_has_a_full_zoo():
    kinds = collections.defaultdict(lambda: [0, 0])
    for e in ENTRIES:
        kinds[e.exercise][0 if e.wrong else 1] += 1
    for exercise in OBJECTS.keys() - WITHOUT_ZOO.keys():
        wrong, right = kinds[exercise]
        kernel = get(exercise).args == ("kernel",) and get(exercise).performance is None
        assert right >= (3 if kernel or exercise.endswith(("_torch", "build_launch")) else 1), exercise
        assert wrong >= (8 if kernel else 1), exercise
    names = {(e.exercise, e.name) for e in ENTRIES}
    assert len(names) == len(ENTRIES), "two entries share a name"
    assert REPORTED <= names, REPORTED - names


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # an fp16 accumulator, overflowing
@pytest.mark.parametrize("entry", ENTRIES, ids=[e.id for e in ENTRIES])
def test_entry(entry):
    row = grade_entry(entry)
    assert row["ok"], f"{entry.id} ({entry.why}): " + "; ".join(row["problems"])


@pytest.mark.slow
def test_the_entries_only_a_gpu_times_compile_for_sm90():
    """Under the interpreter the speed exercises' entries are graded for correctness only; the GPU compiles them.
    A compile error there (a variable defined inside a loop and used after it) would cost the GPU batch its run."""
    import subprocess
    import sys

    timed = sorted({e.exercise for e in ENTRIES if get(e.exercise).performance is not None})
    assert {"01_memory_hierarchy.copy_speed", "06_profile_compile_autotune.fixed_speed"} <= set(timed), timed
    only = [a for exercise in timed for a in ("--only", f"{exercise}/")]
    proc = subprocess.run([sys.executable, "-m", "kernels.checks.zoo", "--compile", *only], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_the_command_grades_in_worker_processes(tmp_path):
    """``python -m kernels.checks.zoo --jobs 2``, as the GPU batch runs it: the entries go to spawned workers (each
    with its share of the CPU threads) and the report says what each got."""
    import json
    import subprocess
    import sys

    out = tmp_path / "zoo.json"
    proc = subprocess.run([sys.executable, "-m", "kernels.checks.zoo", "--lesson", "00_setup", "--only", "stride-128",
                           "--only", "no-mask", "--jobs", "2", "--out", str(out)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["finished"] and report["entries"] >= 2 and not report["bad"], report


#: The zoo's copies of a lesson's solution (constant in the lesson's zoo module -> the solution's functions and
#: classes it holds): each wrong entry is an edit of one, so a copy that drifts from the solution tests an answer
#: nobody would write from today's lesson.
SOLUTION_COPIES = {
    "02_naive_hbm_loops": {"NAIVE": ["naive_kernel"], "FUSED": ["fused_kernel"]},
    "03_tiled_sram": {"TILED": ["tiled_matmul_kernel"]},
    "04_chunked_linear_attention": {"TORCH": ["chunked_attention_torch"], "INTRA": ["intra_chunk_kernel"],
                                    "FUSED": ["chunked_attention_kernel"]},
    "05_ptx_export_rust": {"PREDICT": ["predict_launch"], "PRELUDE": ["evaluate"], "BUILD": ["build_launch"]},
    "07_backward": {"TORCH": ["chunked_backward_torch"], "DQ": ["dq_kernel"], "DKDV": ["dkdv_kernel"],
                    "FORWARD": ["forward_kernel"],
                    "LAUNCHERS": ["strides", "pow2", "launch_dq", "launch_dkdv", "precision_for", "chunked_forward"],
                    "FUNCTION": ["ChunkedLinearAttention", "linear_attention"]},
}


def _definitions(source: str) -> dict:
    """name -> the AST of each function and class defined in ``source``, docstrings left out (comments and
    layout are not in an AST)."""
    import ast

    out = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
            out[node.name] = ast.dump(node)
    return out


@pytest.mark.parametrize("lesson", sorted(SOLUTION_COPIES))
def test_zoo_copies_match_the_solution(lesson):
    import importlib

    from grader.layout import SOLUTIONS

    text = "\n".join(line for line in (SOLUTIONS / f"{lesson}.py").read_text().splitlines()
                     if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line)
    solution = _definitions(text)
    module = importlib.import_module(f"kernels.checks.zoo.l{lesson}")
    for constant, names in SOLUTION_COPIES[lesson].items():
        copy = _definitions(getattr(module, constant))
        for name in names:
            assert name in solution, f"solutions/{lesson}.py no longer defines {name}"
            assert copy.get(name) == solution[name], (
                f"the zoo's {constant} (kernels/checks/zoo/l{lesson}.py) holds a {name} that is not the solution's "
                "(comments, docstrings and layout aside): update the copy, then the edits of its entries")
