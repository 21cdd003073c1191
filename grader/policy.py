"""What speed requirements are worth where they cannot be measured (in Triton's interpreter, without a GPU).

A graded cell whose check passed everything but a speed requirement that only a GPU can time is a *speed cell*
here. ``--speed-policy`` decides its score; the summary table and the top of every feedback page say which:

- ``zero`` (default): 0 points, "needs a GPU". CPU totals never exceed what a GPU would give; grading the class
  again on a GPU (same seed) gives the speed points to those who earn them.
- ``exclude``: left out of the score and the maximum in the grader's table and report (nbgrader's gradebook,
  whose maximum is fixed per lesson, records 0 with the reason).
- ``award``: full points, as if the speed requirement were met (what earlier versions did).
"""

from __future__ import annotations

POLICIES = ("zero", "exclude", "award")
DEFAULT = "zero"
_EXCLUDED = "excluded (needs a GPU)"

__all__ = ["POLICIES", "DEFAULT", "speed_cells", "apply", "describe", "excluded_points"]


def speed_cells(result) -> list:
    """The cells of a :class:`grader.grade.NotebookResult` whose only ungraded part is a speed requirement."""
    out = []
    for cell in result.cells:
        if cell.error or not cell.passed:
            continue
        if any(any(n.startswith("performance") for n in c.not_graded) for c in cell.checks):
            out.append(cell)
    return out


def describe(policy: str, mode: str = "interpreter") -> str:
    if mode == "gpu":
        return "speed requirements timed on the GPU"
    return {"zero": "speed policy zero: speed requirements need a GPU and score 0 here",
            "exclude": "speed policy exclude: speed requirements need a GPU and are left out of the totals",
            "award": "speed policy award: speed requirements are not timed here and get full points"}[policy]


def apply(results, policy: str = DEFAULT) -> None:
    """Score the speed cells of ``results`` (in place) under ``policy``; a note on each result graded without a
    GPU names the policy (and the cells it scored)."""
    if policy not in POLICIES:
        raise ValueError(f"speed policy {policy!r}: choose one of {', '.join(POLICIES)}")
    for r in results:
        cells = speed_cells(r)
        if not cells:
            # a lesson with a speed requirement says how it was scored even where the cell failed for another
            # reason; one with none (lesson 00) says nothing of speed
            if (r.mode != "gpu" and _times_on_gpu(r)
                    and not any(n.startswith("speed policy") for n in r.notes)):
                r.notes.append(describe(policy))
            continue
        pts = sum(c.points for c in cells)
        if policy == "award":
            r.notes.append(f"{describe(policy)} ({pts:g} point(s))")
            continue
        for c in cells:
            passed = c.message
            c.score = 0.0
            c.error = (f"{_EXCLUDED if policy == 'exclude' else 'needs a GPU'}: the speed requirement is timed only "
                       f"on a GPU (speed policy {policy}); everything else passed:\n{passed}")
        r.notes.append(f"{describe(policy)} ({pts:g} point(s): {', '.join(c.grade_id for c in cells)})")


def _times_on_gpu(result) -> bool:
    """Whether any check graded in ``result`` has a part only a GPU can grade (:meth:`Exercise.needs_gpu`)."""
    from kernels.checks.spec import get

    for cell in result.cells:
        for c in cell.checks:
            try:
                if get(c.exercise).needs_gpu(c.hidden):
                    return True
            except (KeyError, ImportError):
                continue
    return False


def excluded_points(result) -> float:
    return sum(c.points for c in result.cells if c.error.startswith(_EXCLUDED))


def speed_points(source: dict) -> float:
    """Points of the instructor notebook's graded cells that check a speed requirement or time on the GPU (a GPU
    is needed for them): what the ``zero`` policy takes off a correct submission graded without a GPU."""
    from kernels.checks.spec import get

    from .notebook import split

    total = 0.0
    for cell in split(source)[1]:
        try:
            if any(get(c.exercise).needs_gpu(c.hidden) for c in cell.checks):
                total += cell.points
        except (KeyError, ImportError):
            continue
    return total


def toolchain_points(source: dict) -> float:
    """Points of the instructor notebook's graded cells whose exercise builds with a toolchain this machine lacks
    (lesson 05's Rust without cargo): "not graded" here, so a correct submission does not get them."""
    from kernels.checks.engine import toolchain_missing
    from kernels.checks.spec import get

    from .notebook import split

    total = 0.0
    for cell in split(source)[1]:
        try:
            if any(toolchain_missing(get(c.exercise)) for c in cell.checks):
                total += cell.points
        except (KeyError, ImportError):
            continue
    return total
