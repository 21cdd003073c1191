"""The zoo (``grader/zoo``): every plausible-wrong answer fails its checks with a message naming the
fault, every plausible-right one passes, under the interpreter (the GPU batch's ``zoo`` stage runs the same entries
on the H200 and writes ``results/gpu/zoo.json``)."""

import collections

import pytest

from grader.zoo import OBJECTS, entries, grade_entry
from kernels.checks.spec import get

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
    proc = subprocess.run([sys.executable, "-m", "grader.zoo", "--compile", *only], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_the_command_grades_in_worker_processes(tmp_path):
    """``python -m grader.zoo --jobs 2``, as the GPU batch runs it: the entries go to spawned workers (each
    with its share of the CPU threads) and the report says what each got."""
    import json
    import subprocess
    import sys

    out = tmp_path / "zoo.json"
    proc = subprocess.run([sys.executable, "-m", "grader.zoo", "--lesson", "00_setup", "--only", "stride-128",
                           "--only", "no-mask", "--jobs", "2", "--out", str(out)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["finished"] and report["entries"] >= 2 and not report["bad"], report


def test_the_zoo_edits_the_solution_itself():
    """A lesson's zoo starts from its solution as ``solutions/`` holds it today (``zoo.solution``): the definitions
    named, with their decorators, in the file's order, without comments or solution markers; a name the solution
    does not define is an error, not an empty base."""
    import ast

    from grader.zoo import solution

    base = solution("07_backward", "launch_dq", "dq_kernel")  # named out of order: the file's order comes back
    assert base.startswith("@triton.jit\ndef dq_kernel(") and "\ndef launch_dq(" in base
    assert base.index("def dq_kernel(") < base.index("def launch_dq(")
    assert "#" not in base and "### " not in base
    defined = {n.name for n in ast.parse(base).body if isinstance(n, ast.FunctionDef)}
    assert defined == {"dq_kernel", "launch_dq"}
    prelude = solution("05_ptx_export_rust", "ast", "operator", "_OPS", "evaluate")
    assert prelude.startswith("import ast") and "_OPS = {" in prelude and "def evaluate(" in prelude
    with pytest.raises(LookupError, match="defines no no_such_kernel"):
        solution("02_naive_hbm_loops", "naive_kernel", "no_such_kernel")
