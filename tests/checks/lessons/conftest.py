"""``broken_outcomes``: the broken answers of every collected lesson test module (its ``BROKEN`` definitions, checked
as its ``EXPECT`` says), run once as one script in a subprocess, because the check engine grades objects defined at
the top level of ``__main__`` (a notebook); one JSON line per check: passed or not, and the message. The tests that
use it run on one pytest-xdist worker: the script compiles its kernels for sm_90 as a check does, about a minute on
2 cores, paid once per run, not once per worker."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from lessonkit import ROOT

HEADER = """
import json
import triton
import triton.language as tl
import kernels
from kernels.checks import check


def report(name, *args):
    try:
        check(*args)
        print(json.dumps({"name": name, "passed": True, "message": ""}))
    except Exception as e:
        print(json.dumps({"name": name, "passed": False, "message": f"{type(e).__name__}: {e}"}))
"""


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "broken_outcomes" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("broken_outcomes"))


def _script(module) -> str:
    """A lesson module's ``BROKEN`` definitions, then one ``report`` per answer of its ``EXPECT`` (name ->
    (exercise, the objects its check is given, words))."""
    return module.BROKEN + "".join(f"report({name!r}, {exercise!r}, {objects})\n"
                                   for name, (exercise, objects, _) in module.EXPECT.items())


@pytest.fixture(scope="session")
def broken_outcomes(request, tmp_path_factory):
    # the lesson modules' broken answers (a script each); other test modules may name a list BROKEN
    modules = {item.module.__name__: item.module for item in request.session.items
               if isinstance(getattr(getattr(item, "module", None), "BROKEN", None), str)}
    script = tmp_path_factory.mktemp("broken") / "broken_answers.py"
    script.write_text(textwrap.dedent(HEADER) + "".join(_script(modules[name]) for name in sorted(modules)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                          cwd=script.parent, timeout=900)
    lines = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return {d["name"]: d for d in lines}
