"""The red-team class: submissions crafted against lessons 00 and 02 the way a motivated student would, one per
hole, each with the score the grader must give (``python -m grader redteam``; ``tests/grader/test_redteam.py``).

Attacks start from the student release (the stubs score 0 in a fraction of a second) with one cell replaced, so
the class stays cheap: only the attacked problem runs. Controls (the honest answer in the same scaffolding, and
correct work in forms the grader once refused) show that the scaffolding is not what scores 0. ``universal``
is the all-lessons cheat: every kernel and function of both lessons written to reach around the grader.
"""

from __future__ import annotations

import json
import pathlib
import time
from dataclasses import dataclass

from .layout import ROOT as _ROOT
from .notebook import with_cells

__all__ = ["Attack", "LESSONS", "attacks", "run"]

LESSONS = ("00_setup", "02_naive_hbm_loops")


@dataclass
class Attack:
    name: str
    what: str
    cells: dict  # lesson -> {grade_id: source}, on top of the release
    expect: dict  # lesson -> {"interpreter": score, "gpu": score}; a score may be a tuple of the scores accepted
    why: str = ""  # a regex one of its failed cells' messages must match (the reason it scores what it does)
    why_gpu: str = ""  # the same on a GPU, where it differs
    # a speed cell (grade id) whose timing must show the work done when a score above the lowest accepted is given:
    # at least a quarter of the baseline's time (a kernel that skipped its work takes about a launch)
    timed: str = ""


def _both(score: float, gpu: float | tuple | None = None) -> dict:
    return {"interpreter": score, "gpu": score if gpu is None else gpu}


def _forged(result, grade_id: str) -> str:
    """Why the timing of speed cell ``grade_id`` in ``result`` does not show the work done ("" when it does)."""
    perfs = [ch.perf for c in result.cells if c.grade_id == grade_id for ch in c.checks if ch.perf]
    timed = [p for p in perfs if p.get("student_ms") and p.get("baseline_ms")]
    if not timed:
        return f"{grade_id} passed without a timing in its result"
    p = timed[0]
    if p["student_ms"] < p["baseline_ms"] / 4:
        return (f"{grade_id} timed {p['student_ms']:.4f} ms, under a quarter of the baseline's {p['baseline_ms']:.4f}: "
                "the timed launches skipped the work")
    return ""


_ADD_HEAD = '''@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
'''
_ADD_STORE = ("    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), "
              "mask=mask)")
_ADD = _ADD_HEAD + _ADD_STORE + "\n"

# each runs other code under the interpreter than the sm_90 compile sees, or runs Python from the kernel body
_KERNEL_TRICKS = {
    "handle_branch": ("branches on the interpreter's tensor handle: an honest body for the compiler, numpy on the "
                      "handles under the interpreter",
                      _ADD_HEAD + "    if hasattr(x_ptr.handle, 'data'):\n"
                      "        out_ptr.handle.data[:] = x_ptr.handle.data + y_ptr.handle.data\n"
                      "    else:\n" + _ADD_STORE.replace("    ", "        ", 1) + "\n"),
    "builtins_call": ("runs torch from the kernel body through Triton's builtins",
                      _ADD_HEAD + "    tl.core.builtins.print(x_ptr)\n" + _ADD_STORE + "\n"),
    "interpreter_flag": ("asks Triton whether it is interpreting",
                         _ADD_HEAD + "    if triton.runtime.interpreter.InterpretedFunction is not None:\n"
                         "        pass\n" + _ADD_STORE + "\n"),
    "knobs": ("reads Triton's knobs (the interpreter flag among them)",
              _ADD_HEAD + "    flag = triton.knobs.runtime\n" + _ADD_STORE + "\n"),
    "import_in_kernel": ("imports torch inside the kernel", _ADD_HEAD + "    import torch\n" + _ADD_STORE + "\n"),
    "getattr_by_name": ("reaches the handle by a name built at run time",
                        _ADD_HEAD + "    h = getattr(x_ptr, 'han' + 'dle')\n" + _ADD_STORE + "\n"),
}

