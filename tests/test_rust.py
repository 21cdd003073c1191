"""The Rust launcher crate: it builds offline, its own tests pass, and its CLI fails clearly without a GPU."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

# one pytest-xdist worker runs this module: its module-scoped fixtures (the release build of the CLI) are built once
pytestmark = pytest.mark.xdist_group("test_rust")

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRATE = ROOT / "rust"
BIN = CRATE / "target" / "release" / "workbook-launch"
FIXTURES = CRATE / "tests" / "fixtures"
CARGO = shutil.which("cargo") or (str(pathlib.Path.home() / ".cargo/bin/cargo")
                                  if (pathlib.Path.home() / ".cargo/bin/cargo").is_file() else None)


def _cargo(*args):
    return subprocess.run([CARGO, *args, "--offline"], cwd=CRATE, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def binary():
    """A release build of the CLI (built here when cargo is present, else the one already there)."""
    if CARGO:
        proc = _cargo("build", "--release")
        assert proc.returncode == 0, proc.stderr[-3000:]
    if not BIN.is_file():
        pytest.skip("cargo is not installed and no prebuilt rust/target/release/workbook-launch exists")
    return str(BIN)


def _run(binary, *args, env=None):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.mark.skipif(CARGO is None, reason="cargo is not installed (the crate needs cargo 1.7x or newer)")
def test_cargo_build_and_test_offline():
    proc = _cargo("build")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warning" not in proc.stderr, proc.stderr[-3000:]
    proc = _cargo("test")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    assert "test result: FAILED" not in proc.stdout


def test_fixtures_match_the_exporter(tmp_path):
    """The crate's test manifests are real exports: they must not drift from what the exporter writes now."""
    from kernels.export.cli import export_many

    fresh = export_many([{"kernel": k, "out_dir": tmp_path} for k in ("vector_add", "linear_attention")])
    for m in fresh:
        assert isinstance(m, dict), m
        old = json.loads((FIXTURES / f"{m['kernel']}.json").read_text())
        for key in ("format", "format_version", "entry", "params", "sizes", "grid", "requires", "constexprs",
                    "threads_per_block", "scratch", "dtype"):
            assert old[key] == m[key], f"{m['kernel']}: {key} differs; re-export into rust/tests/fixtures"


def test_cli_error_paths_without_a_gpu(binary, tmp_path):
    manifest = str(FIXTURES / "vector_add.json")
    x = tmp_path / "x.bin"
    x.write_bytes(bytes(4000))
    short = tmp_path / "short.bin"
    short.write_bytes(bytes(3996))
    base = ["run", "--manifest", manifest, "--size", "n_elements=1000"]
    nolib = {"WORKBOOK_LIBCUDA": str(tmp_path / "libcuda.so.1")}

    p = _run(binary, *base, "--in", f"x_ptr={x}", "--in", f"y_ptr={x}", env=nolib)
    assert p.returncode == 4 and "cannot load" in p.stderr and "NVIDIA driver" in p.stderr, p.stderr
    p = _run(binary, *base, "--in", f"x_ptr={x}", "--in", f"y_ptr={short}", env=nolib)
    assert p.returncode == 2 and "holds 3996 bytes" in p.stderr and "4000 bytes" in p.stderr, p.stderr
    p = _run(binary, *base, "--in", f"x_ptr={x}", env=nolib)
    assert p.returncode == 2 and "needs --in y_ptr=FILE" in p.stderr, p.stderr
    p = _run(binary, *base, "--expect-triton", "3.9.0", env=nolib)
    assert p.returncode == 3 and "exported by Triton 3.6.0" in p.stderr, p.stderr
    p = _run(binary, "run", "--manifest", str(tmp_path / "none.json"), env=nolib)
    assert p.returncode == 2 and "cannot read the manifest" in p.stderr, p.stderr
    p = _run(binary, *base, "--in", f"x_ptr={tmp_path / 'none.bin'}", env=nolib)
    assert p.returncode == 2 and "cannot read" in p.stderr, p.stderr
    p = _run(binary, "run", "--manifest", manifest, "--size", "n_elements=0", env=nolib)
    assert p.returncode == 2 and "requirement" in p.stderr, p.stderr
    bad = json.loads((FIXTURES / "vector_add.json").read_text())
    bad["params"] = bad["params"][:2]
    (tmp_path / "bad.json").write_text(json.dumps({**bad, "grid": ["cdiv(n, BLOCK_SIZE)", "1", "1"]}))
    p = _run(binary, "info", "--manifest", str(tmp_path / "bad.json"))
    assert p.returncode == 3 and "uses \"n\"" in p.stderr, p.stderr
    p = _run(binary, "info", "--manifest", manifest)
    assert p.returncode == 0 and "n_elements" in p.stdout and "global_scratch" in p.stdout
    p = _run(binary, "frobnicate")
    assert p.returncode == 2 and "unknown command" in p.stderr


