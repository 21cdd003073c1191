"""How a graded kernel's provenance is established: rebuilt from the notebook's own source, never a package
kernel or a copy of one, and compiled ahead of time for sm_90 (which refuses what only the interpreter runs)."""

import inspect
import textwrap

import pytest

from kernels.checks import provenance
from kernels.checks.provenance import Rejected, from_cells

SETUP = ("import kernels\nimport torch\nimport triton\nimport triton.language as tl\n"
         "from kernels.memory.copy import _copy_memory_kernel\n")
KERNEL = '''
BLOCK = tl.constexpr(128)


@triton.jit
def _helper(x):
    return x * 2


@triton.jit
def my_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, _helper(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)
'''


def test_rebuilds_kernel_with_helpers_and_constants():
    ks = from_cells([SETUP, KERNEL], "my_kernel")
    assert "def _helper" in ks.text and "def my_kernel" in ks.text
    assert "kernels" not in ks.text.replace("kernels.checks.provenance", "")
    assert set(ks.functions) == {"my_kernel", "_helper"}


def test_last_definition_wins_and_redefinition_by_assignment_is_refused():
    later = "my_kernel = _copy_memory_kernel"
    with pytest.raises(Rejected, match="imported|run time"):
        from_cells([SETUP, KERNEL, later], "my_kernel")


@pytest.mark.parametrize("cell, match", [
    ("from kernels.memory.copy import _copy_memory_kernel as my_kernel", "is imported"),
    ("def my_kernel(x_ptr, out_ptr, n, BLOCK_SIZE):\n    out_ptr.copy_(x_ptr)", "plain Python function"),
    ("my_kernel = triton.jit(lambda x: x)", "run time"),
    ("@triton.jit\ndef my_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):\n    torch.mul(x_ptr, 2)", "torch"),
    ("@triton.jit\ndef my_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):\n    _copy_memory_kernel(x_ptr)",
     "imported from kernels"),
    ("@triton.jit\ndef my_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):\n    open('/etc/passwd')", "builtin"),
    ("@triton.jit\ndef my_kernel(x_ptr, n=__import__('os').getpid()):\n    pass", "literal"),
    ("@triton.jit\ndef my_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):\n    # YOUR CODE HERE\n"
     "    raise NotImplementedError()", "not implemented yet"),
    ("@triton.autotune(configs=[], key=[])\n@triton.jit\ndef my_kernel(x_ptr):\n    pass", "only @triton.jit"),
])
def test_refuses_what_is_not_the_students_own_kernel(cell, match):
    with pytest.raises(Rejected, match=match):
        from_cells([SETUP, cell], "my_kernel")


def test_refuses_a_renamed_copy_of_a_package_kernel():
    from kernels.memory import copy

    src = textwrap.dedent(inspect.getsource(copy._copy_memory_kernel.fn))
    renamed = src.replace("_copy_memory_kernel", "my_kernel").replace("offs", "idx").replace("pid", "me")
    with pytest.raises(Rejected, match="copy of the package's kernels.memory.copy._copy_memory_kernel"):
        from_cells([SETUP, "@triton.jit\n" + renamed], "my_kernel")
    fp = provenance.fingerprint(renamed)
    assert provenance.package_fingerprints()[fp] == "kernels.memory.copy._copy_memory_kernel"


def test_a_kernel_the_lesson_provides_is_not_an_answer():
    ks_src = [SETUP, KERNEL.replace("my_kernel", "provided_kernel"), KERNEL]
    prints = {provenance.fingerprint(b.source): n for n, b in provenance.scan(ks_src[:2]).items() if b.kind == "jit"}
    with pytest.raises(Rejected, match="the lesson provides"):
        from_cells(ks_src, "my_kernel", forbidden={fp: n for fp, n in prints.items() if n != "my_kernel"})


