"""The learner's path around the lessons: plots that show, a lab that starts, a working copy that survives."""

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest

from grader.course import COURSE, ROOT, lesson_ids, solution_notebook
from grader.course.run import execute, lesson_notebook
from grader.course.workcopy import WORK, sync


def _cells(lesson, ids):
    nb = solution_notebook(lesson)
    keep = [c for c in nb.cells if c.get("id") in ids]
    assert [c.id for c in keep] == [i for i in ids], "a cell this test runs was renamed"
    out = nbformat.v4.new_notebook(metadata=nb.metadata)
    out.cells = keep
    return out


@pytest.mark.slow
def test_lesson_00s_try_it_cell_says_to_write_the_kernel_while_it_is_the_stub():
    # the locked cell after exercise 1 launches add_kernel: on the untouched student copy it asks for the kernel
    # (as every later lesson's try-it cells do) instead of ending in a traceback from inside Triton
    nb = lesson_notebook("00_setup", "student")
    nb.cells = [c for c in nb.cells if c.get("id") in ("setup", "add_kernel", "wrapper")]
    run = execute(nb, lesson="00_setup", copy="student")
    assert "wrapper" not in run.errors, run.errors["wrapper"]
    text = "".join(o.get("text", "") for o in run.nb.cells[-1].outputs)
    assert "write it in the cell above" in text, text


@pytest.mark.slow
def test_lesson_03s_try_it_cell_says_to_write_the_kernel_while_it_is_the_stub():
    # the wrapper cell after exercise 1 launches tiled_matmul_kernel: on the untouched student copy it ended in
    # "InterpreterError: NotImplementedError()" from inside Triton; it asks for the kernel as lesson 00's does
    nb = lesson_notebook("03_tiled_sram", "student")
    nb.cells = [c for c in nb.cells if c.get("id") in ("setup", "imports", "naive", "ex1-tiled", "ex1-try")]
    run = execute(nb, lesson="03_tiled_sram", copy="student")
    assert "ex1-try" not in run.errors, run.errors["ex1-try"]
    text = "".join(o.get("text", "") for o in run.nb.cells[-1].outputs)
    assert "write it in the cell above" in text, text


@pytest.mark.slow
def test_lesson_02s_benchmark_leaves_the_multiple_of_the_floor_to_a_gpu():
    # in the interpreter a time says nothing about the memory floor (lesson 00's benchmark says so the same way)
    nb = _cells("02_naive_hbm_loops", ["setup", "naive_kernel", "fused_kernel", "bench"])
    run = execute(nb, lesson="02_naive_hbm_loops", copy="solution")
    assert not run.errors, run.errors
    rows = [ln for o in run.nb.cells[-1].outputs for ln in o.get("text", "").splitlines() if ln.strip().startswith(
        "your ")]
    assert len(rows) == 2 and all("(GPU only)" in r for r in rows), rows


@pytest.mark.slow
def test_the_roofline_plot_shows_after_the_widgets_are_imported():
    # the L2 widget cell imports kernels.viz before the roofline cell plots with pyplot
    nb = _cells("01_memory_hierarchy", ["setup", "copy_measure", "l2_widget", "roofline"])
    run = execute(nb, lesson="01_memory_hierarchy", copy="solution")
    assert not run.errors, run.errors
    roofline = run.nb.cells[-1]
    kinds = [o.get("output_type") for o in roofline.outputs]
    images = [o for o in roofline.outputs if "image/png" in o.get("data", {})]
    assert images, f"the roofline cell drew no image; its outputs: {kinds}"


def test_the_working_copy_survives_a_changed_course(tmp_path):
    course, work = tmp_path / "course", tmp_path / "my-work"
    course.mkdir()
    (course / "00_a.ipynb").write_text("lesson a, v1")
    (course / "01_b.ipynb").write_text("lesson b, v1")
    said = sync(work, course)
    assert len(said) == 2 and (work / "00_a.ipynb").read_text() == "lesson a, v1"
    (work / "00_a.ipynb").write_text("lesson a, v1 + my answers")
    # the course is regenerated: both lessons change, a new one appears
    (course / "00_a.ipynb").write_text("lesson a, v2")
    (course / "01_b.ipynb").write_text("lesson b, v2")
    (course / "02_c.ipynb").write_text("lesson c, v1")
    said = "\n".join(sync(work, course))
    assert (work / "00_a.ipynb").read_text() == "lesson a, v1 + my answers", "the learner's work was overwritten"
    assert (work / "updates" / "00_a.ipynb").read_text() == "lesson a, v2"
    assert "00_a.ipynb changed in the course" in said
    assert (work / "01_b.ipynb").read_text() == "lesson b, v2", "an untouched copy should follow the course"
    assert (work / "02_c.ipynb").read_text() == "lesson c, v1"
    assert sync(work, course) == [], "a second sync with nothing new should say nothing"
    (work / "00_a.ipynb").unlink()  # starting a lesson afresh
    sync(work, course)
    assert (work / "00_a.ipynb").read_text() == "lesson a, v2"