# --- on a GPU ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def exported_vector_add(tmp_path_factory):
    from kernels.export import export

    out = tmp_path_factory.mktemp("rust-export")
    export("vector_add", out)
    return out / "vector_add.json"


@pytest.mark.gpu
@pytest.mark.parametrize("image", ["ptx", "cubin"])
def test_rust_cli_vector_add_on_gpu(binary, exported_vector_add, tmp_path, image):
    from kernels.testing import assert_close, randn

    n = 100_003
    x, y = randn(n, seed=11, device="cpu"), randn(n, seed=12, device="cpu")
    (tmp_path / "x.bin").write_bytes(x.numpy().tobytes())
    (tmp_path / "y.bin").write_bytes(y.numpy().tobytes())
    p = _run(binary, "run", "--manifest", str(exported_vector_add), "--image", image, "--size", f"n_elements={n}",
             "--in", f"x_ptr={tmp_path / 'x.bin'}", "--in", f"y_ptr={tmp_path / 'y.bin'}",
             "--out", f"out_ptr={tmp_path / 'o.bin'}")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["grid"] == [-(-n // 1024), 1, 1]
    out = torch.frombuffer(bytearray((tmp_path / "o.bin").read_bytes()), dtype=torch.float32)
    assert_close("rust vector_add", x.double() + y.double(), out, 1e-6)


@pytest.mark.gpu
def test_rust_cli_broken_grid_leaves_nan(binary, exported_vector_add, tmp_path):
    """A broken twin: one program for 5000 elements writes only the first 1024; the rest stay 0xFF (NaN)."""
    n = 5000
    (tmp_path / "x.bin").write_bytes(bytes(4 * n))
    p = _run(binary, "run", "--manifest", str(exported_vector_add), "--size", f"n_elements={n}", "--grid", "1",
             "--in", f"x_ptr={tmp_path / 'x.bin'}", "--in", f"y_ptr={tmp_path / 'x.bin'}",
             "--out", f"out_ptr={tmp_path / 'o.bin'}")
    assert p.returncode == 0, p.stderr
    out = torch.frombuffer(bytearray((tmp_path / "o.bin").read_bytes()), dtype=torch.float32)
    assert (out[:1024] == 0).all() and torch.isnan(out[1024:]).all()


def _rust_cell() -> str:
    """The Rust of lesson 05's exercise cell, with its solution markers."""
    from grader.course import solution_notebook

    cell = next(c for c in solution_notebook("05_ptx_export_rust").cells if c.get("id") == "ex3-rust")
    return re.search(r'r"""\n(.*)"""', cell.source, re.S).group(1)


def _lesson_rust():
    """Lesson 05's Rust exercise: the solution's source, and the student's (the body replaced by the stub)."""
    source = _rust_cell()
    solution = re.sub(r"### (BEGIN|END) SOLUTION\n", "", source)
    stub = re.sub(r"### BEGIN SOLUTION\n.*### END SOLUTION\n", "# YOUR CODE HERE\nraise NotImplementedError()\n",
                  source, flags=re.S)
    return solution, stub


def _left_comment() -> str:
    """The solution with the Python comment placeholder left above the learner's Rust (a Python habit)."""
    source = _rust_cell().replace("### BEGIN SOLUTION\n", "# YOUR CODE HERE\n")
    return re.sub(r"### END SOLUTION\n", "", source)


@pytest.mark.slow
@pytest.mark.skipif(CARGO is None, reason="cargo is not installed (the crate needs cargo 1.7x or newer)")
def test_lesson_rust_exercise_passes_the_solution_and_fails_the_stub_and_a_missing_limit(tmp_path):
    from kernels.export.rust_exercise import build_and_test, grade

    solution, stub = _lesson_rust()
    good = build_and_test(solution, tmp_path / "good")
    assert good.passed and len(good.tests) == 10 and all(good.tests.values()), good.message
    bad = build_and_test(stub, tmp_path / "stub")
    assert bad.passed is False and "`# YOUR CODE HERE` and `raise NotImplementedError()` must go" in bad.message
    comment = build_and_test(_left_comment(), tmp_path / "comment")
    assert comment.passed is False and "the placeholder line `# YOUR CODE HERE` must go" in comment.message
    assert "`//` does" in comment.message
    no_limit = build_and_test(solution.replace("if v < 1 || v > limits[axis]", "if v < 1"), tmp_path / "limit")
    assert no_limit.passed is False and no_limit.tests["a_grid_past_cudas_limits_is_refused"] is False
    assert "a_grid_past_cudas_limits_is_refused" in no_limit.message and "must be refused" in no_limit.message
    assert grade(solution, 7, tmp_path / "graded") == (True, grade(solution, 8, tmp_path / "graded")[1])
    assert grade(stub, 7, tmp_path / "graded-stub")[0] is False


@pytest.mark.skipif(CARGO is None, reason="cargo is not installed (the crate needs cargo 1.7x or newer)")
def test_the_graded_cases_catch_what_the_crates_tests_let_through(tmp_path):
    """A launch_grid that passes every test of the crate but answers one graded case wrong still fails: the
    grader compares each graded case with its own reading of the manifests."""
    from kernels.export.rust_exercise import draw_cases, expected, grade

    solution, _ = _lesson_rust()
    cases = draw_cases(3)
    assert len(cases) > 20 and any(expected(*c) is None for c in cases) and any(expected(*c) for c in cases)
    assert expected("X|Y|Z", [("X", 2**31 - 1), ("Y", 65535), ("Z", 65535)]) == (2**31 - 1, 65535, 65535)
    assert expected("X|Y|Z", [("X", 2**32 + 1), ("Y", 1), ("Z", 1)]) is None
    assert expected("vector_add.json", [("n_elements", 0)]) is None
    assert expected("vector_add.json", [("n_elements", 5), ("N", 5)]) is None  # a size the manifest does not list
    assert expected("linear_attention.json", [("B", 2), ("T", 5), ("H", 3), ("K", 16), ("V", 130)]) == (3, 6, 1)
    # right on every size the crate's tests use, wrong on a V that only a graded case draws
    sly = solution.replace("    Ok(grid)", "    if sizes.iter().any(|(k, v)| k == \"V\" && *v == 321) {\n"
                           "        grid[0] += 1;\n    }\n    Ok(grid)")
    sly_cases = [("linear_attention.json", [("B", 1), ("T", 3), ("H", 1), ("K", 16), ("V", 321)])]
    from kernels.export import rust_exercise

    real = rust_exercise.draw_cases
    try:
        rust_exercise.draw_cases = lambda seed: sly_cases
        passed, message = grade(sly, 1, tmp_path / "sly")
    finally:
        rust_exercise.draw_cases = real
    assert passed is False and "V=321" in message and "expected grid [6, 1, 1]" in message, message


def test_lesson_rust_exercise_refuses_the_launchers_own_answer():
    from kernels.export.rust_exercise import forbidden

    solution, _ = _lesson_rust()
    assert forbidden(solution) is None
    assert "resolve" in forbidden("fn launch_grid(m: &Manifest) { m.resolve(s) }")
    assert "std::process" in forbidden("use std::process::exit;")
    assert forbidden("let env = 1; // process each axis") is None
    # the try-it cell's build refuses it too, before cargo runs: resolve passes most of the crate's tests
    from kernels.export.rust_exercise import build_and_test

    early = build_and_test("pub fn launch_grid(m: &Manifest) { m.resolve(s) }", "/nonexistent/never-written")
    assert early.passed is False and not early.tests and "Manifest::resolve" in early.message


def test_a_python_comment_in_the_rust_is_named_when_the_build_fails():
    from kernels.export.rust_exercise import _build_error

    src = "pub fn launch_grid() {\n    # my attempt\n    #[allow(unused)]\n    let x = 1;\n}\n"
    said = _build_error("error: expected one of `!` or `[`, found `my`\n", src)
    assert said.startswith("your Rust does not build:") and "your line `# my attempt`" in said, said
    assert "your line" not in _build_error("error: x\n", src.replace("# my attempt", "// my attempt"))


def test_lesson_rust_exercise_says_how_to_get_cargo(monkeypatch, tmp_path):
    from kernels.export import rust_exercise

    monkeypatch.setattr(rust_exercise, "cargo", lambda: None)
    got = rust_exercise.build_and_test("pub fn f() {}", tmp_path)
    assert got.passed is None and "rustup" in got.message and not (tmp_path / "Cargo.toml").exists()
    assert rust_exercise.grade("pub fn launch_grid() {}", 1, tmp_path)[0] is None
    assert rust_exercise.build_launcher("pub fn launch_grid() {}", tmp_path)[0] is None


def test_without_cargo_the_graded_cell_is_skipped_and_the_score_says_needs_cargo(tmp_path, capsys):
    """PATH without cargo (and no rustup home): the check prints how to get it and does not raise; the lesson's
    score lists the exercise as needing cargo, neither passed nor failed."""
    code = textwrap.dedent("""
        import pathlib, sys
        from kernels.checks import check
        from kernels.export import rust_exercise
        from grader.score import Line, Score, _missing_tool
        assert rust_exercise.cargo() is None
        check("05_ptx_export_rust.launch_grid", "pub fn launch_grid() {}")
        tool = _missing_tool("05_ptx_export_rust.launch_grid")
        s = Score("05_ptx_export_rust", "interpreter", [Line("ex3-rust-grade", "launch_grid", 3, False, False, True,
                                                             "", tool)])
        print(s.table())
        assert tool == "cargo" and s.earned == 0 and s.possible_here == 0 and s.total == 3
    """)
    env = {**os.environ, "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "not graded here: needs cargo" in proc.stdout and "rustup" in proc.stdout
    assert "needs cargo: not installed here" in proc.stdout and "3 more need cargo" in proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(CARGO is None, reason="cargo is not installed (the crate needs cargo 1.7x or newer)")
def test_the_learners_launcher_takes_its_grid_from_launch_grid(tmp_path):
    """yours-launch is the crate's command line with the grid from the learner's function: a launch it refuses
    stops with its message before the driver is opened; one it accepts reaches the driver (missing here)."""
    from kernels.export.rust_exercise import build_launcher

    solution, stub = _lesson_rust()
    assert build_launcher(stub, tmp_path / "stub")[0] is None
    launcher, how = build_launcher(solution, tmp_path / "yours")
    assert launcher is not None and launcher.is_file(), how
    manifest = str(FIXTURES / "vector_add.json")
    info = subprocess.run([str(launcher), "info", "--manifest", manifest], capture_output=True, text=True, timeout=60)
    assert info.returncode == 0 and "cdiv(n_elements, BLOCK_SIZE)" in info.stdout
    env = {**os.environ, "WORKBOOK_LIBCUDA": "/nonexistent/libcuda.so.1"}
    zero = subprocess.run([str(launcher), "bench", "--manifest", manifest, "--size", "n_elements=0"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert zero.returncode == 2 and "your launch_grid refused the launch" in zero.stderr, zero.stderr
    fine = subprocess.run([str(launcher), "bench", "--manifest", manifest, "--size", "n_elements=5000"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert fine.returncode == 4 and "launch_grid" not in fine.stderr, fine.stderr


@pytest.mark.gpu
def test_the_solutions_launcher_runs_the_exported_kernels_like_torch(tmp_path):
    """On a GPU: the launcher built from the lesson's launch_grid (``python -m grader.rust_launcher`` on a
    machine with cargo, carried in rust/target/release/) launches the exported kernels; their outputs match the
    float64 torch references and Triton's own launches."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    from grader.rust_launcher import solution_source
    from kernels.export import rust_exercise
    from kernels.export.roundtrip import run

    launcher = CRATE / "target" / "release" / rust_exercise.LAUNCHER
    if CARGO:
        rust_exercise.install_launcher(solution_source(), launcher)
    if not launcher.is_file():
        pytest.skip("no rust/target/release/yours-launch (build it with python -m grader.rust_launcher)")
    result = run(rust=str(launcher), out=tmp_path, quick=True, launches=200, repeat=3)
    rust_rows = [r for r in result["cases"] if r["launcher"] == "rust"]
    assert rust_rows and all(r.get("ok") for r in rust_rows), rust_rows


@pytest.mark.skipif(CARGO is None, reason="cargo is not installed (the crate needs cargo 1.7x or newer)")
def test_a_launch_grid_that_never_returns_or_panics_is_named(tmp_path, monkeypatch):
    """A launch_grid that loops forever is stopped (the test binary with cargo: nothing is left running) with a
    message saying so; one that panics on bad input is told to return Err."""
    import os

    from kernels.export import rust_exercise

    solution, _ = _lesson_rust()
    monkeypatch.setattr(rust_exercise, "RUN_SECONDS", 5)
    body = "pub fn launch_grid(manifest: &Manifest, sizes: &[(String, i64)]) -> Result<[u32; 3], String> {\n"
    assert body in solution
    spin = solution.replace(body, body + "    if sizes.len() < 1000 { loop { std::hint::spin_loop(); } }\n")
    out = rust_exercise.build_and_test(spin, tmp_path / "spin")
    assert out.passed is False and "did not finish within 5 s" in out.message, out.message
    left = []
    for proc in pathlib.Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.readlink(proc / "cwd") == str(tmp_path / "spin"):
                left.append(proc.name)
        except OSError:
            pass
    assert not left, f"test processes left running: {left}"
    panics = solution.replace(".ok_or(format!(\"missing size {name}\"))?", ".expect(\"missing size\")")
    assert panics != solution
    out = rust_exercise.build_and_test(panics, tmp_path / "panics")
    assert out.passed is False and "your code panicked at src/lib.rs" in out.message, out.message
