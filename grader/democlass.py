"""The demo class: one submission per fault and attack the grader must withstand, with the score each must get.

Every student but two submits the grader's fixture lesson (``grader/fixture_lesson/90_grader_fixture.py``: a
kernel, a strided kernel, a torch function and a value with a GPU speed requirement; 13 points), changed in one
way. ``solution`` submits every lesson's solution and must score 100%; ``release`` submits every untouched
student notebook and must score 0; the ``zoo_*`` students each submit one course lesson with a wrong answer from
the zoo (``grader/zoo``). Expected scores are per mode, because some cases only exist on a GPU (a hung
kernel is an infinite loop in the interpreter; a race that the interpreter, running one program at a time,
hides; speed requirements, which the interpreter reports as not graded).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import time
from dataclasses import dataclass, field

from .layout import ROOT as _ROOT
from .notebook import with_cells
from .percent import read_percent, release

__all__ = ["FIXTURE", "DemoStudent", "students", "fixture_notebooks", "write_class", "SELECTIONS", "select"]

FIXTURE = _ROOT / "grader" / "fixture_lesson"
LESSON = "90_grader_fixture"
FULL = 13.0
SPEED = 3.0  # the fixture's speed cell (ex4-check): without a GPU it scores 0 under the default speed policy


@dataclass
class DemoStudent:
    name: str
    what: str
    lessons: dict  # lesson -> "solution" | "release" | callable(solution, release) -> notebook | bytes | None
    expect: dict  # lesson -> {"interpreter": score, "gpu": score}
    gpu_only: bool = False
    files: dict = field(default_factory=dict)  # extra file name -> bytes
    lms: bool = False  # hands in through the LMS download of the term scenarios (term_batches), not the folder


def fixture_notebooks() -> tuple[dict, dict]:
    """(instructor source, student release) of the fixture lesson."""
    src = read_percent((FIXTURE / f"{LESSON}.py").read_text())
    return src, release(src)


_SCALE = '''@triton.jit
def scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
{body}'''
_STORE = "    tl.store(out_ptr + offs, (x.to(tl.float32) * alpha).to(out_ptr.dtype.element_ty), mask=mask)"
_CUMSUM = '''def cumsum(x):
{body}
    n = x.shape[-1]
    return x @ torch.ones(n, n, dtype=x.dtype, device=x.device).triu()'''


def _scale(body: str) -> dict:
    return {"ex1-kernel": _SCALE.format(body=body)}


def _cumsum(body: str) -> dict:
    return {"ex3-fn": _CUMSUM.format(body=body)}


_PATCH = '''import builtins, sys
import numpy, torch
import kernels.checks as kc
import kernels.checks.engine as ke
import kernels.checks.spec as ks
kc.check = ke.check = lambda *a, **k: None
ke.verdict = lambda *a, **k: []
ke.perf_verdict = lambda *a, **k: []
torch.allclose = numpy.allclose = lambda *a, **k: True
torch.Tensor.__sub__ = lambda a, b: a * 0
for ex in list(ks._REGISTRY.values()):
    object.__setattr__(ex, "reference", lambda inputs, case: {})
try:
    get_ipython().input_transformers_post.append(lambda lines: [ln.replace("check(", "print(") for ln in lines])
except NameError:
    pass
sys.modules["kernels.checks"].check = print
BLOCK = dict(BLOCK=1024)'''

_SECRETS = '''def cumsum(x):
    import glob, re
    seen, readable = [], []
    for pattern in ("/work/main/solutions/*", "/work/main/grader/**/*", "/work/main/grader/fixture_lesson/*",
                    "/work/main/.git/*", "/tmp/grader-sandbox-*/**/*", "/root/*", "/work/*/solutions/*",
                    "ROOT/**/*"):
        seen += glob.glob(pattern, recursive=True)
    for path in seen:
        try:
            text = open(path).read()
        except (OSError, UnicodeDecodeError):
            continue
        readable.append(path)
        m = re.search(r"def cumsum\\(x\\):\\n(.*?)### END SOLUTION", text, re.S)
        if m:
            ns = {"torch": torch}
            exec("def cumsum(x):\\n" + m.group(1), ns)
            return ns["cumsum"](x)
    for path in seen:
        try:
            open(path, "a").write("graded: 100")
        except OSError:
            pass
    raise RuntimeError(f"no solution found ({len(seen)} seen, {len(readable)} readable)")'''.replace("ROOT", str(_ROOT))

_LEFTOVER = '''import os, subprocess, sys, time, glob
subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(0.2)"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while True:
            for p in glob.glob("/tmp/grader-sandbox-*/**/*", recursive=True):
                try:
                    open(p, "a").write("tampered")
                except OSError:
                    pass
            time.sleep(0.1)
    os._exit(0)
BLOCK = dict(BLOCK=1024)'''

_FLOOD = "    print('y' * 20_000_000)\n    print('z' * 20_000_000, file=__import__('sys').stderr)"
_NOISE = '''import sys, warnings
print("noise on stderr", file=sys.stderr)
warnings.warn("a warning from a correct solution")
print("x" * 3_000_000)
BLOCK = dict(BLOCK=1024)'''


def _both(score: float, gpu: float | None = None) -> dict:
    return {"interpreter": score, "gpu": score if gpu is None else gpu}


def _sped(score: float, gpu: float | None = None) -> dict:
    """The fixture's speed cell passed: under the interpreter it scores 0 (speed policy zero)."""
    return {"interpreter": score - SPEED, "gpu": score if gpu is None else gpu}


