"""Browser-test fixtures: one `streamlit run app.py` server and one headless chromium per
session, driven through Playwright's Python package (Debian's /usr/bin/chromium, no browser
download).

When chromium or Playwright is missing the tests skip, except under CI (CI=true), where they
fail: CI must run them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = os.environ.get("MHA_VIZ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
START_TIMEOUT = 120


def _missing_browser() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"chromium not found at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -r requirements-dev.txt)"
    return None


def require_browser() -> None:
    problem = _missing_browser()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser tests must run in CI: {problem}")
        pytest.skip(problem)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppServer:
    def __init__(self, port: int, process: subprocess.Popen, log_path: Path):
        self.port, self.process, self.log_path = port, process, log_path
        self.host = f"127.0.0.1:{port}"
        self.url = f"http://{self.host}"

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def start_server(log_path: Path, **extra_env: str):
    """`streamlit run app.py` on a free loopback port; yields the AppServer, stops it after."""
    port = _free_port()
    env = dict(os.environ, STREAMLIT_BROWSER_GATHER_USAGE_STATS="false",
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1", **extra_env)
    env.pop("MHA_VIZ_RAISE", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1"],
        cwd=ROOT, env=env, stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    server = AppServer(port, process, log_path)
    deadline = time.time() + START_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(f"{server.url}/_stcore/health", timeout=2) as reply:
                if reply.status == 200:
                    break
        except OSError:
            pass
        if process.poll() is not None or time.time() > deadline:
            process.kill()
            pytest.fail(f"streamlit did not start:\n{server.log_tail()}")
        time.sleep(0.3)
    try:
        yield server
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="session")
def app_server(tmp_path_factory):
    require_browser()
    yield from start_server(tmp_path_factory.mktemp("streamlit") / "server.log")


@pytest.fixture(scope="module")
def budget_server(tmp_path_factory):
    """A server of its own for the load test, with the default 2,560 MB memory budget and
    two heavy computations at once, set explicitly."""
    require_browser()
    yield from start_server(tmp_path_factory.mktemp("load") / "server.log",
                            MHA_VIZ_MEMORY_MB="2560", MHA_VIZ_MAX_JOBS="2")


@pytest.fixture(scope="session")
def browser():
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, app_server):
    """A fresh tab (a fresh Streamlit session) that records every request it makes."""
    context = browser.new_context(viewport={"width": 1400, "height": 3400},
                                  accept_downloads=True)
    tab = context.new_page()
    tab.requests = []
    tab.on("request", lambda request: tab.requests.append(request.url))
    tab.on("websocket", lambda ws: tab.requests.append(ws.url))
    tab.set_default_timeout(120_000)
    yield tab
    context.close()


@pytest.fixture(scope="session")
def screenshots():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


@pytest.fixture
def sized_tab(browser, app_server):
    """tab(width, height): a fresh tab (a fresh session) of that viewport that records the
    URLs it requests; every tab made is closed after the test."""
    contexts = []

    def make(width: int, height: int):
        context = browser.new_context(viewport={"width": width, "height": height})
        contexts.append(context)
        tab = context.new_page()
        tab.requests = []
        tab.on("request", lambda request: tab.requests.append(request.url))
        tab.set_default_timeout(180_000)
        return tab

    yield make
    for context in contexts:
        context.close()