_NAIVE_OK = "    return B * T * H * (2 * K + 2 * V) * itemsize + B * H * K * V * 4 * (1 + 2 * T)"
_FUSED_OK = "    return B * T * H * (2 * K * -(-V // BV) + 2 * V) * itemsize + B * H * K * V * 4"
_BYTES = '''def naive_bytes(B, T, H, K, V, itemsize):
{pre}{naive}


def fused_bytes(B, T, H, K, V, itemsize, BV):
{pre}{fused}
'''


def _bytes(pre: str = "", naive: str = _NAIVE_OK, fused: str = _FUSED_OK) -> str:
    return _BYTES.format(pre=pre, naive=naive, fused=fused)


_REF = "kernels.checks.lessons.l02_naive" + "_hbm_loops"
# each tries to compute the answer with the package's own reference instead of writing the function
_FUNCTION_TRICKS = {
    "reference_import": ("imports the lesson's reference by a name built at run time",
                         _bytes(naive=f"    m = __import__('{_REF[:8]}' + '{_REF[8:]}', fromlist=['x'])\n"
                                      "    return m._count_reference(B, T, H, K, V, itemsize, 64)[0]",
                                fused=f"    m = __import__('{_REF[:8]}' + '{_REF[8:]}', fromlist=['x'])\n"
                                      "    return m._count_reference(B, T, H, K, V, itemsize, BV)[1]")),
    "frame_walk": ("walks up the call stack to the exercise's module and its reference",
                   _bytes(pre="    import sys\n    f = sys._getframe(1)\n    while f is not None and "
                              "'_count_reference' not in f.f_globals:\n        f = f.f_back\n"
                              "    ref = f.f_globals['_count_reference']\n",
                          naive="    return ref(B, T, H, K, V, itemsize, 64)[0]",
                          fused="    return ref(B, T, H, K, V, itemsize, BV)[1]")),
    "gc_hunt": ("searches the garbage collector's objects for the reference function",
                _bytes(pre="    import gc, types\n    ref = next((o for o in gc.get_objects() if isinstance(o, "
                           "types.FunctionType) and o.__name__ == '_count_reference'), None)\n"
                           "    if ref is None:\n        raise LookupError('no reference in memory')\n",
                       naive="    return ref(B, T, H, K, V, itemsize, 64)[0]",
                       fused="    return ref(B, T, H, K, V, itemsize, BV)[1]")),
    "exec_base64": ("execs a base64-encoded import of the reference",
                    _bytes(pre="    import base64\n    ns = {}\n    exec(base64.b64decode(" + repr(
                        __import__("base64").b64encode(f"from {_REF} import _count_reference as ref".encode())
                        .decode()) + "), ns)\n    ref = ns['ref']\n",
                        naive="    return ref(B, T, H, K, V, itemsize, 64)[0]",
                        fused="    return ref(B, T, H, K, V, itemsize, BV)[1]")),
    "read_solutions": ("reads the instructor's solutions, the collect folder and other students' notebooks",
                       _bytes(pre="    import glob, re\n    text, ns = '', {}\n"
                                  f"    for p in glob.glob('{_ROOT}/solutions/02_*.py') + glob.glob('/work/*/solutions/"
                                  "02_*.py') + glob.glob('/work/*/*/solutions/02_*.py') + glob.glob('/tmp/*/*/*.ipynb')"
                                  " + glob.glob('/tmp/*/*/*/*.ipynb'):\n"
                                  "        try:\n            text += open(p).read()\n        except OSError:\n"
                                  "            pass\n"
                                  "    for m in re.finditer(r'def (naive|fused)_bytes[(].*?### END SOLUTION', text, "
                                  "re.S):\n        try:\n            exec(m.group(0), ns)\n"
                                  "        except SyntaxError:\n            pass\n"
                                  "    if 'fused_bytes' not in ns:\n        raise RuntimeError('nothing readable')\n",
                              naive="    return ns['naive_bytes'](B, T, H, K, V, itemsize)",
                              fused="    return ns['fused_bytes'](B, T, H, K, V, itemsize, BV)")),
    "huge_result": ("returns 20 MiB instead of an int (once took the grader to 3 GiB)",
                    _bytes(naive="    return 'x' * (20 << 20)")),
}