def students(real_lessons: dict[str, float], speed: dict[str, float] | None = None) -> list[DemoStudent]:
    """The demo class. ``real_lessons``: course lesson id -> its total points; ``speed``: -> its speed cells'
    points (which score 0 without a GPU under the default speed policy)."""
    fx = LESSON
    speed = speed or {}
    full = {lesson: {"interpreter": pts - speed.get(lesson, 0.0), "gpu": pts} for lesson, pts in real_lessons.items()}
    zero = {lesson: _both(0.0) for lesson in real_lessons}
    sol = lambda **cells: (lambda s, r: with_cells(s, **cells))  # noqa: E731
    rel = lambda **cells: (lambda s, r: with_cells(r, **cells))  # noqa: E731
    out = [
        DemoStudent("solution", "every lesson's solution", {**{k: "solution" for k in real_lessons},
                                                            fx: "solution"}, {**full, fx: _sped(FULL)}),
        DemoStudent("release", "every untouched student notebook", {**{k: "release" for k in real_lessons},
                                                                    fx: "release"}, {**zero, fx: _both(0.0)}),
        DemoStudent("compile_error", "kernel does not compile for sm_90 (tl.arange(0, 100)), which the "
                    "interpreter accepts", {fx: sol(**{"ex1-kernel": _SCALE.format(body="").replace(
                        "tl.arange(0, BLOCK)", "tl.arange(0, 100)") + "    x = tl.load(x_ptr + offs, mask=mask)\n"
                        + _STORE})}, {fx: _both(6.0)}),
        DemoStudent("exception", "the torch function raises", {fx: sol(**_cumsum("    raise ValueError('my bug')"))},
                    {fx: _sped(11.0)}),
        DemoStudent("python_loop", "infinite Python loop in the function on the visible case (4x7); the worker "
                    "killed, the hidden cases pass in a fresh one",
                    {fx: sol(**_cumsum("    while x.shape[-1] == 7:\n        pass"))}, {fx: _sped(12.0)}),
        DemoStudent("gpu_hang", "kernel that never ends (on a GPU: SIGINT cannot stop it)",
                    {fx: sol(**_scale("    x = tl.load(x_ptr + offs, mask=mask)\n"
                                      "    while tl.load(x_ptr, volatile=True) == tl.load(x_ptr, volatile=True):\n"
                                      "        x += 0\n" + _STORE))}, {fx: _both(6.0)}),
        DemoStudent("os_exit", "a cell calls os._exit", {fx: sol(**{"ex3-fn": "import os\nos._exit(3)\n"
                                                                   + _CUMSUM.format(body="")})},
                    {fx: _sped(11.0)}),
        DemoStudent("segfault", "the function segfaults", {fx: sol(**_cumsum("    import ctypes\n"
                                                                             "    ctypes.string_at(0)"))},
                    {fx: _sped(11.0)}),
        DemoStudent("illegal_address", "kernel loads far outside its inputs (GPU: illegal address; interpreter: "
                    "a wild host pointer)", {fx: sol(**_scale("    x = tl.load(x_ptr + offs + (1 << 40), mask=mask)\n"
                                                              + _STORE))}, {fx: _both(6.0)}),
        DemoStudent("host_oom", "the function allocates without bound", {fx: sol(**_cumsum(
            "    hog = []\n    while True:\n        hog.append(torch.ones(1 << 27))"))}, {fx: _sped(11.0)}),
        DemoStudent("gpu_oom", "the function allocates 16 TiB on the device",
                    {fx: sol(**_cumsum("    torch.empty(1 << 42, device=x.device)"))}, {fx: _sped(11.0)}),
        DemoStudent("empty_kernel", "kernel writes nothing (memory reused from a freed reference would pass "
                    "a check that allocates with torch.empty)", {fx: sol(**_scale("    pass"))}, {fx: _both(6.0)}),
        DemoStudent("torch_in_kernel", "kernel body calls torch", {fx: sol(**_scale(
            "    x = tl.load(x_ptr + offs, mask=mask)\n    tl.store(out_ptr + offs, torch.mul(x, alpha), mask=mask)"))},
                    {fx: _both(6.0)}),
        DemoStudent("imported_kernel", "the graded kernel is a package kernel", {fx: sol(**{
            "ex1-kernel": "from kernels.memory.copy import _copy_memory_kernel as scale_kernel"})}, {fx: _both(6.0)}),
        DemoStudent("method_cumsum", "the function returns torch's own answer (x.cumsum)",
                    {fx: sol(**{"ex3-fn": "def cumsum(x):\n    return x.cumsum(-1)"})}, {fx: _sped(11.0)}),
        DemoStudent("patch_everything", "patches the checker, torch, numpy, the references and IPython's input",
                    {fx: rel(**{"ex4-block": _PATCH})}, {fx: _both(0.0)}),
        DemoStudent("read_secrets", "reads solutions, hidden tests, the gradebook, other sandboxes",
                    {fx: rel(**{"ex3-fn": _SECRETS})}, {fx: _both(0.0)}),
        DemoStudent("leftover_processes", "leaves daemons that try to tamper with other students' files",
                    {fx: rel(**{"ex4-block": _LEFTOVER})}, {fx: _both(0.0)}),
        DemoStudent("noisy", "correct, with warnings, stderr and 60 MB of output",
                    {fx: sol(**{"ex4-block": _NOISE, "ex3-fn": _CUMSUM.format(body=_FLOOD)})},
                    {fx: _sped(FULL)}),
        DemoStudent("edited_tests", "graded cells edited, one deleted, one stripped of its metadata",
                    {fx: _edited_tests}, {fx: _sped(FULL)}),
        DemoStudent("malformed_json", "notebook is not valid JSON", {fx: lambda s, r: b'{"cells": [ oops'},
                    {fx: _both(0.0)}),
        DemoStudent("missing_notebook", "submits nothing", {}, {fx: _both(0.0)}),
        DemoStudent("renamed_notebook", "notebook renamed, plus an extra file",
                    {fx: "solution"}, {fx: _sped(FULL)}, files={"rename": f"{fx} (1).ipynb",
                                                                "extra.ipynb": b'{"cells": []}'}),
        DemoStudent("new_nbformat", "notebook claims nbformat 4.99", {fx: _new_format}, {fx: _sped(FULL)}),
        DemoStudent("race", "accumulates with a plain read-modify-write: the interpreter runs programs one at a "
                    "time and hides the race; a GPU loses updates", {fx: sol(**{"ex2-kernel": _RACE})},
                    {fx: _sped(FULL, 11.0)}, gpu_only=True),
        DemoStudent("slow", "correct but 32 redundant loads per element: fails the speed requirement on a GPU",
                    {fx: sol(**_scale(_SLOW))}, {fx: _sped(FULL, 10.0)}, gpu_only=True),
        DemoStudent("skip_work", "skips the work at large sizes: wrong at the timed size, faster than the floor",
                    {fx: sol(**_scale("    mask = mask & (n < 10_000_000)\n    x = tl.load(x_ptr + offs, mask=mask)\n"
                                      + _STORE))}, {fx: _sped(FULL, 10.0)}, gpu_only=True),
    ]
    return out + _zoo_students(real_lessons, speed)


