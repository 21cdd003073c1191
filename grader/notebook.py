"""Reading notebooks for grading: the student's code, the graded cells and the check calls in them.

Graded cells are trusted only as they stand in the instructor's source (nbgrader restores them from the gradebook
before grading); they are parsed, never executed. Everything else is the student's code.

:func:`parse_checks` is the graded-cell grammar, the one place that says what a graded cell may hold: the grader
grades by it, ``python -m grader lint`` checks the lessons by it and the course build validates lesson sources by
it (adding the course's own layout rules: one call a line, ids of the lesson, hidden calls in the hidden block).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

from kernels.checks import provenance

__all__ = ["CheckCall", "GradedCell", "NotebookError", "parse_checks", "split", "cells_needed", "jit_prints",
           "with_cells"]

_MISSING = re.compile(r"^# This cell \(id:[^)]*\) was missing from the submission\..*$", re.M)


class NotebookError(ValueError):
    """A graded cell the grader cannot run (a course configuration error, caught by ``python -m grader lint``)."""


@dataclass(frozen=True)
class CheckCall:
    exercise: str
    names: tuple[str, ...]
    hidden: bool
    #: the call's first and last line in the cell's source (1-based)
    line: int = field(default=0, compare=False)
    end_line: int = field(default=0, compare=False)


@dataclass
class GradedCell:
    grade_id: str
    points: float
    source: str
    checks: list[CheckCall] = field(default_factory=list)
    error: str = ""


def parse_checks(source: str) -> list[CheckCall]:
    """The ``check(...)`` calls of a graded cell; anything else in it is a configuration error.

    A graded cell holds ``check("<exercise id>", name, ..., hidden=True|False)`` calls (plain names only) and,
    optionally, ``from kernels.checks import check``; comments and blank lines are ignored."""
    src = _MISSING.sub("", source)
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        raise NotebookError(f"graded cell does not parse: {e}") from None
    calls = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "kernels.checks" and \
                [a.name for a in stmt.names] == ["check"]:
            continue
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "check"):
            raise NotebookError(f"graded cell holds code other than check(...) calls: {ast.unparse(stmt)[:80]!r}")
        if not call.args or not (isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)):
            raise NotebookError("check(...) needs the exercise id as its first argument, a string literal")
        names = []
        for a in call.args[1:]:
            if not isinstance(a, ast.Name):
                raise NotebookError(f"check(...) arguments must be plain names, got {ast.unparse(a)!r}")
            names.append(a.id)
        hidden = False
        for k in call.keywords:
            if k.arg != "hidden" or not isinstance(k.value, ast.Constant) or not isinstance(k.value.value, bool):
                raise NotebookError(f"check(...) takes only hidden=True/False, got {ast.unparse(k)!r}")
            hidden = k.value.value
        calls.append(CheckCall(call.args[0].value, tuple(names), hidden, call.lineno, call.end_lineno))
    if not calls:
        raise NotebookError("graded cell has no check(...) call")
    return calls


def _nbg(cell) -> dict:
    md = cell.get("metadata") or {}
    nbg = md.get("nbgrader") if isinstance(md, dict) else None
    return nbg if isinstance(nbg, dict) else {}


def with_cells(nb: dict, **cells: str) -> dict:
    """A copy of notebook ``nb`` whose cells with these nbgrader grade ids hold the sources given."""
    out = json.loads(json.dumps(nb))
    for cell in out["cells"]:
        gid = _nbg(cell).get("grade_id")
        if gid in cells:
            cell["source"] = cells[gid]
    return out


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def split(nb, graded_source: dict[str, tuple[str, float]] | None = None) -> tuple[list[str], list[GradedCell]]:
    """(the student's code cells in order, the graded cells in order).

    ``graded_source``: grade_id -> (source, points) from the instructor's notebook; when given, graded cells take
    their source and points from it (whatever the submission says), and a graded cell missing from the
    submission is still graded.
    """
    code, graded, seen = [], [], set()
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        nbg = _nbg(cell)
        gid = nbg.get("grade_id")
        if nbg.get("grade") and not nbg.get("solution") and isinstance(gid, str):
            if graded_source is not None and gid not in graded_source:
                code.append(_source(cell))
                continue
            src, pts = graded_source[gid] if graded_source else (_source(cell), float(nbg.get("points", 0)))
            graded.append(GradedCell(gid, pts, src))
            seen.add(gid)
        else:
            code.append(_source(cell))
    for gid, (src, pts) in (graded_source or {}).items():
        if gid not in seen:
            graded.append(GradedCell(gid, pts, src))
    for g in graded:
        try:
            g.checks = parse_checks(g.source)
        except NotebookError as e:
            g.error = str(e)
    return code, graded


def cells_needed(cells: list[str], names: set[str]) -> list[int]:
    """Indices of the cells that (transitively) define ``names``: a backward slice at cell granularity, so that
    benchmarks, plots and demos the graded names do not depend on are not run."""
    info = []
    for raw in cells:
        src = provenance.transform_cell(raw)
        try:
            tree = ast.parse(src)
        except SyntaxError:
            info.append((set(), set(), False))
            continue
        binds, uses = set(), set()
        for stmt in tree.body:
            binds |= _binds(stmt)
            # a function's parameter `n` does not need the cell that made a global `n`
            uses |= _free_names(stmt) if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) else _loads(stmt)
        info.append((binds, uses, True))
    need = set(names)
    keep = []
    for i in range(len(cells) - 1, -1, -1):
        binds, uses, ok = info[i]
        if ok and binds & need:
            keep.append(i)
            need |= uses
    return sorted(keep)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)


def _loads(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _free_names(node) -> set[str]:
    """The names a function, lambda or comprehension reads from outside itself: what it uses minus its parameters
    and the names it binds, with nested scopes resolved the same way. Where Python's rules are subtle (class
    bodies, a walrus inside a comprehension) the answer errs towards more names, which only keeps more cells."""
    if isinstance(node, ast.ClassDef):
        return _loads(node)
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        gens = node.generators
        outside = _loads(gens[0].iter)  # the first iterable is evaluated in the enclosing scope
        targets = {n.id for g in gens for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        parts = [*gens[0].ifs, *[x for g in gens[1:] for x in (g.iter, *g.ifs)]]
        parts += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        inside = set().union(*(_scope_uses(x) for x in parts))
        return outside | (inside - targets)
    a = node.args
    params = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    params |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    outside = set()  # evaluated where the function is defined: defaults, decorators, annotations
    for x in (*a.defaults, *[d for d in a.kw_defaults if d is not None]):
        outside |= _loads(x)
    if not isinstance(node, ast.Lambda):
        for x in (*node.decorator_list, node.returns,
                  *[y.annotation for y in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if y]):
            if x is not None:
                outside |= _loads(x)
    body = [node.body] if isinstance(node, ast.Lambda) else node.body
    declared = {n for st in body for x in _own_nodes(st) if isinstance(x, (ast.Global, ast.Nonlocal))
                for n in x.names}
    local = params | {b for st in body for b in _own_binds(st)}
    uses = set().union(*(_scope_uses(st) for st in body)) if body else set()
    return outside | (uses - (local - declared))


def _own_nodes(node):
    """``node`` and everything under it in the same scope; a nested scope is yielded but not entered."""
    yield node
    if isinstance(node, _SCOPES):
        return
    for child in ast.iter_child_nodes(node):
        yield from _own_nodes(child)


def _own_binds(node) -> set[str]:
    out = set()
    for x in _own_nodes(node):
        if isinstance(x, ast.Name) and isinstance(x.ctx, (ast.Store, ast.Del)):
            out.add(x.id)
        elif isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(x.name)
        elif isinstance(x, (ast.Import, ast.ImportFrom)):
            out |= {a.asname or a.name.split(".")[0] for a in x.names}
        elif isinstance(x, ast.ExceptHandler) and x.name:
            out.add(x.name)
        elif isinstance(x, (ast.MatchAs, ast.MatchStar)) and x.name:
            out.add(x.name)
        elif isinstance(x, ast.MatchMapping) and x.rest:
            out.add(x.rest)
    return out


def _scope_uses(node) -> set[str]:
    """Names read in ``node``'s scope, plus what its nested scopes read from outside themselves."""
    if isinstance(node, _SCOPES):
        return _free_names(node)
    out = set()
    for x in _own_nodes(node):
        if isinstance(x, _SCOPES):
            out |= _free_names(x)
        elif isinstance(x, ast.Name) and isinstance(x.ctx, ast.Load):
            out.add(x.id)
    return out


def _binds(stmt) -> set[str]:
    out = set()
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        out.add(stmt.name)
        return out
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        for a in stmt.names:
            out.add(a.asname or a.name.split(".")[0])
        return out
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                out.add(a.asname or a.name.split(".")[0])
    return out


def jit_prints(cells: list[str]) -> dict[str, str]:
    """fingerprint -> name of every top-level ``@triton.jit`` function in these cells (a release notebook's)."""
    out = {}
    for name, b in provenance.scan(cells).items():
        if b.kind == "jit":
            out[provenance.fingerprint(b.source)] = name
    return out
