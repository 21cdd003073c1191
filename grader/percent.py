"""Read a jupytext percent-format lesson (``# %% [markdown] nbgrader={...}``) into an nbformat-4 dict.

The course build uses jupytext itself (``grader.course``); this reader covers the subset the lessons use, so that
the grader's demo and tests also run where jupytext is not installed (the GPU machine).
"""

from __future__ import annotations

import json
import re

__all__ = ["read_percent", "release"]

_HEADER = re.compile(r"^# %%(?P<md> \[markdown\])?(?P<meta>.*)$")
_META = re.compile(r"(\w+)=")


def _meta(text: str) -> dict:
    out, rest = {}, text.strip()
    while rest:
        m = _META.match(rest)
        if not m:
            break
        key = m.group(1)
        rest = rest[m.end():]
        value, end = json.JSONDecoder().raw_decode(rest)
        out[key] = value
        rest = rest[end:].strip()
    return out


def read_percent(text: str) -> dict:
    """The notebook of a percent-format source: cells, nbgrader metadata, cell ids from grade_ids."""
    lines = text.splitlines()
    if lines and lines[0] == "# ---":
        end = lines.index("# ---", 1)
        lines = lines[end + 1:]
    cells, cur = [], None
    for line in lines:
        m = _HEADER.match(line)
        if m:
            cur = {"md": bool(m.group("md")), "meta": _meta(m.group("meta")), "lines": []}
            cells.append(cur)
        elif cur is not None:
            cur["lines"].append(line)
    nb_cells = []
    for c in cells:
        body = "\n".join(c["lines"]).strip("\n")
        meta = {k: v for k, v in c["meta"].items() if k == "nbgrader" or k == "tags"}
        tags = meta.pop("tags", None)
        md = {"nbgrader": meta["nbgrader"]} if "nbgrader" in meta else {}
        if tags:
            md["tags"] = tags
        gid = md.get("nbgrader", {}).get("grade_id")
        cell = {"cell_type": "markdown" if c["md"] else "code", "id": gid or f"cell-{len(nb_cells)}",
                "metadata": md}
        if c["md"]:
            cell["source"] = "\n".join(ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in body.splitlines())
        else:
            cell.update(source=body, outputs=[], execution_count=None)
        nb_cells.append(cell)
    return {"cells": nb_cells, "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)",
                                                           "language": "python", "name": "python3"},
                                            "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


_SOLUTION = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION[ \t]*$", re.S | re.M)
_HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS\n.*?^[ \t]*### END HIDDEN TESTS[ \t]*\n?", re.S | re.M)


def release(nb: dict) -> dict:
    """The student version: solution regions become ``raise NotImplementedError()``, hidden tests go, as
    ``nbgrader generate_assignment`` does (used only where nbgrader is not installed)."""
    out = json.loads(json.dumps(nb))
    for cell in out["cells"]:
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else src  # nbformat keeps a cell's source as lines too
        src = _SOLUTION.sub(lambda m: f"{m['indent']}# YOUR CODE HERE\n{m['indent']}raise NotImplementedError()", src)
        cell["source"] = _HIDDEN.sub("", src).rstrip("\n")
    return out