# A sample of the zoo (grader/zoo, where CI grades every entry): each student submits one lesson, the
# solution with one or two cells replaced by zoo answers. (student, lesson, {cell: zoo answer or source}, points
# lost in the interpreter and on a GPU, what it shows). A student who loses points on a GPU only is graded there
# only: under the interpreter the lesson would cost its grading time to show a full score.
_ZOO = [
    ("zoo_copy_off_by_one", "01_memory_hierarchy",
     {"copy_kernel": ("01_memory_hierarchy.copy", "fast-path-off-by-one")}, (6, 6),
     "unmasked fast path taking a block one element short: out of bounds, in the copy and speed checks"),
    ("zoo_naive_padded_state", "02_naive_hbm_loops", {"naive_kernel": ("02_naive_hbm_loops.naive", "padded-state")},
     (5, 5), "state addressed as a padded [BH, BK, BV] block: a message, not a crashed worker"),
    ("zoo_tile_choice_cheat", "03_tiled_sram",
     {"ex1-tiled": ("03_tiled_sram.tile_choice", "small-tiles-skip-filled"),
      "ex3-tiles": "TILES = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=1, num_warps=4, num_stages=1)"},
     (0, 3), "skips tiles whose output already holds a number: timed on re-poisoned outputs, too slow on a GPU"),
]


