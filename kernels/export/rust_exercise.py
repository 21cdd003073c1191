"""Lesson 05's Rust exercise: the learner's ``launch_grid`` built into a crate of its own, tested by the crate's
tests against the launcher's own ``Manifest::resolve``, graded on cases drawn fresh, and built into a launcher
that runs the exported kernel on a GPU.

:func:`build_and_test` writes ``<out>/Cargo.toml`` (a path dependency on ``rust/``, so it builds offline),
``<out>/src/lib.rs`` (the learner's source), ``<out>/src/main.rs`` (the launcher: ``workbook-launch`` with the
grid from the learner's function) and ``<out>/tests/grid.rs`` (``rust/exercise/grid.rs``), then runs ``cargo test
--offline`` with the fixtures of ``rust/tests/fixtures``. Given ``cases`` (:func:`draw_cases`), the crate's
``graded_cases`` test writes what the learner's function returned for each, and :func:`grade` compares that with
:func:`expected`, computed here from the manifests: passing the tests is not enough, the grid must be right on
cases the tests never saw. :func:`build_launcher` builds the release launcher. Without ``cargo`` each says how to
get it (:data:`GET_CARGO`) and runs nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field

import kernels

__all__ = ["RustResult", "build_and_test", "build_launcher", "cargo", "draw_cases", "expected", "forbidden", "grade",
           "install_launcher", "GET_CARGO", "LAUNCHER"]

#: The workbook's Rust crate (``workbook-launch``): ``$WORKBOOK_RUST_CRATE``, else the ``rust/`` that sits beside the
#: folder this package is imported from (a checkout of the workbook).
CRATE = pathlib.Path(os.environ.get("WORKBOOK_RUST_CRATE")
                     or pathlib.Path(kernels.__file__).resolve().parent.parent / "rust")
FIXTURES = CRATE / "tests" / "fixtures"
#: The learner's launcher, as :func:`build_launcher` names it.
LAUNCHER = "yours-launch"
GET_CARGO = ("needs cargo: cargo is not installed here, so your Rust cannot be built. Get Rust with rustup "
             "(https://rustup.rs: `curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh`, then open a new "
             "shell, or restart JupyterLab from one), or your system's package (`apt-get install cargo`); then run "
             "this cell again")
GRID_LIMITS = (2**31 - 1, 65535, 65535)
#: What ``launch_grid`` may not name: the launcher's own answer (``Manifest::resolve``, and the CLI that calls it),
#: and ways out of the function (processes, files, the environment, foreign code).
FORBIDDEN = {
    r"\bresolve\b": "the launcher's own `Manifest::resolve` (it is the answer the tests compare with)",
    r"\b(cli|prepare|main_with|Plan|HostJob)\b": "the launcher's command line and its resolved plan",
    r"\bprocess\s*::|std\s*::\s*\{[^}]*\bprocess\b|\bCommand\b": "other processes (std::process)",
    r"\bfs\b|\bFile\b": "files (std::fs)",
    r"std\s*::\s*(\{[^}]*)?\benv\b|\benv!|\benv\s*::|\bvar_os\b": "the environment (std::env)",
    r"\b(unsafe|extern)\b": "unsafe code and foreign functions",
    r"\b(include|include_str|include_bytes|asm|global_asm)!|#\s*!?\s*\[\s*path": "other files' code, or assembly",
}


@dataclass
class RustResult:
    """What ``cargo test`` said: ``passed`` is None when cargo is missing (nothing was run); ``report``: one line
    per graded case (``ok X Y Z``, ``err``, ``panic``), when cases were given."""

    passed: bool | None
    tests: dict[str, bool]
    message: str
    report: list[str] | None = field(default=None)


def cargo() -> str | None:
    """The ``cargo`` to use: on PATH, else rustup's default place."""
    home = pathlib.Path.home() / ".cargo" / "bin" / "cargo"
    return shutil.which("cargo") or (str(home) if home.is_file() else None)


def _manifest() -> str:
    dep = CRATE.as_posix()
    return (f'[package]\nname = "yours"\nversion = "0.1.0"\nedition = "2021"\npublish = false\n\n'
            f'[[bin]]\nname = "{LAUNCHER}"\npath = "src/main.rs"\n\n'
            f'[dependencies]\nworkbook-launch = {{ path = "{dep}" }}\n')