_KERNEL_WHY = {"handle_branch": r"uses `\.handle`", "builtins_call": "uses `builtins`",
               "interpreter_flag": "interpreter", "knobs": "knobs|triton.runtime", "import_in_kernel":
               "imports inside a kernel", "getattr_by_name": "getattr with a name built at run time"}
_FUNCTION_WHY = {"reference_import": "No module named 'kernels.checks.lessons'", "frame_walk": "f_globals",
                 "gc_hunt": "no reference in memory", "exec_base64": "No module named 'kernels.checks.lessons'",
                 "read_solutions": "nothing readable", "huge_result": "MiB, more than the 8.0 MiB allowed"}


def _solution_cell(lesson: str, grade_id: str) -> str:
    """The instructor's answer cell, its solution markers dropped (the starting point of the timing attacks)."""
    from .course import SOLUTIONS, source_text
    from .percent import read_percent

    nb = read_percent(source_text(SOLUTIONS / f"{lesson}.py"))
    cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)
    src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    return "\n".join(ln for ln in src.splitlines() if "### BEGIN SOLUTION" not in ln and "### END SOLUTION" not in ln)


def _edit(text: str, old: str, new: str) -> str:
    if old not in text:
        raise RuntimeError(f"the red-team edit expects {old!r} in the solution it starts from")
    return text.replace(old, new, 1)


_LOOP = "    for _ in range(T):\n"


def _timing_attacks() -> dict:
    """Kernels that try to forge their time (GPU): honest everywhere but the timed launches. ``first_launch_only``
    keeps a flag just before its output (a place the re-poisoning before each timed launch does not reach) and
    skips the work once it is set; ``skip_if_filled`` skips the work when its output already holds numbers."""
    fused = _solution_cell("02_naive_hbm_loops", "fused_kernel") + "\n"
    first = _edit(fused, _LOOP, "    flag = tl.load(o_ptr - 1, mask=T >= 1024, other=0.0)\n"
                                "    steps = tl.where(flag == 1.0, 0, T)\n    for _ in range(steps):\n")
    first += "    tl.store(o_ptr - 1, 1.0, mask=(T >= 1024) & (j == 0) & (bh == 0))\n"
    filled = _edit(fused, _LOOP, "    held = tl.load(o_ptr + b * stride_vb + h * stride_vh + offs_v, mask=mask_v, "
                                 "other=0.0)\n"
                                 "    steps = tl.where(tl.sum(((held == held) & mask_v).to(tl.int32), axis=0) > 0, 0, "
                                 "T)\n    for _ in range(steps):\n")
    return {"first_launch_only": first, "skip_if_filled": filled}


