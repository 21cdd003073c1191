"""A JupyterLab server on a free localhost port with a token, and Debian's Chromium driven by Playwright.

The server runs from this checkout's environment with its own config, settings and workspace folders (the news
and update-check plugin disabled, the app exposed to the page so the test can run commands), in a temporary
notebook folder; ``PYTHONPATH`` points kernels at this checkout.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

CHROMIUM = "/usr/bin/chromium"
ROOT = pathlib.Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "browser"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    def __init__(self, url: str, token: str, root: pathlib.Path):
        self.url, self.token, self.root = url, token, root

    def api(self, method: str, path: str):
        req = urllib.request.Request(f"{self.url}{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self):
        for k in self.api("GET", "/api/kernels"):
            self.api("DELETE", f"/api/kernels/{k['id']}")


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} not found: `make test-browser` installs Debian's chromium (apt-get)")
    pytest.importorskip("playwright.sync_api", reason="playwright is a test dependency: pip install -e '.[test]'")
    base = tmp_path_factory.mktemp("lab")
    notebooks, config, settings, work = (base / d for d in ("notebooks", "config", "settings", "workspaces"))
    for d in (notebooks, config / "labconfig", settings / "@jupyterlab" / "apputils-extension", work):
        d.mkdir(parents=True)
    (config / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config), JUPYTERLAB_SETTINGS_DIR=str(settings),
               JUPYTERLAB_WORKSPACES_DIR=str(work), PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get(
                   "PYTHONPATH", "")]), MPLBACKEND="Agg")
    jupyter = shutil.which("jupyter", path=str(pathlib.Path(sys.executable).parent)) or "jupyter"
    log = open(base / "lab.log", "w")
    proc = subprocess.Popen([jupyter, "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
                             f"--IdentityProvider.token={token}", "--allow-root", f"--notebook-dir={notebooks}",
                             "--LabApp.expose_app_in_browser=True", "--ServerApp.port_retries=0"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    lab = Lab(url, token, notebooks)
    deadline = time.time() + 120
    while True:
        try:
            lab.api("GET", "/api/status")
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError(f"JupyterLab did not start: {(base / 'lab.log').read_text()[-3000:]}") from None
            time.sleep(0.5)
    yield lab
    try:
        lab.shutdown_kernels()
    except OSError:
        pass
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="session")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser, lab):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    yield pg
    context.close()
    lab.shutdown_kernels()