#: The learner's launcher: ``workbook-launch``'s command line, with the grid of a ``run`` or ``bench`` computed by
#: the learner's ``launch_grid`` (passed on as ``--grid``), and refused with its message when it returns ``Err``.
_MAIN = r'''//! workbook-launch with the grid from your `launch_grid` (lesson 05, exercise 3).
fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| argv.windows(2).filter(|w| w[0] == flag).map(|w| w[1].clone()).collect::<Vec<_>>();
    let mut args = argv.clone();
    let launches = matches!(argv.first().map(String::as_str), Some("run") | Some("bench"));
    if let Some(path) = value("--manifest").first().filter(|_| launches) {
        let manifest = match workbook_launch::Manifest::load(path, None) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(workbook_launch::cli::exit_code(&e));
            }
        };
        let sizes: Vec<(String, i64)> = value("--size")
            .iter()
            .filter_map(|kv| kv.split_once('=').and_then(|(k, v)| Some((k.to_string(), v.parse().ok()?))))
            .collect();
        match yours::launch_grid(&manifest, &sizes) {
            Ok(g) => args.extend(["--grid".to_string(), format!("{},{},{}", g[0], g[1], g[2])]),
            Err(e) => {
                eprintln!("error: your launch_grid refused the launch: {e}");
                std::process::exit(2);
            }
        }
    }
    match workbook_launch::cli::main_with(&args) {
        Ok(text) => println!("{text}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(workbook_launch::cli::exit_code(&e));
        }
    }
}
'''


def forbidden(source: str) -> str | None:
    """Why ``source`` may not be graded (it names the launcher's own answer, or reaches outside the function), or
    None. Comments and string literals are read too: keep them free of these words."""
    for pattern, what in FORBIDDEN.items():
        found = re.search(pattern, source)
        if found:
            return f"your Rust names `{found.group(0)}`: launch_grid may not use {what}; compute the grid yourself"
    return None


def _write(source: str, out: pathlib.Path) -> None:
    source = re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", "", source, flags=re.M)  # the lesson's own answer
    (out / "src").mkdir(parents=True, exist_ok=True)
    (out / "tests").mkdir(exist_ok=True)
    (out / "Cargo.toml").write_text(_manifest())
    (out / "src" / "lib.rs").write_text(source)
    (out / "src" / "main.rs").write_text(_MAIN)
    shutil.copyfile(CRATE / "exercise" / "grid.rs", out / "tests" / "grid.rs")


def _target_dir(target: str | os.PathLike | None) -> str:
    """Builds share ``rust/target/exercise`` (the workbook's crate is compiled once) where it can be written; in a
    read-only checkout (the grader's sandbox) a folder of the temporary directory."""
    if target is not None:
        return str(target)
    shared = CRATE / "target" / "exercise"
    try:
        shared.mkdir(parents=True, exist_ok=True)
        if os.access(shared, os.W_OK):
            return str(shared)
    except OSError:
        pass
    return str(pathlib.Path(tempfile.gettempdir()) / "workbook-rust-target")