def test_the_working_copy_of_the_real_course_is_outside_git(tmp_path):
    assert WORK.parent == ROOT and WORK.name == "my-work"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(WORK / "00_setup.ipynb")], cwd=ROOT)
    assert ignored.returncode == 0, "my-work/ must be git-ignored"
    sync(tmp_path / "w")
    assert sorted(p.name for p in (tmp_path / "w").glob("*.ipynb")) == sorted(p.name for p in COURSE.glob("*.ipynb"))


def _make_lab(*args):
    return subprocess.run(["make", "-n", "-o", ".venv/.installed", "lab", *args], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout


def test_make_lab_allows_root_only_as_root_and_opens_the_working_copy():
    as_root, as_user = _make_lab("USER_ID=0"), _make_lab("USER_ID=1000")
    assert "--allow-root" in as_root and "--allow-root" not in as_user
    assert "--notebook-dir=my-work" in as_user and "grader.course.workcopy my-work" in as_user


@pytest.mark.slow
def test_make_lab_serves(tmp_path):
    port, token = _free_port(), secrets.token_hex(8)
    args = f"--IdentityProvider.token={token} --ServerApp.ip=127.0.0.1 --ServerApp.port_retries=0"
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(["make", "-o", ".venv/.installed", "lab", f"WORK={tmp_path / 'w'}", f"PORT={port}",
                             f"LAB_ARGS={args}"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.time() + 90
        while True:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/api/status",
                                             headers={"Authorization": f"token {token}"})
                with urllib.request.urlopen(req, timeout=5) as r:
                    assert r.status == 200
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise AssertionError((tmp_path / "lab.log").read_text()[-3000:]) from None
                time.sleep(0.5)
        assert (tmp_path / "w" / "00_setup.ipynb").exists()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _heading_points(lesson):
    """{exercise heading: (points it states, points of the graded cells under it)}."""
    import re

    out, current = {}, None
    for cell in solution_notebook(lesson).cells:
        meta = cell.metadata.get("nbgrader", {})
        for line in cell.source.splitlines() if cell.cell_type == "markdown" else []:
            if line.startswith("## Exercise"):
                stated = re.search(r"\(([^)]*points[^)]*)\)\s*$", line)
                nums = [int(n) for n in re.findall(r"\d+", stated.group(1))] if stated else []
                current = line
                out[current] = [sum(nums), 0]
        if cell.cell_type == "code" and meta.get("grade") and current:
            out[current][1] += int(meta.get("points", 0))
    return out


LESSONS_00_05 = [name for name in lesson_ids() if name[:2] in {"00", "01", "02", "03", "04", "05", "07"}]


@pytest.mark.parametrize("lesson", LESSONS_00_05)
def test_every_exercise_heading_states_its_points(lesson):
    for heading, (stated, graded) in _heading_points(lesson).items():
        assert stated == graded, f"{lesson}: {heading!r} states {stated} points, its graded cells give {graded}"


@pytest.mark.parametrize("lesson", LESSONS_00_05)
def test_every_lesson_ends_with_its_score(lesson):
    last = solution_notebook(lesson).cells[-1]
    assert last.cell_type == "code" and f'score_here("{lesson}", globals())' in last.source


def _run_cell(source, ns):
    """Run ``source`` as a notebook cell runs it, into the globals ``ns`` (its source kept, as IPython keeps it)."""
    import linecache

    filename = f"<cell {len(linecache.cache)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), ns)  # noqa: S102


def _notebook_function(source, name):
    """A function defined as a notebook cell defines it (in ``__main__``), where the checks expect answers."""
    ns = {"__name__": "__main__"}
    _run_cell(source, ns)
    return ns[name]


_sector_bytes = _notebook_function("""
def sector_bytes(n, stride, itemsize):
    if n <= 0:
        return 0
    step = stride * itemsize
    return 32 * n if step >= 32 else 32 * ((n - 1) * step // 32 + 1)
""", "sector_bytes")


def test_the_score_counts_points_per_exercise_and_reuses_checks_already_run(capsys):
    from kernels.checks import check
    from grader.score import score_here

    check("01_memory_hierarchy.sector_bytes", _sector_bytes)  # the notebook's own check cell, already run
    calls = []

    def counting(exercise, *objects, hidden=False):
        calls.append((exercise, hidden))
        return check(exercise, *objects, hidden=hidden)

    score = score_here("01_memory_hierarchy", {"check": counting, "sector_bytes": _sector_bytes})
    table = capsys.readouterr().out
    by_cell = {ln.cell: ln for ln in score.lines}
    assert by_cell["check_sectors"].passed and by_cell["check_sectors_hidden"].passed
    assert not by_cell["check_copy"].passed and "not defined yet" in by_cell["check_copy"].why
    assert ("01_memory_hierarchy.sector_bytes", False) not in calls, "a check already run was run again"
    assert ("01_memory_hierarchy.sector_bytes", True) in calls
    assert score.earned == 2 and "sector_bytes" in table and "total" in table
    if not score.on_gpu:  # the copy's speed needs a GPU, but a copy not written fails here already, and counts
        assert score.possible_here == score.total == 11 and "needs a GPU" not in table


def test_the_score_runs_a_check_again_when_what_its_answer_calls_was_redefined(capsys):
    """The same function object, passed to the same check, with a helper it calls from the notebook's globals
    redefined since (a later cell run again): its outcome then is not the outcome now."""
    from kernels.checks import check
    from grader.score import score_here

    ns = {"__name__": "__main__"}
    _run_cell("def _sectors(n, step):\n    return n if step >= 32 else (n - 1) * step // 32 + 1\n\n\n"
              "def sector_bytes(n, stride, itemsize):\n    if n <= 0:\n        return 0\n"
              "    return 32 * _sectors(n, stride * itemsize)\n", ns)
    check("01_memory_hierarchy.sector_bytes", ns["sector_bytes"])

    def sectors_line():
        return next(ln for ln in score_here("01_memory_hierarchy", ns, show=False).lines if ln.cell == "check_sectors")

    assert sectors_line().passed
    _run_cell("def _sectors(n, step):\n    return n\n", ns)
    line = sectors_line()
    assert not line.passed and "returned" in line.why, line


def test_the_score_reuses_a_check_while_what_its_answer_reads_is_the_same(capsys):
    """A function defined after a check ran, which the answer never names (a later exercise, the score cell's own
    import), leaves the outcome reusable: a kernel that never ends would otherwise cost the time limit again in
    the score cell. A helper the answer names but that was not defined when it was checked is a change."""
    from kernels.checks import check

    ns = {"__name__": "__main__"}
    _run_cell("def sector_bytes(n, stride, itemsize):\n    if n <= 0:\n        return 0\n"
              "    step = stride * itemsize\n"
              "    return 32 * n if step >= 32 else 32 * ((n - 1) * step // 32 + 1)\n", ns)
    check("01_memory_hierarchy.sector_bytes", ns["sector_bytes"])
    calls = []

    def counting(exercise, *objects, hidden=False):
        calls.append((exercise, hidden))
        return check(exercise, *objects, hidden=hidden)

    _run_cell("from grader.score import score_here\n\n\ndef column_kernel():\n    pass\n", ns)
    ns["check"] = counting
    line = next(ln for ln in ns["score_here"]("01_memory_hierarchy", ns, show=False).lines
                if ln.cell == "check_sectors")
    assert line.passed and ("01_memory_hierarchy.sector_bytes", False) not in calls, calls

    _run_cell("def sector_bytes(n, stride, itemsize):\n    return _helper(n, stride, itemsize)\n", ns)
    try:
        check("01_memory_hierarchy.sector_bytes", ns["sector_bytes"])
    except Exception:
        pass  # _helper is not defined yet
    _run_cell("def _helper(n, stride, itemsize):\n    step = stride * itemsize\n"
              "    return 0 if n <= 0 else 32 * n if step >= 32 else 32 * ((n - 1) * step // 32 + 1)\n", ns)
    calls.clear()
    line = next(ln for ln in ns["score_here"]("01_memory_hierarchy", ns, show=False).lines
                if ln.cell == "check_sectors")
    assert line.passed and ("01_memory_hierarchy.sector_bytes", False) in calls, calls


def test_the_score_defers_only_what_passed_here():
    """A check with a speed requirement that passed what the interpreter checks waits for a GPU; one that failed
    here would fail there too, and counts as failed, with its reason."""
    from grader.score import Line, Score

    score = Score("03_tiled_sram", "interpreter")
    score.lines = [Line("ex3-check", "tile_choice", 3, False, True, True)]
    if score.on_gpu:
        pytest.skip("on a GPU nothing is deferred")
    assert score.earned == score.possible_here == 0 and "- / 3    needs a GPU: passes" in score.table()
    score.lines = [Line("ex3-check", "tile_choice", 3, False, True, False, "BLOCK_M=4096 must be between 16 and 256")]
    table = score.table()
    assert score.earned == 0 and score.possible_here == 3 and "needs a GPU" not in table
    assert "0 / 3" in table and "BLOCK_M=4096" in table


def test_the_score_names_what_failed(capsys):
    from grader.score import score_here

    # the bytes asked for, not the sectors delivered
    wrong = _notebook_function("def sector_bytes(n, stride, itemsize):\n    return n * itemsize\n", "sector_bytes")
    score = score_here("01_memory_hierarchy", {"sector_bytes": wrong}, show=False)
    line = next(ln for ln in score.lines if ln.cell == "check_sectors")
    assert not line.passed and line.why.startswith("on 'a coalesced warp")
    assert "sector_bytes(n=32, stride=8, itemsize=4) returned 128, expected 1024: that is the bytes asked for" in line.why


def test_the_score_does_not_run_again_what_a_check_stopped_at_the_time_limit(capsys):
    """A kernel that never ends costs the interpreter's time limit once: each later check whose answer calls it
    (its hidden cases, an autograd Function launching it) is not run, and says why. What runs is shown as it runs
    (the table only comes at the end)."""
    from kernels.checks import CheckFailed
    from kernels.checks.engine import CASE_STOPPED
    from grader.score import score_here

    calls = []

    def stopping(exercise, *objects, hidden=False):
        calls.append((exercise, hidden))
        if exercise == "01_memory_hierarchy.sector_bytes":
            raise CheckFailed(f"01_memory_hierarchy.sector_bytes failed on case 'x': the case ran for more than 180 s "
                              f"{CASE_STOPPED}: a loop that never ends?")

    score = score_here("01_memory_hierarchy", {"check": stopping, "sector_bytes": _sector_bytes})
    shown = capsys.readouterr().out
    assert calls.count(("01_memory_hierarchy.sector_bytes", False)) == 1
    assert ("01_memory_hierarchy.sector_bytes", True) not in calls, "the stopped function was checked again"
    by_cell = {ln.cell: ln for ln in score.lines}
    assert "not run: sector_bytes was stopped" in by_cell["check_sectors_hidden"].why
    assert "checking 01_memory_hierarchy.sector_bytes ... failed" in shown
    assert shown.index("checking ") < shown.index("total")
    # a value passed beside a stopped kernel (a block size) does not stop a later check given the same value
    from grader.score import _cached_check

    guarded = _cached_check(stopping)
    with pytest.raises(CheckFailed, match="was stopped"):
        guarded("01_memory_hierarchy.sector_bytes", _sector_bytes, 64)
    guarded("01_memory_hierarchy.sector_bytes_value", 64)
    with pytest.raises(CheckFailed, match="not run: sector_bytes"):
        guarded("01_memory_hierarchy.other", _sector_bytes)


def test_the_score_does_not_run_again_what_the_exercises_own_check_cell_stopped(capsys):
    """The exercise's check cell, run before the score, was stopped at the time limit: the score reuses that
    outcome and does not run the hidden cases of the same function (the limit is paid once in all), until the
    function is defined again."""
    from kernels import checks
    from kernels.checks import CheckFailed
    from kernels.checks.engine import CASE_STOPPED
    from grader.score import score_here

    exercise = "01_memory_hierarchy.sector_bytes"
    message = f"{exercise} failed on case 'x': the case ran for more than 180 s {CASE_STOPPED}: a loop that never ends?"
    calls = []

    def stopping(exercise_id, *objects, hidden=False):
        calls.append((exercise_id, hidden))
        if exercise_id == exercise:
            raise CheckFailed(message)

    kept = dict(checks.history)
    try:
        checks.history[exercise, False] = ((_sector_bytes,), message, checks.reach((_sector_bytes,)))
        score = score_here("01_memory_hierarchy", {"check": stopping, "sector_bytes": _sector_bytes}, show=False)
        assert (exercise, False) not in calls and (exercise, True) not in calls, calls
        by_cell = {ln.cell: ln for ln in score.lines}
        assert "not run: sector_bytes was stopped" in by_cell["check_sectors_hidden"].why
        # defined again (another object): it is checked again
        again = _notebook_function("def sector_bytes(n, stride, itemsize):\n    return 0\n", "sector_bytes")
        score_here("01_memory_hierarchy", {"check": stopping, "sector_bytes": again}, show=False)
        assert calls == [(exercise, False)]
    finally:
        checks.history.clear()
        checks.history.update(kept)


def test_what_a_check_answer_calls_is_found_through_a_class():
    """The answer a check is passed reaches, through its code, the kernels it launches: a function calling a class
    whose static backward launches one (the autograd exercise), not the notebook's other functions."""
    from grader.score import _called

    ns = {"__name__": "__main__"}
    _run_cell("def dq_kernel():\n    pass\n\n\ndef dkdv_kernel():\n    pass\n\n\n"
              "class Fn:\n    @staticmethod\n    def backward(ctx):\n        return [dq_kernel() for _ in range(2)]\n\n\n"
              "def answer(x):\n    return Fn.backward(x)\n", ns)
    reached = _called([ns["answer"]])
    assert id(ns["dq_kernel"]) in reached and id(ns["Fn"]) in reached
    assert id(ns["dkdv_kernel"]) not in reached


def test_a_hidden_cases_advice_reaches_the_score_table():
    """A hidden case is seen only in the score: its advice (``(this case ...)``) is kept beside the problem, the
    reason is cut at a word, and a long one is wrapped under its row."""
    from grader.score import Line, Score, _first_line

    message = ("07_backward.dq failed on case 'B=1 T=1930 fp16, a state S of 2048 adding chunks of 0.8':\n"
               "  - dq: relative error 2.6e-02 > 1.0e-02\n"
               "  - (this case carries a large state: keep the carried state in fp32)")
    why = _first_line(message)
    assert why.startswith("on 'B=1 T=1930") and "keep the carried state in fp32" in why
    long = _first_line("failed on case 'x':\n  - " + "word " * 200)
    assert long.endswith(" …") and len(long) <= 600 and "wor …" not in long
    score = Score("07_backward", "interpreter")
    score.lines = [Line("ex2-hidden", "dq", 2, True, False, False, why)]
    rows = score.table().splitlines()
    assert rows[1].startswith("  dq") and rows[1].rstrip().endswith("(2 hidden)")
    assert all(r.startswith("      ") for r in rows[2:-1]) and "fp32" in " ".join(rows[2:-1])


@pytest.mark.slow
def test_make_score_runs_the_saved_notebook(tmp_path):
    from grader.course import student_notebook
    from grader.score import main

    # the learner's saved copy: exercise 1 answered, exercise 2 still the stub
    work = tmp_path / "my-work"
    work.mkdir()
    mine = student_notebook("00_setup")
    answer = next(c for c in solution_notebook("00_setup").cells if c.get("id") == "add_kernel")
    next(c for c in mine.cells if c.get("id") == "add_kernel").source = "\n".join(
        ln for ln in answer.source.splitlines() if ln.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
    nbformat.write(mine, work / "00_setup.ipynb")
    out = subprocess.run([sys.executable, "-m", "grader.score", "00", "--work", str(work)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = {ln.split()[0]: ln for ln in out.stdout.splitlines()
             if ln.startswith("  ") and not ln.startswith("      ")}  # rows, not a reason wrapped under one
    assert "4 / 4" in lines["vector_add"] and "0 / 4" in lines["add_bias"], out.stdout
    assert "4 / 8" in lines["total"], out.stdout
    assert main(["99"]) == 2


@pytest.mark.parametrize("lesson,cell,name,value,said", [
    ("03_tiled_sram", "ex3-budget", "TILES", (128, 128, 64, 8, 8, 3), "TILES must be a dict"),
    ("03_tiled_sram", "ex3-budget", "TILES", {"block_m": 64}, "unknown ['block_m']"),
    ("06_profile_compile_autotune", "ex4-compile", "SPACE",
     [dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, num_warps=3, num_stages=3)] * 4, "num_warps=3"),
    ("06_profile_compile_autotune", "ex4-compile", "SPACE", [(64, 64)], "SPACE must be a list of dicts"),
])
def test_a_locked_cell_after_a_value_answer_names_what_its_check_refuses(lesson, cell, name, value, said, capsys):
    """The cells that show a value answer's budget or compile (lesson 03's TILES, 06's SPACE) print what the
    check will say of a value it refuses, instead of a TypeError or a compile error from inside them."""
    source = next(c.source for c in solution_notebook(lesson).cells if c.get("id") == cell)
    _run_cell(source, {"__name__": "__main__", name: value})
    assert said in capsys.readouterr().out