# zoo students whose answer also fails the lesson's speed cell (so the speed policy takes nothing more)
_SPEED_CELL_FAILS = {"zoo_copy_off_by_one"}


def _zoo_students(real_lessons: dict[str, float], speed: dict[str, float]) -> list[DemoStudent]:
    from kernels.device import ON_GPU

    from .zoo import entries

    answers = {(e.exercise, e.name): e.source for e in entries()}
    out = []
    for name, lesson, cells, (lost_cpu, lost_gpu), what in _ZOO:
        if lesson not in real_lessons or (lost_cpu == 0 and not ON_GPU):
            continue
        sources = {gid: v if isinstance(v, str) else answers[v] for gid, v in cells.items()}
        full = real_lessons[lesson]
        cpu = full - lost_cpu - (0 if name in _SPEED_CELL_FAILS else speed.get(lesson, 0))
        out.append(DemoStudent(name, f"zoo: {what}", {lesson: lambda s, r, c=sources: with_cells(s, **c)},
                               {lesson: _both(cpu, full - lost_gpu)}, gpu_only=lost_cpu == 0))
    return out


_RACE = '''@triton.jit
def row_sum_kernel(x_ptr, out_ptr, M, N, stride_m, stride_n, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_m + offs * stride_n, mask=offs < N, other=0.0)
    total = tl.load(out_ptr + row) + tl.sum(x.to(tl.float32), axis=0)
    tl.store(out_ptr + row, total)'''