@contextlib.contextmanager
def _locked(target: str):
    """One cargo run at a time in a shared target folder: every learner crate has the same name, so two at once
    (two notebooks, two test workers) could build and run each other's code."""
    pathlib.Path(target).mkdir(parents=True, exist_ok=True)
    with open(pathlib.Path(target) / ".workbook-lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _env(target: str, **extra: str) -> dict:
    env = dict(os.environ, WORKBOOK_FIXTURES=str(FIXTURES), RUST_BACKTRACE="0", CARGO_TARGET_DIR=target,
               CARGO_TERM_COLOR="never", **extra)
    if not os.access(env.get("CARGO_HOME") or pathlib.Path.home() / ".cargo", os.W_OK):
        env["CARGO_HOME"] = str(pathlib.Path(tempfile.gettempdir()) / "workbook-cargo-home")
    return env


def _build_error(stderr: str, source: str) -> str:
    placeholders = [p for p in ("# YOUR CODE HERE", "raise NotImplementedError()") if p in source]
    if placeholders:  # Python's placeholders are not Rust: each one left is a syntax error there
        return ("your Rust does not build: the placeholder line" + ("s " if len(placeholders) > 1 else " ")
                + " and ".join(f"`{p}`" for p in placeholders) + " must go, replaced by the body of launch_grid "
                "(`#` does not start a comment in Rust: `//` does)")
    errors = [b for b in re.split(r"\n(?=error)", stderr)
              if b.startswith("error") and not b.startswith("error: could not compile")]
    # a linker's command line runs to thousands of characters: keep its ends, and every other line
    short = ["\n".join(ln if len(ln) <= 400 else f"{ln[:160]} ... {ln[-160:]}" for ln in b.splitlines())
             for b in errors[:2]]
    hashed = next((ln.strip() for ln in source.splitlines() if re.match(r"\s*#(?![\[!])", ln)
                   and not re.match(r"\s*### (BEGIN|END) SOLUTION", ln)), None)
    hint = (f"\n(`#` does not start a comment in Rust: `//` does; your line `{hashed[:80]}`)" if hashed else "")
    return "your Rust does not build:\n" + ("\n".join(short) or stderr[-3000:])[:4000] + hint


def build_and_test(source: str, out: pathlib.Path | str, *, timeout: float = 600, cases: list | None = None,
                   target: str | os.PathLike | None = None) -> RustResult:
    """Write the learner's crate to ``out`` and run its tests (and, given ``cases``, the graded cases); returns
    what passed and cargo's own words. A source the grade would refuse (:func:`forbidden`) is refused here first:
    the launcher's own ``resolve`` passes most of the tests it is compared with."""
    why = forbidden(source)
    if why:
        return RustResult(False, {}, why)
    exe = cargo()
    if exe is None:
        return RustResult(None, {}, GET_CARGO)
    out = pathlib.Path(out)
    extra = {}
    report = out / "graded-report.txt"
    if cases is not None:
        extra = {"WORKBOOK_GRID_CASES": str(out / "graded-cases.txt"), "WORKBOOK_GRID_REPORT": str(report)}
    tdir = _target_dir(target)
    # written under the lock too: a source older than the last build in the folder would count as built
    with _locked(tdir):
        _write(source, out)
        report.unlink(missing_ok=True)
        if cases is not None:
            (out / "graded-cases.txt").write_text("".join(f"{m}\t{','.join(f'{k}={v}' for k, v in s)}\n"
                                                          for m, s in cases))
        cmd = [exe, "test", "--offline", "--test", "grid"]
        built = _run_group(cmd + ["--no-run"], out, _env(tdir, **extra), timeout)
        if built is None:
            return RustResult(False, {}, f"cargo could not build the crate within {timeout:.0f} s")
        if built.returncode != 0:
            return RustResult(False, {}, _build_error(built.stderr, source))
        proc = _run_group(cmd, out, _env(tdir, **extra), min(timeout, RUN_SECONDS))
        if proc is None:
            return RustResult(False, {}, f"the tests did not finish within {min(timeout, RUN_SECONDS):.0f} s and "
                                         "were stopped: does launch_grid return on every path? (a loop that "
                                         "never ends)")
    text = proc.stdout + proc.stderr
    tests = {m.group(1): m.group(2) == "ok" for m in re.finditer(r"^test (\w+) \.\.\. (ok|FAILED)$", text, re.M)}
    lines = report.read_text().splitlines() if report.is_file() else None
    if proc.returncode == 0:
        return RustResult(True, tests, f"cargo test: {len(tests)} tests passed", lines)
    if not tests:  # built (checked above), yet no test reported: the test binary died before it could
        return RustResult(False, {}, "the tests stopped before reporting any result (the test binary died: a stack "
                                     "overflow, an abort?); what they printed:\n" + text.strip()[-3000:])
    failed = [name for name, ok in tests.items() if not ok]
    detail = re.findall(r"---- (\w+) stdout ----\n(.*?)(?=\n\n|\Z)", proc.stdout, re.S)
    return RustResult(False, tests, f"cargo test: {', '.join(failed)} failed\n"
                      + "\n".join(f"{n}: {_panic_text(d)}" for n, d in detail), lines)


#: Seconds the built tests may run: they take well under one; a ``launch_grid`` that never returns is stopped.
RUN_SECONDS = 60


def _run_group(cmd: list[str], cwd, env: dict, timeout: float):
    """``cmd`` in a process group of its own, killed whole (the test binary too, which cargo does not stop) after
    ``timeout`` seconds: its completed process, or None when it ran out of time."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        return None
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _panic_text(detail: str) -> str:
    """The panic message of a failed test, without the thread line and the backtrace note; a panic inside the
    learner's own code (``src/lib.rs``) is said to be one, since ``launch_grid`` must return ``Err`` instead."""
    where = re.search(r"panicked at (src/lib\.rs:\d+)", detail)
    text = re.sub(r"^thread '.*?'.*? panicked at .*?:\n", "", detail.strip(), flags=re.M)
    text = re.sub(r"\nnote: run with `RUST_BACKTRACE=1`.*", "", text)
    text = text.strip()[-800:]
    if where:
        return (f"your code panicked at {where.group(1)} ({text}): return Err(...) with the reason instead of "
                "panicking (no unwrap or panic! on input the caller controls)")
    return text


# ---- the grader's cases ----------------------------------------------------------------------------------------

def _fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def draw_cases(seed: int) -> list[tuple[str, list[tuple[str, int]]]]:
    """Cases the crate's tests never saw, from ``seed``: the lesson's kernels at random sizes (ragged ones
    included), grids at and past CUDA's limits on each axis, past ``u32``, zero and negative, a missing size, an
    unknown one and a failing expression. Each is ``(manifest, [(size, value), ...])`` as ``graded_cases`` reads
    them."""
    rng = random.Random(seed)
    out = []
    for _ in range(6):
        b, t, h = rng.randint(1, 16), rng.randint(1, 5000), rng.randint(1, 32)
        k, v = rng.randint(1, 128), rng.choice([rng.randint(1, 400), 64 * rng.randint(1, 6)])
        out.append(("linear_attention.json", [("B", b), ("T", t), ("H", h), ("K", k), ("V", v)]))
    for n in (rng.randint(1, 10**7), 1024 * rng.randint(1, 5000), 1024 * rng.randint(1, 5000) + 1, 0):
        out.append(("vector_add.json", [("n_elements", n)]))
    out.append(("linear_attention.json", [("B", rng.randint(1, 4)), ("T", 10), ("H", 2), ("K", 16)]))
    n = rng.randint(1, 10**6)
    out.append(("vector_add.json", [("n_elements", n), (rng.choice(["N", "n", "numel"]), n)]))
    xyz = "X|Y|Z"
    for axis in range(3):
        for delta in (0, 1, 2**32, -GRID_LIMITS[axis]):
            vals = [rng.randint(1, 1000) for _ in range(3)]
            vals[axis] = GRID_LIMITS[axis] + delta
            out.append((xyz, list(zip("XYZ", vals))))
    out.append((xyz, [("X", rng.randint(65536, 10**6)), ("Y", rng.randint(1, 65535)), ("Z", rng.randint(1, 9))]))
    out.append((xyz, [("X", -rng.randint(1, 100)), ("Y", 1), ("Z", 1)]))
    out.append(("cdiv(N, BLOCK)|B * H|1", [("N", rng.randint(1, 10**6)), ("BLOCK", rng.choice([0, 32, 100])),
                                           ("B", rng.randint(1, 50)), ("H", rng.randint(1, 50))]))
    out.append(("X * Y|1|1", [("X", 1 << rng.randint(16, 20)), ("Y", 1 << rng.randint(16, 20))]))
    rng.shuffle(out)
    return out


def expected(manifest: str, sizes: list[tuple[str, int]]) -> tuple[int, int, int] | None:
    """The grid of a case (:func:`draw_cases`) as the manifest describes it, or None where it must be refused."""
    from .expr import evaluate

    if manifest.endswith(".json"):
        m = _fixture(manifest)
        env = {k: v for k, v in m["constexprs"].items() if isinstance(v, int) and not isinstance(v, bool)}
        grid, needed = m["grid"], m["sizes"]
    else:
        env, grid, needed = {}, manifest.split("|"), [k for k, _ in sizes]
    given = dict(sizes)
    if any(n not in given for n in needed) or any(n not in needed for n in given):
        return None  # a missing size, or one the manifest does not list
    env.update(given)
    out = []
    for axis, text in enumerate(grid):
        try:
            v = evaluate(text, env)
        except Exception:  # noqa: BLE001 (an expression that fails: the launch must be refused)
            return None
        if not 1 <= v <= GRID_LIMITS[axis] or not -(2**63) <= v < 2**63:
            return None
        out.append(v)
    return tuple(out)


def _describe(manifest: str, sizes) -> str:
    what = manifest.removesuffix(".json").replace("_", " ") if manifest.endswith(".json") else \
        f"grid ({', '.join(manifest.split('|'))})"
    return f"{what} at {' '.join(f'{k}={v}' for k, v in sizes)}"


def grade(source: str, seed: int, out: pathlib.Path | str | None = None, *,
          target: str | os.PathLike | None = None) -> tuple[bool | None, str]:
    """Grade the learner's source: the crate's tests must pass, and the graded cases (drawn from ``seed``) must
    give the manifests' grids and refusals. Returns ``(passed, message)``; ``passed`` is None where cargo is
    missing (the message says how to get it). A source naming what it may not (:func:`forbidden`) is refused by
    :func:`build_and_test`, before cargo runs."""
    if not isinstance(source, str) or "launch_grid" not in source:
        return False, "YOUR_RUST must be a string of Rust source defining `pub fn launch_grid`"
    cases = draw_cases(seed)
    folder = pathlib.Path(out) if out is not None else pathlib.Path(tempfile.mkdtemp(prefix="launch-grid-"))
    result = build_and_test(source, folder, cases=cases, target=target)
    if result.passed is None:
        return None, result.message
    if not result.passed:
        return False, result.message
    lines = result.report or []
    if len(lines) != len(cases):
        return False, (f"the graded cases did not all run: {len(lines)} of {len(cases)} reported (does launch_grid "
                       "end the process?)")
    for (m, s), line in zip(cases, lines):
        want = expected(m, s)
        what = _describe(m, s)
        if line == "panic":
            return False, f"{what}: launch_grid panicked; return an Err naming the problem instead"
        if want is None and line != "err":
            return False, f"{what}: must be refused (a missing or unknown size, a failing expression or a grid " \
                          f"outside CUDA's limits), but launch_grid returned {line.removeprefix('ok ').split()}"
        if want is not None and line != "ok {} {} {}".format(*want):
            return False, f"{what}: launch_grid gave {line}, expected grid {list(want)}"
    return True, f"cargo test: {len(result.tests)} tests passed, and {len(cases)} graded cases gave the right grid"


def build_launcher(source: str, out: pathlib.Path | str, *, timeout: float = 600,
                   target: str | os.PathLike | None = None) -> tuple[pathlib.Path | None, str]:
    """Build the learner's launcher (``cargo build --offline --release``): ``workbook-launch`` whose grid comes from
    ``launch_grid``. Returns its path (None where it did not build, or cargo is missing) and what happened."""
    exe = cargo()
    if exe is None:
        return None, GET_CARGO
    out = pathlib.Path(out)
    tdir = _target_dir(target)
    try:
        with _locked(tdir):
            _write(source, out)
            proc = subprocess.run([exe, "build", "--offline", "--release", "--bin", LAUNCHER], cwd=out,
                                  env=_env(tdir), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"cargo build took longer than {timeout:.0f} s"
    if proc.returncode:
        return None, _build_error(proc.stderr, source)
    return pathlib.Path(tdir) / "release" / LAUNCHER, f"built {LAUNCHER} (cargo build --offline --release)"


def install_launcher(source: str, dest: pathlib.Path | str = CRATE / "target" / "release" / LAUNCHER) -> str:
    """Build the launcher of ``source`` and copy it to ``dest``, with the SHA-256 of the source beside it
    (``<dest>.sha256``): a GPU machine without cargo runs it for a notebook whose ``YOUR_RUST`` has that hash."""
    import hashlib

    with tempfile.TemporaryDirectory(prefix="yours-launch-") as tmp:
        built, how = build_launcher(source, tmp)
        if built is None:
            raise RuntimeError(how)
        dest = pathlib.Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, dest)
    dest.chmod(0o755)
    pathlib.Path(f"{dest}.sha256").write_text(hashlib.sha256(source.encode()).hexdigest() + "\n")
    return f"{how}: {dest}"


def main(argv: list[str] | None = None, *, source: str | None = None, prog: str | None = None) -> int:
    """The command line: build the launcher of ``--source FILE``, or of ``source`` where a caller passes it (the
    course's ``python -m grader.rust_launcher`` passes the lesson's solution)."""
    import argparse

    ap = argparse.ArgumentParser(prog=prog or "python -m kernels.export.rust_exercise",
                                 description="build lesson 05's launcher (the grid from launch_grid)")
    ap.add_argument("--source", required=source is None,
                    help="a file of Rust source defining launch_grid" + (" (default: the lesson's solution)"
                                                                        if source is not None else ""))
    ap.add_argument("--out", default=str(CRATE / "target" / "release" / LAUNCHER),
                    help="where the launcher goes (default: rust/target/release/yours-launch, carried to a GPU "
                         "machine with the crate's own launcher)")
    args = ap.parse_args(argv)
    try:
        source = pathlib.Path(args.source).read_text() if args.source else source
        print(install_launcher(source, args.out))
    except RuntimeError as e:
        print(e)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
