"""Which code cells the grader runs for a notebook's graded names: a backward slice over the cells, where a
function's parameters and locals do not pull in the cells that happen to bind the same names globally."""

import ast
import textwrap

import pytest

from grader.notebook import _free_names, cells_needed, with_cells

FREE = [
    ("def f(n): return n", set()),
    ("def f(x): return helper(x) + CONST", {"helper", "CONST"}),
    ("def f():\n    global g\n    g = 1\n    return g", {"g"}),
    # a comprehension's variable is its own: after it, `n` is the global one
    ("def f():\n    y = [n for n in range(3)]\n    return n", {"range", "n"}),
    # a nested function's local is not the outer function's
    ("def f():\n    def g():\n        x = 1\n        return x\n    return x + g()", {"x"}),
    ("def f(a=DEFAULT): return a", {"DEFAULT"}),
    ("@deco\ndef f(): pass", {"deco"}),
    ("def f(): return (lambda z: z + w)(1)", {"w"}),
    # the first iterable is read in the enclosing scope
    ("def f(): return [x for x in x]", {"x"}),
    ("def f():\n    try:\n        pass\n    except E as e:\n        return e", {"E"}),
    ("def f():\n    import numpy as np\n    return np", set()),
    ("def f(*args, k=1, **kw): return args, kw, k, torch", {"torch"}),
    ("def f():\n    class C:\n        y = Z\n    return C", {"Z"}),
    ("def f(a: Ann) -> Ret: return a", {"Ann", "Ret"}),
    ("def f():\n    for i in range(3):\n        pass\n    return i", {"range"}),
    ("def f():\n    def g(y=OUT): return y\n    return g", {"OUT"}),
    ("def f(): return {k: v for k, v in items if k in keep}", {"items", "keep"}),
    ("def f():\n    x = 1\n    def g():\n        nonlocal x\n        x = 2\n    return g", set()),
    ("def f():\n    def g():\n        nonlocal x\n        return x\n    x = 1\n    return g", set()),
]


@pytest.mark.parametrize("src, want", FREE, ids=range(len(FREE)))
def test_free_names(src, want):
    assert _free_names(ast.parse(textwrap.dedent(src)).body[0]) == want


def test_slice_skips_cells_that_bind_a_parameters_name():
    cells = [
        "import math",
        "n = 2**28\nx = make_huge(n)",  # a demo: binds n, which the function below only has as a parameter
        "def helper(k):\n    return math.ceil(k / 32)",
        "def sector_bytes(n, stride):\n    return helper(n * stride) * 32",
        "print(sector_bytes(n, 4))",
    ]
    assert cells_needed(cells, {"sector_bytes"}) == [0, 2, 3]
    # a global the function really reads keeps its cell
    cells[3] = "def sector_bytes(m, stride):\n    return helper(n * stride) * 32"
    assert cells_needed(cells, {"sector_bytes"}) == [0, 1, 2, 3]


def test_with_cells_replaces_graded_cells_by_id_in_a_copy():
    nb = {"cells": [{"cell_type": "code", "source": "a = 1", "metadata": {"nbgrader": {"grade_id": "ex1"}}},
                    {"cell_type": "code", "source": "b = 2", "metadata": {}},
                    {"cell_type": "markdown", "source": "text", "metadata": {"nbgrader": {"grade_id": "md"}}}]}
    got = with_cells(nb, ex1="a = 3", missing="x")
    assert [c["source"] for c in got["cells"]] == ["a = 3", "b = 2", "text"]
    assert nb["cells"][0]["source"] == "a = 1"
