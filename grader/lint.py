"""``python -m grader lint``: every graded cell of every lesson can be graded, with the points its spec states."""

from __future__ import annotations

from kernels.catalog import lesson_ids
from kernels.checks.spec import get

from .layout import ROOT as _ROOT
from .notebook import split

__all__ = ["lint"]


def lint(lessons: list[str] | None = None, sources: dict[str, dict] | None = None) -> list[str]:
    """Problems found (empty: every graded cell is one the grader can run)."""
    from .demo import read_source

    if sources is None:
        sources = {lesson: read_source(_ROOT / "solutions" / f"{lesson}.py") for lesson in lesson_ids()
                   if not lessons or lesson in lessons}
    problems = []
    for lesson, nb in sources.items():
        _, graded = split(nb)
        for cell in graded:
            where = f"{lesson}/{cell.grade_id}"
            if cell.error:
                problems.append(f"{where}: {cell.error}")
                continue
            for call in cell.checks:
                try:
                    ex = get(call.exercise)
                except (KeyError, ImportError) as e:
                    problems.append(f"{where}: {e}")
                    continue
                if len(call.names) != len(ex.args):
                    problems.append(f"{where}: {ex.id} takes {len(ex.args)} object(s), the cell passes "
                                    f"{len(call.names)}")
                if "value" not in ex.args or any(a != "value" for a in ex.args):
                    if not ex.cases(call.hidden) and any(a != "value" for a in ex.args):
                        problems.append(f"{where}: {ex.id} has no {'hidden' if call.hidden else 'visible'} cases")
                want = ex.points[1 if call.hidden else 0]
                if len(cell.checks) == 1 and want and abs(want - cell.points) > 1e-9:
                    problems.append(f"{where}: the cell gives {cell.points:g} points, {ex.id}'s spec says {want:g}")
    return problems