def test_ahead_of_time_compile_refuses_what_the_interpreter_runs(tmp_path):
    """``tl.arange(0, 100)`` runs under the interpreter but does not compile: the sm_90 compile catches it."""
    from kernels.checks.spec import CheckFailed

    bad = ("@triton.jit\ndef scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):\n"
           "    offs = tl.program_id(0) * BLOCK + tl.arange(0, 100)\n"
           "    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * alpha, mask=offs < n)\n")
    good = bad.replace("tl.arange(0, 100)", "tl.arange(0, BLOCK)")
    ks_bad, ks_good = from_cells([SETUP, bad], "scale_kernel"), from_cells([SETUP, good], "scale_kernel")
    ex = "90_grader_fixture.scale"
    provenance.verify_compiles(ex, False, [{"entry": ks_good.entry, "text": ks_good.text}], [None])
    with pytest.raises(CheckFailed, match="does not compile for a GPU"):
        provenance.verify_compiles(ex, False, [{"entry": ks_bad.entry, "text": ks_bad.text}], [None])


def test_one_compile_process_answers_the_checks_and_a_lost_one_is_replaced():
    """A notebook's checks ask one compile process, which forks a child a request (an interpreter start with torch
    and Triton costs seconds a check); a child that dies is a crash, not a pass; a server gone is started again."""
    from kernels.checks.spec import CheckFailed

    good = ("@triton.jit\ndef scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):\n"
            "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
            "    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * alpha, mask=offs < n)\n")
    ks = from_cells([SETUP, good], "scale_kernel")
    src = [{"entry": ks.entry, "text": ks.text}]
    provenance._stop_server()
    provenance._VERIFIED.clear()
    provenance.verify_compiles("90_grader_fixture.scale", False, src, [None])
    first = provenance._SERVER[0].pid
    provenance.verify_compiles("90_grader_fixture.scale", True, src, [None])
    assert provenance._SERVER[0].pid == first
    dies = ks.text + "\nimport os\nos._exit(7)\n"  # loading the kernel's module ends the child
    with pytest.raises(CheckFailed, match="crashed"):
        provenance.verify_compiles("90_grader_fixture.scale", False, [{"entry": ks.entry, "text": dies}], [None])
    provenance._stop_server()
    provenance._VERIFIED.clear()
    provenance.verify_compiles("90_grader_fixture.scale", False, src, [None])
    assert provenance._SERVER[0].pid != first


def test_function_answers_may_not_reach_the_package():
    from kernels.checks.provenance import check_function_static

    cells = [SETUP + "from kernels.linear_attention import reference as ref\n",
             "def mine(x):\n    return helper(x)\n\ndef helper(x):\n    return ref.reference_linear_attention(x)"]
    with pytest.raises(Rejected, match="kernels.linear_attention"):
        check_function_static(cells, "mine")
    check_function_static([SETUP, "def mine(x):\n    return torch.cumsum(x, -1)"], "mine")
    with pytest.raises(Rejected, match="torch.cumsum"):
        check_function_static([SETUP, "def mine(x):\n    return torch.cumsum(x, -1)"], "mine", ("torch.cumsum",))


@pytest.mark.parametrize("body", [
    "    from kernels.memory.strided import bytes_moved\n    return bytes_moved(x)",
    "    import kernels.memory.strided as s\n    return s.bytes_moved(x)",
    "    import importlib\n    return importlib.import_module('kernels.memory.strided').bytes_moved(x)",
    "    return __import__('kernels.memory.strided').memory.strided.bytes_moved(x)",
    "    import sys\n    return sys.modules['kernels.memory.strided'].bytes_moved(x)",
    "    def inner(y):\n        from kernels.memory import strided\n        return strided.bytes_moved(y)\n"
    "    return inner(x)",
], ids=["from-import", "import-as", "import_module", "__import__", "sys.modules", "nested"])
def test_a_function_may_not_import_the_package_inside_its_body(body):
    from kernels.checks.provenance import check_function_static

    cells = ["import torch\n", f"def mine(x):\n{body}\n"]
    with pytest.raises(Rejected, match="imports kernels.memory"):
        check_function_static(cells, "mine")
    # what the exercise may use stays allowed, inside the body too
    check_function_static(["def mine(x):\n    from kernels.testing import randn\n    import torch\n"
                           "    return randn(3) + x\n"], "mine")
    with pytest.raises(Rejected, match="this exercise asks for your own implementation"):
        check_function_static(["def mine(x):\n    import torch\n    return torch.cumsum(x, -1)\n"], "mine",
                              ("torch.cumsum",))