def attacks() -> list[Attack]:
    full_bytes = 2.0
    out = [
        Attack("control_kernel", "the honest vector add in the attacks' scaffolding",
               {"00_setup": {"add_kernel": _ADD}},
               {"00_setup": _both(4.0)}),
        Attack("control_bytes", "the honest byte counts in the attacks' scaffolding",
               {"02_naive_hbm_loops": {"byte_counts": _bytes()}}, {"02_naive_hbm_loops": _both(full_bytes)}),
        Attack("magic_capture", "correct kernel in a %%capture cell",
               {"00_setup": {"add_kernel": "%%capture\n" + _ADD}},
               {"00_setup": _both(4.0)}),
        Attack("magic_time", "correct kernel in a %%time cell", {"00_setup": {"add_kernel": "%%time\n" + _ADD}},
               {"00_setup": _both(4.0)}),
        Attack("aliased_import", "correct kernel whose body uses `import triton.language as T` (Triton's interpreter "
               "knows a constexpr parameter only by the spelling `tl.constexpr`)",
               {"00_setup": {"add_kernel": "import triton.language as T\n\n\n" + _ADD.replace("tl.", "T.").replace(
                   "BLOCK_SIZE: T.constexpr", "BLOCK_SIZE: tl.constexpr")}},
               {"00_setup": _both(4.0)}),
        Attack("string_annotation", "correct kernel in a cell with `from __future__ import annotations` (every "
               "annotation a string)",
               {"00_setup": {"add_kernel": "from __future__ import annotations\n\n\n" + _ADD}},
               {"00_setup": _both(4.0)}),
        Attack("shm_persist", "correct byte counts that turn wrong if another process left a file in /dev/shm or "
               "/tmp (a sandbox shared between problems)",
               {"02_naive_hbm_loops": {"byte_counts": _bytes(pre=(
                   "    import os\n    for p in ('/dev/shm/mark', '/tmp/mark'):\n"
                   "        if os.path.exists(p) and open(p).read() != str(os.getpid()):\n            return -1\n"
                   "        open(p, 'w').write(str(os.getpid()))\n"
                   "    if not os.path.exists('/dev/shm/fill'):\n"
                   "        open('/dev/shm/fill', 'wb').write(b'x' * (60 << 20))\n"))}},
               {"02_naive_hbm_loops": _both(full_bytes)}),
    ]
    for name, (what, src) in _KERNEL_TRICKS.items():
        out.append(Attack(name, what, {"00_setup": {"add_kernel": src}}, {"00_setup": _both(0.0)},
                          why=_KERNEL_WHY[name]))
    for name, (what, src) in _FUNCTION_TRICKS.items():
        out.append(Attack(name, what, {"02_naive_hbm_loops": {"byte_counts": src}},
                          {"02_naive_hbm_loops": _both(0.0)}, why=_FUNCTION_WHY[name]))
    timing = _timing_attacks()
    out.append(Attack("first_launch_only", "the fused kernel does its work on the first launch at the timed size and "
                      "skips it later (a flag kept beside its output between launches)",
                      {"02_naive_hbm_loops": {"fused_kernel": timing["first_launch_only"]}},
                      {"02_naive_hbm_loops": _both(7.0, 5.0)},  # untimed in the interpreter
                      why_gpu="skips work while timed|out of bounds while timed"))
    out.append(Attack("skip_if_filled", "the fused kernel skips its work when its output already holds numbers "
                      "(outputs left filled between timed launches would time nothing): every timed launch starts "
                      "from poisoned outputs, so it does the work and no time is forged; on a GPU its check of the "
                      "output may cost it the speed requirement, which depends on the card (1.6x the naive kernel on "
                      "the H200: 5 points, too slow; over the 2x asked on the H100: 7, earned with the work done)",
                      {"02_naive_hbm_loops": {"fused_kernel": timing["skip_if_filled"]}},
                      {"02_naive_hbm_loops": _both(7.0, (5.0, 7.0))}, why_gpu="too slow", timed="check_fused_speed"))
    naive = _UNIVERSAL_NAIVE
    out.append(Attack("universal", "every kernel and function of both lessons reaches around the grader (the "
                      "handle branch for kernels, the reference by import, frames and gc for functions, the checks "
                      "patched at the top)",
                      {"00_setup": {"add_kernel": _KERNEL_TRICKS["handle_branch"][1],
                                    "add_bias_kernel": _UNIVERSAL_BIAS},
                       "02_naive_hbm_loops": {"naive_kernel": naive, "fused_kernel": naive.replace("naive_kernel",
                                                                                                   "fused_kernel"),
                                              "byte_counts": _FUNCTION_TRICKS["frame_walk"][1],
                                              "setup": _UNIVERSAL_SETUP}},
                      {"00_setup": _both(0.0), "02_naive_hbm_loops": _both(0.0)}))
    return out


