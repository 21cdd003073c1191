"""What grading a notebook produces: each check's result, each graded cell's score, the notebook's total. The
grader (:mod:`grader.grade`), its cubin path (:mod:`grader.cubin`), the class record and the reports share them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from kernels.device import ON_GPU

__all__ = ["CheckResult", "CellResult", "NotebookResult"]


@dataclass
class CheckResult:
    exercise: str
    hidden: bool
    passed: bool
    status: str  # passed, failed, crashed, timeout, rejected, not graded
    lines: list[str] = field(default_factory=list)
    not_graded: list[str] = field(default_factory=list)
    perf: dict | None = None
    seconds: float = 0.0


@dataclass
class CellResult:
    grade_id: str
    points: float
    score: float
    checks: list[CheckResult] = field(default_factory=list)
    error: str = ""

    @property
    def passed(self) -> bool:
        return self.score >= self.points

    @property
    def message(self) -> str:
        if self.error:
            return self.error
        lines = []
        for c in self.checks:
            lines += c.lines
        return "\n".join(lines)

    def gist(self, width: int = 240) -> str:
        """The message in one line: its first, and when that ends in a colon (``failed on case ...:``), the first
        reason below it, so a summary says what is wrong and not only where."""
        lines = [ln.strip() for ln in self.message.splitlines() if ln.strip()]
        if not lines:
            return ""
        first = lines[0]
        if first.endswith(":") and len(lines) > 1:
            first = f"{first} {lines[1].removeprefix('- ')}"
        return first if len(first) <= width else first[: width - 3] + "..."


@dataclass
class NotebookResult:
    student: str
    lesson: str
    cells: list[CellResult]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    mode: str = "gpu" if ON_GPU else "interpreter"
    isolation: str = ""
    # where ``seconds`` went: starting workers, running the notebook's cells, waiting for the GPU (other slots'
    # work or timing), stopping workers; the rest is the checks themselves
    phases: dict[str, float] = field(default_factory=dict)
    where: str = ""  # the machine that graded it (``kernels.device.describe()``: the GPU model, the versions)

    @property
    def score(self) -> float:
        return sum(c.score for c in self.cells)

    @property
    def max_score(self) -> float:
        return sum(c.points for c in self.cells)

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(score=self.score, max_score=self.max_score)
        return d