def test_the_natural_answer_of_a_short_exercise_is_not_a_copy():
    """Vector add has one natural form, the package's: an exercise naming it as a twin accepts it; others don't."""
    from kernels.vector_add import naive

    src = textwrap.dedent(inspect.getsource(naive._naive_vector_add_kernel.fn)).replace(
        "_naive_vector_add_kernel", "add_kernel").replace("offs", "offsets")
    cells = [SETUP, src]
    with pytest.raises(Rejected, match="copy of the package's kernels.vector_add.naive._naive_vector_add_kernel"):
        from_cells(cells, "add_kernel")
    from kernels.checks.lessons.l00_setup import VECTOR_ADD

    assert from_cells(cells, "add_kernel", twins=VECTOR_ADD.twins).entry == "add_kernel"


_TRICK = "@triton.jit\ndef my_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):\n    {body}\n"


@pytest.mark.parametrize("body, match", [
    ("if hasattr(x_ptr.handle, 'data'):\n        pass", r"`\.handle`"),
    ("if hasattr(x_ptr, 'handle'):\n        pass", "'handle' by name"),
    ("tl.core.builtins", "builtins"),
    ("if triton.runtime.interpreter.is_interpreting():\n        pass", "runtime|interpreter"),
    ("x = triton.knobs", "knobs"),
    ("import os", "imports inside a kernel"),
    ("x = x_ptr.__class__", "Python internal"),
    ("x = getattr(x_ptr, 'dtype' + '')", "built at run time"),
])
def test_refuses_what_lets_a_kernel_diverge_from_its_compile(body, match):
    """Under the interpreter a kernel runs as Python: the tricks that let it run other code than the sm_90 compile
    checked (an interpreter flag, the interpreter's tensor handle, Triton's builtins or knobs, an import) are
    refused by name; a docstring or an assert message that mentions them is not."""
    with pytest.raises(Rejected, match=match):
        from_cells([SETUP, _TRICK.format(body=body)], "my_kernel")
    fine = _TRICK.format(body='"""Each program handles BLOCK_SIZE elements (interpreter or GPU alike)."""\n'
                              '    tl.device_assert(n >= 0, "n handles no negative sizes")')
    from_cells([SETUP, fine], "my_kernel")


def test_refuses_a_trivially_edited_copy_with_its_similarity():
    """A package kernel copied with no-op statements added, a constant folded in and every name renamed is still
    the copy: the normalized comparison sets those aside and the message gives the similarity."""
    src = inspect.getsource(__import__("kernels.memory.copy", fromlist=["x"])._copy_memory_kernel.fn)
    edited = (src.replace("_copy_memory_kernel", "my_kernel").replace("offs", "o").replace("pid", "p")
              .replace("(pid + 1)", "(p + 1)").replace("    o = ", "    tl.debug_barrier()\n    o = ")
              .replace("axis=0", "axis=0 * 1").replace("    else:", "        pass\n    else:"))
    with pytest.raises(Rejected, match=r"copy of the package's kernels\.memory\.copy\._copy_memory_kernel with only "
                                       r"names, constants or no-op statements changed \(\d+% of its structure"):
        from_cells([SETUP, edited], "my_kernel")
    real_change = edited.replace("tl.load(x_ptr + o)", "tl.load(x_ptr + o) * 2")
    from_cells([SETUP, real_change], "my_kernel")  # a kernel that computes something else is its own
