"""Every lesson's widgets in JupyterLab in headless Chromium: run the notebook, move a slider of each view, and
check that its picture changes. Screenshots land in artifacts/browser/."""

from __future__ import annotations

import time

import pytest

from .conftest import ARTIFACTS
from .notebooks import LESSONS, build, lesson_source, widget_cells

pytestmark = pytest.mark.browser

RUN_TIMEOUT_S = 420  # the cells before a lesson's widgets run in the interpreter on a shared 2-core machine
CHANGE_TIMEOUT_S = 90


def _errors(page) -> list[str]:
    return page.locator('[data-mime-type="application/vnd.jupyter.stderr"], .jp-OutputArea-output '
                        '[data-mime-type="application/vnd.jupyter.error"]').all_inner_texts()


_IDLE = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  const busy = [...document.querySelectorAll('.jp-InputPrompt')].some(p => p.textContent.includes('*'));
  return !!k && k.status === 'idle' && !busy;
}"""


def _open_and_run(page, lab, name: str, expected: int, tag: str):
    page.goto(f"{lab.url}/lab/tree/{name}?reset&token={lab.token}")  # reset: no tabs from earlier tests
    try:
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    except Exception:
        page.screenshot(path=str(ARTIFACTS / f"{tag}_failed.png"), full_page=True)
        raise
    deadline = time.time() + 60
    while time.time() < deadline:  # the kernel must be connected before run-all
        dialog = page.locator(".jp-Dialog .jp-mod-accept")
        if dialog.count():
            dialog.first.click()
        if page.evaluate("() => { const w = window.jupyterapp.shell.currentWidget; "
                         "return !!(w && w.sessionContext && w.sessionContext.session && "
                         "w.sessionContext.session.kernel && w.sessionContext.session.kernel.connectionStatus "
                         "=== 'connected'); }"):
            break
        time.sleep(0.5)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    views = page.locator(".kw-view")
    deadline = time.time() + RUN_TIMEOUT_S
    idle_since = None
    while views.count() < expected:
        errs = [e for e in _errors(page) if "Traceback" in e or "Error" in e]
        idle = page.evaluate(_IDLE)
        idle_since = (idle_since or time.time()) if idle else None
        finished = idle_since is not None and time.time() - idle_since > 10  # every cell ran, views still missing
        if errs or finished or time.time() > deadline:
            page.screenshot(path=str(ARTIFACTS / f"{tag}_failed.png"), full_page=True)
            raise AssertionError(f"{tag}: {views.count()} of {expected} widget(s) rendered"
                                 + (f"; the notebook raised:\n{errs[0][-2000:]}" if errs else
                                    " after every cell ran (a view shows only as a cell's last expression, "
                                    "or through display(view))" if finished else f" after {RUN_TIMEOUT_S} s"))
        time.sleep(1)
    return views


def _move_and_compare(page, view, tag: str):
    image = view.locator("img.kw-view-image")
    image.scroll_into_view_if_needed()
    before = image.screenshot(path=str(ARTIFACTS / f"{tag}_before.png"))
    handle = view.locator(".noUi-handle").first
    handle.click()
    for _ in range(4):
        page.keyboard.press("ArrowRight")
    deadline = time.time() + CHANGE_TIMEOUT_S
    while True:
        time.sleep(0.5)
        after = image.screenshot()
        if after != before:
            break
        if time.time() > deadline:
            raise AssertionError(f"{tag}: the picture did not change within {CHANGE_TIMEOUT_S} s of moving the slider")
    time.sleep(1.0)  # let the last key's redraw land before the saved screenshot
    image.screenshot(path=str(ARTIFACTS / f"{tag}_after.png"))
    caption = view.locator(".kw-view-caption").inner_text()
    assert caption and "Error" not in caption, f"{tag}: {caption}"


def _drive(page, lab, cells: list[str], expected: int, tag: str):
    path = build(cells, lab.root / f"{tag}.ipynb")
    views = _open_and_run(page, lab, path.name, expected, tag)
    assert views.count() == expected, f"{tag}: {views.count()} views for {expected} widget cells"
    for i in range(expected):
        _move_and_compare(page, views.nth(i), f"{tag}_{i}")
    # the live widget replaces the static copy printed beside it
    statics = page.locator(".kw-static")
    assert statics.count() == expected and all(not statics.nth(i).is_visible() for i in range(expected))
    page.screenshot(path=str(ARTIFACTS / f"{tag}.png"), full_page=True)


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_widgets(lesson, lab, page):
    assert lesson_source(lesson).exists(), f"solutions/{lesson}.py is missing"
    cells, n = widget_cells(lesson)
    assert n, f"solutions/{lesson}.py has no cell tagged `widget`: every lesson shows at least one view"
    _drive(page, lab, cells, n, lesson)
