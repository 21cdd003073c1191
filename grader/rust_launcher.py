"""Lesson 05's launcher built from the lesson's solution: ``python -m grader.rust_launcher [--out PATH]`` writes
``rust/target/release/yours-launch`` (:func:`kernels.export.rust_exercise.install_launcher`, the SHA-256 of the
source beside it) for a GPU machine without cargo. The solution's ``YOUR_RUST`` is read from ``solutions/``, which
only the repository has; a learner builds their own with ``python -m kernels.export.rust_exercise --source FILE``.
"""

from __future__ import annotations

from kernels.export import rust_exercise

from .course import solution_notebook

__all__ = ["solution_source", "main"]


def solution_source() -> str:
    """``YOUR_RUST`` of the lesson's solution, as its notebook defines it (markers included)."""
    cell = next(c for c in solution_notebook("05_ptx_export_rust").cells if c.get("id") == "ex3-rust")
    ns: dict = {}
    exec(compile(cell.source, "<05_ptx_export_rust:ex3-rust>", "exec"), ns)  # noqa: S102 (the lesson's own cell)
    return ns["YOUR_RUST"]


def main(argv: list[str] | None = None) -> int:
    return rust_exercise.main(argv, source=solution_source(), prog="python -m grader.rust_launcher")


if __name__ == "__main__":
    raise SystemExit(main())