_SLOW = '''    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for _ in range(32):
        acc += tl.load(x_ptr + offs, mask=mask, other=0.0, volatile=True).to(tl.float32)
    tl.store(out_ptr + offs, (acc * (alpha / 32)).to(out_ptr.dtype.element_ty), mask=mask)'''


def _edited_tests(source: dict, rel: dict) -> dict:
    nb = json.loads(json.dumps(source))
    cells = []
    for cell in nb["cells"]:
        nbg = cell.get("metadata", {}).get("nbgrader", {})
        gid = nbg.get("grade_id")
        if gid == "ex1-check":
            cell["source"] = "pass  # edited: no check here"
        elif gid == "ex2-check":
            continue
        elif gid == "ex3-check":
            cell["metadata"] = {}
            cell["source"] = "print('check removed')"
        cells.append(cell)
    nb["cells"] = cells
    return nb


def _new_format(source: dict, rel: dict) -> dict:
    nb = json.loads(json.dumps(source))
    nb["nbformat_minor"] = 99
    for cell in nb["cells"]:
        cell["future_field"] = {"from": "a newer Jupyter"}
    return nb


#: students whose fault the interpreter turns into another student's (``select``'s ``ci`` grades the other one)
_INTERPRETER_TWINS = {"gpu_hang": "python_loop"}

#: Named parts of the class (``select``); ``all``, the default of ``python -m grader demo``, is the whole class.
SELECTIONS = ("all", "ci")


def select(klass: list[DemoStudent], selection: str = "all") -> list[DemoStudent]:
    """The students of ``selection``. ``ci`` (``make test``, on 2 CPU cores): every fixture student, ``solution``,
    ``release`` and the term's students, and of the zoo students only the first (in ``_ZOO``'s order) of each course
    lesson: every zoo answer is graded by tests/checks/test_zoo.py, and one per lesson shows the grader taking a
    real lesson's points off. Under the interpreter it leaves out the GPU-only students too, which score what
    ``solution`` does there (a full fixture notebook) and show nothing the fixture's own students do not, and
    ``gpu_hang``, whose kernel is an infinite Python loop there: ``python_loop``'s fault, stopped by the same
    problem timeout, which it waits out three times (its kernel serves three checks), the class's largest cost."""
    if selection not in SELECTIONS:
        raise ValueError(f"unknown demo selection {selection!r}: one of {', '.join(SELECTIONS)}")
    if selection == "all":
        return list(klass)
    from kernels.device import ON_GPU

    zoo = {name: lesson for name, lesson, *_ in _ZOO}
    seen: set[str] = set()
    out = []
    for st in klass:
        if st.name in zoo:
            if zoo[st.name] in seen:
                continue
            seen.add(zoo[st.name])
        elif not ON_GPU and (st.gpu_only or st.name in _INTERPRETER_TWINS):
            continue
        out.append(st)
    return out


