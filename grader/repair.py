"""Giving nbgrader back a submitted notebook it can record: what a student's tools stripped or doubled, repaired
from the release, so that the gradebook and the CSV hold the grader's score (never a 0 beside points in the table).

The grader itself needs none of this (it takes graded cells from the instructor's notebook by grade id), but
``nbgrader autograde`` matches cells by their ``nbgrader`` metadata: a notebook saved by an editor that drops
cell metadata, or with a graded cell pasted twice, fails there. :func:`restore_metadata` matches the
submission's cells to the release's (by grade id, else by aligning the two sequences of cells: an unchanged cell
by its content, an edited solution cell by its position between matched neighbours) and gives each matched cell
its release metadata back; a second cell with a grade id already seen loses its ``nbgrader`` metadata.
"""

from __future__ import annotations

import copy
import difflib

__all__ = ["restore_metadata"]


def _gid(cell: dict) -> str | None:
    nbg = (cell.get("metadata") or {}).get("nbgrader") if isinstance(cell.get("metadata"), dict) else None
    return nbg.get("grade_id") if isinstance(nbg, dict) and isinstance(nbg.get("grade_id"), str) else None


def _text(cell: dict) -> str:
    src = cell.get("source", "")
    return ("".join(src) if isinstance(src, list) else str(src)).strip()


def restore_metadata(nb: dict, release: dict | None) -> list[str]:
    """Repair ``nb`` in place against ``release``; returns notes saying what was done (empty when nothing)."""
    if not release or not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return []
    cells, notes = nb["cells"], []
    seen: set[str] = set()
    doubled = []
    for c in cells:
        g = _gid(c)
        if g is None:
            continue
        if g in seen:
            del c["metadata"]["nbgrader"]
            doubled.append(g)
        seen.add(g)
    if doubled:
        notes.append(f"graded cell(s) {', '.join(sorted(set(doubled)))} appear more than once: the first is graded, "
                     "the copies are plain cells")
    rel = [c for c in release.get("cells", []) if isinstance(c, dict)]
    missing = [_gid(c) for c in rel if _gid(c) and _gid(c) not in seen]
    if not missing:
        return notes
    sig = [(c.get("cell_type"), _text(c)) for c in cells]
    want = [(c.get("cell_type"), _text(c)) for c in rel]
    restored = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, sig, want, autojunk=False).get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            for i, j in zip(range(i1, i2), range(j1, j2)):
                s, r = cells[i], rel[j]
                g = _gid(r)
                if g and g not in seen and _gid(s) is None and s.get("cell_type") == r.get("cell_type"):
                    md = s.get("metadata") if isinstance(s.get("metadata"), dict) else {}
                    md["nbgrader"] = copy.deepcopy(r["metadata"]["nbgrader"])
                    s["metadata"] = md
                    seen.add(g)
                    restored.append(g)
    if restored:
        notes.append(f"nbgrader metadata of {len(restored)} cell(s) restored from the release (the notebook was "
                     "saved without it)")
    lost = [g for g in missing if g not in seen]
    if lost:
        notes.append(f"graded cell(s) {', '.join(lost)} not found in the notebook")
    return notes