_UNIVERSAL_BIAS = '''@triton.jit
def add_bias_kernel(x_ptr, bias_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_N: tl.constexpr):
    if hasattr(x_ptr, "handle"):
        tl.core.builtins.exec("import torch")
'''
_UNIVERSAL_NAIVE = '''@triton.jit
def naive_kernel(q_ptr, k_ptr, v_ptr, o_ptr, s_ptr, scale, T, H, K, V, BK: tl.constexpr, BV: tl.constexpr):
    if triton.knobs.runtime.interpret:
        import torch
'''
_UNIVERSAL_SETUP = '''import kernels
import torch
import triton
import triton.language as tl
from kernels.checks import check
from kernels.device import DEVICE, ON_GPU, sizes
from kernels.testing import randn
try:
    import kernels.checks.engine as ke
    ke.verdict = lambda *a, **k: []
    ke.run_case = lambda *a, **k: ({}, {})
except ImportError:
    pass
'''


def run(*, only: list[str] | None = None, report: pathlib.Path | None = None, slots: int = 1,
        progress: bool = False) -> dict:
    """Grade the red-team class; returns (and writes to ``report``) the scores, the mismatches and the time."""
    from kernels.device import MODE, ON_GPU

    from .collect import Submission
    from .demo import course_lessons
    from .grade import Grader, Settings
    from .run import grade_class, table

    t0 = time.time()
    lessons = course_lessons(list(LESSONS))
    klass = [a for a in attacks() if only is None or a.name in only]
    subs, expected = [], {}
    for a in klass:
        for lesson, cells in a.cells.items():
            source, rel = lessons[lesson]
            subs.append(Submission(a.name, lesson, with_cells(rel, **cells), []))
            expected[(a.name, lesson)] = a.expect[lesson]["gpu" if ON_GPU else "interpreter"]
    grader = Grader(Settings(warm_lessons=tuple(sorted({s.lesson for s in subs}))))
    built = time.time() - t0
    results = grade_class(grader, subs, {k: v[0] for k, v in lessons.items()}, {k: v[1] for k, v in lessons.items()},
                          slots=slots, progress=progress)
    grader.sandbox.close()
    import re

    why = {a.name: (a.why_gpu if ON_GPU and a.why_gpu else a.why) for a in klass}
    timed = {a.name: a.timed for a in klass}
    mismatches = []
    shown = {}  # for the table, which marks a score not accepted (with several accepted, naming the first)
    for r in results:
        failed = [c.message for c in r.cells if c.score < c.points]
        want = expected[(r.student, r.lesson)]
        accepted = want if isinstance(want, tuple) else (want,)
        wrong = not any(abs(r.score - w) <= 1e-9 for w in accepted)
        shown[(r.student, r.lesson)] = accepted[0] if wrong else r.score
        # a reason is asked of the lowest score accepted (a higher one accepted has lost no points for it)
        lowest = min(accepted)
        reason = why[r.student] and abs(r.score - lowest) <= 1e-9 and not any(
            re.search(why[r.student], m) for m in failed)
        forged = _forged(r, timed[r.student]) if ON_GPU and timed[r.student] and r.score > lowest + 1e-9 else ""
        if wrong or reason or forged:
            mismatches.append({"student": r.student, "lesson": r.lesson, "score": r.score, "want": want,
                               "want_reason": why[r.student] if reason else "", "forged": forged,
                               "messages": [m[:400] for m in failed][:4]})
    summary = {"mode": MODE, "seconds": time.time() - t0, "setup_s": built,
               "scores": {f"{r.student}/{r.lesson}": r.score for r in results},
               "messages": {f"{r.student}/{r.lesson}": {c.grade_id: c.message[:400] for c in r.cells
                                                                     if c.score < c.points}
                            for r in results},
               "mismatches": mismatches, "table": table(results, shown, MODE)}
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(summary, indent=1, default=str) + "\n")
    return summary
