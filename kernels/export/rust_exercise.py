"""Lesson 05's Rust exercise: the learner's ``launch_grid`` built into a crate of its own and tested by the crate's
tests against the launcher's own ``Manifest::resolve``.

:func:`build_and_test` writes ``<out>/Cargo.toml`` (a path dependency on ``rust/``, so it builds offline),
``<out>/src/lib.rs`` (the learner's source) and ``<out>/tests/grid.rs`` (``rust/exercise/grid.rs``), then runs
``cargo test --offline`` with the fixtures of ``rust/tests/fixtures``. Without ``cargo`` it says how to get it.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
from dataclasses import dataclass

__all__ = ["RustResult", "build_and_test", "cargo"]

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRATE = ROOT / "rust"
GET_CARGO = ("cargo is not installed here: get Rust with rustup (https://rustup.rs: "
             "`curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh`, then open a new shell), "
             "or your system's package (`apt-get install cargo`); then run this cell again")


@dataclass
class RustResult:
    """What ``cargo test`` said: ``passed`` is None when cargo is missing (nothing was run)."""

    passed: bool | None
    tests: dict[str, bool]
    message: str


def cargo() -> str | None:
    """The ``cargo`` to use: on PATH, else rustup's default place."""
    home = pathlib.Path.home() / ".cargo" / "bin" / "cargo"
    return shutil.which("cargo") or (str(home) if home.is_file() else None)


def _manifest() -> str:
    dep = CRATE.as_posix()
    return (f'[package]\nname = "yours"\nversion = "0.1.0"\nedition = "2021"\npublish = false\n\n'
            f'[dependencies]\nworkbook-launch = {{ path = "{dep}" }}\n')


def build_and_test(source: str, out: pathlib.Path | str, *, timeout: float = 600) -> RustResult:
    """Write the learner's crate to ``out`` and run its tests; returns what passed and cargo's own words."""
    exe = cargo()
    if exe is None:
        return RustResult(None, {}, GET_CARGO)
    out = pathlib.Path(out)
    (out / "src").mkdir(parents=True, exist_ok=True)
    (out / "tests").mkdir(exist_ok=True)
    (out / "Cargo.toml").write_text(_manifest())
    (out / "src" / "lib.rs").write_text(source)
    shutil.copyfile(CRATE / "exercise" / "grid.rs", out / "tests" / "grid.rs")
    env = dict(os.environ, WORKBOOK_FIXTURES=str(CRATE / "tests" / "fixtures"), RUST_BACKTRACE="0",
               CARGO_TARGET_DIR=str(CRATE / "target" / "exercise"))
    try:
        proc = subprocess.run([exe, "test", "--offline", "--test", "grid"], cwd=out, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return RustResult(False, {}, f"cargo test took longer than {timeout:.0f} s")
    text = proc.stdout + proc.stderr
    tests = {m.group(1): m.group(2) == "ok" for m in re.finditer(r"^test (\w+) \.\.\. (ok|FAILED)$", text, re.M)}
    if proc.returncode == 0:
        return RustResult(True, tests, f"cargo test: {len(tests)} tests passed")
    if not tests:  # it did not build: the compiler's first error is the message
        errors = [b for b in re.split(r"\n(?=error)", proc.stderr) if b.startswith("error")]
        return RustResult(False, {}, "your Rust does not build:\n" + ("\n".join(errors[:2]) or text)[-3000:])
    failed = [name for name, ok in tests.items() if not ok]
    detail = re.findall(r"---- (\w+) stdout ----\n(.*?)(?=\n\n|\Z)", proc.stdout, re.S)
    return RustResult(False, tests, f"cargo test: {', '.join(failed)} failed\n"
                      + "\n".join(f"{n}: {d.strip()[-800:]}" for n, d in detail))