def write_class(folder: pathlib.Path, lessons: dict[str, tuple[dict, dict]], klass: list[DemoStudent]) -> None:
    """Write each student's notebooks to ``folder/<student>/<lesson>.ipynb`` (the folder-of-notebooks layout)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)  # also when every student hands in through the LMS download
    for st in klass:
        if st.lms:
            continue
        d = folder / st.name
        d.mkdir(parents=True)
        for lesson, how in st.lessons.items():
            source, rel = lessons[lesson]
            if how == "solution":
                nb = source
            elif how == "release":
                nb = rel
            else:
                nb = how(source, rel)
            data = nb if isinstance(nb, bytes) else json.dumps(nb, indent=1).encode()
            name = st.files.get("rename", f"{lesson}.ipynb") if lesson == LESSON else f"{lesson}.ipynb"
            (d / name).write_bytes(data)
        for name, data in st.files.items():
            if name != "rename":
                (d / name).write_bytes(data)
    os.chmod(folder, 0o700)


# ---- a term: later collect batches, an LMS download with a roster, a due date (lesson 00 only: cheap to grade) ----
TERM_LESSON = "00_setup"
LATE_PERCENT = 10.0  # grader/nbgrader_config.py: PerDayPenalty.percent_per_day


def term_students(real_lessons: dict[str, float]) -> list[DemoStudent]:
    """Students of the term scenarios (see :func:`term_batches`); needs lesson 00 and nbgrader."""
    if TERM_LESSON not in real_lessons:
        return []
    full = real_lessons[TERM_LESSON]
    return [
        DemoStudent("dave", "two collect batches: the second holds only a newer copy of his fixture notebook; his "
                    "00_setup from the first is kept", {TERM_LESSON: "solution", LESSON: "release"},
                    {TERM_LESSON: _both(full), LESSON: _both(0.0)}),
        DemoStudent("alice", "Canvas download (smithalice_1001_..._00_setup.ipynb, then the resubmission copy -1: "
                    "the newest wins), mapped to her id by the roster", {}, {TERM_LESSON: _both(full)}, lms=True),
        DemoStudent("lucy", "Canvas download, handed in 2 hours after the due date: 10% off in the gradebook",
                    {}, {TERM_LESSON: _both(full)}, lms=True),
    ]


def term_batches(work: pathlib.Path, lessons: dict[str, tuple[dict, dict]], incoming: pathlib.Path,
                 now: float) -> dict:
    """Date the first batch (``incoming``) two days before the due date ``now - 1 day``, write the second batch
    (dave's fixture notebook again, edited: newer) and a Canvas zip with a roster; returns what to collect and
    expect."""
    import zipfile

    due = now - 86400
    for p in incoming.rglob("*"):
        os.utime(p, (due - 2 * 86400, due - 2 * 86400))
    source, rel = lessons[TERM_LESSON]
    second = work / "incoming-2"
    if second.exists():
        shutil.rmtree(second)
    (second / "dave").mkdir(parents=True)
    fx_rel = json.loads(json.dumps(lessons[LESSON][1]))
    fx_rel["cells"][0]["source"] = "".join(fx_rel["cells"][0]["source"]) + "\n\n(my second try)"
    (second / "dave" / f"{LESSON}.ipynb").write_text(json.dumps(fx_rel, indent=1))
    os.utime(second / "dave" / f"{LESSON}.ipynb", (due - 86400, due - 86400))
    roster = work / "roster.csv"
    # the term's students only: anyone else on it whom the class leaves out would be collected as missing
    roster.write_text("Student,ID,SIS Login ID\nSmith Alice,1001,alice\nJones Lucy,1003,lucy\nDoe Dave,2000,dave\n")
    archive = work / "canvas.zip"

    def entry(z, name, nb, when):
        z.writestr(zipfile.ZipInfo(name, date_time=time.gmtime(when)[:6]), json.dumps(nb, indent=1))

    with zipfile.ZipFile(archive, "w") as z:
        entry(z, f"smithalice_1001_55501_{TERM_LESSON}.ipynb", rel, due - 3 * 86400)
        entry(z, f"smithalice_1001_55502_{TERM_LESSON}-1.ipynb", source, due - 2 * 86400)
        entry(z, f"joneslucy_LATE_1003_55503_{TERM_LESSON}.ipynb", source, due + 7200)
        entry(z, f"phantom_9999_55504_{TERM_LESSON}.ipynb", source, due - 86400)
    return {"due": due, "second": second, "zip": archive, "roster": roster,
            "penalties": {("lucy", TERM_LESSON): 0.0}, "late_percent": LATE_PERCENT,
            "skipped": {f"smithalice_1001_55501_{TERM_LESSON}.ipynb": "is newer",
                        f"phantom_9999_55504_{TERM_LESSON}.ipynb": "not on the roster"}}
