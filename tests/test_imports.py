"""The import graphs of ``kernels`` and ``grader`` have no cycle: every ``import`` between a package's modules, at
the top or inside a function, points one way. A cycle makes the import order matter and hides which module owns
what. And the layers point one way too: ``grader`` (the course's tools) imports ``kernels`` (the library the
learner imports), never the other way round."""

import ast
import pathlib
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _modules(package: str) -> dict[str, pathlib.Path]:
    base = _ROOT / package
    out = {}
    for path in base.rglob("*.py"):
        parts = list(path.relative_to(_ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _edges(name: str, path: pathlib.Path, known: dict) -> set[str]:
    """The package's modules that ``name`` imports (a package's ``__init__`` counts as the package)."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        for t in targets:
            while t and t not in known:  # `import a.b.c` of a name inside a module: the module
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def cycles(package: str) -> list[list[str]]:
    known = _modules(package)
    graph = {m: _edges(m, p, known) for m, p in known.items()}
    found, state, stack = [], {}, []

    def visit(m: str) -> None:
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                found.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return found


def imports_of(package: str, outside: str) -> list[str]:
    """Where a module of ``package`` imports ``outside`` or one of its modules (``path:line``)."""
    found = []
    for name, path in sorted(_modules(package).items()):
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                targets = [".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))]
            elif isinstance(node, ast.ImportFrom):
                targets = [node.module]
            else:
                continue
            if any(t == outside or t.startswith(outside + ".") for t in targets):
                found.append(f"{path.relative_to(_ROOT)}:{node.lineno}")
    return found


@pytest.mark.parametrize("package", ["kernels", "grader"])
def test_no_import_cycle_in_the_package(package):
    found = cycles(package)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_library_never_imports_the_grader():
    found = imports_of("kernels", "grader")
    assert not found, "kernels/ imports grader at " + ", ".join(found)


def test_a_cycle_is_found(tmp_path, monkeypatch):
    pkg = tmp_path / "loop"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import g\n")
    monkeypatch.setattr(sys.modules[__name__], "_ROOT", tmp_path)
    assert cycles("loop") == [["loop.a", "loop.b", "loop.a"]]


def test_an_import_across_the_layers_is_found(tmp_path, monkeypatch):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "__init__.py").write_text("")
    (tmp_path / "lib" / "a.py").write_text("import tool.b\n")
    (tmp_path / "lib" / "b.py").write_text("def f():\n    from tool import c\n")
    (tmp_path / "lib" / "c.py").write_text("import toolbox\nfrom . import a\n")
    monkeypatch.setattr(sys.modules[__name__], "_ROOT", tmp_path)
    assert imports_of("lib", "tool") == ["lib/a.py:1", "lib/b.py:2"]
