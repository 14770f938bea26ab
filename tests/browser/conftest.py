"""Browser-test fixtures: one `streamlit run app.py` server and one headless chromium per
session, driven through Playwright's Python package (Debian's /usr/bin/chromium, no browser
download).

When chromium or Playwright is missing the tests skip, except under CI (CI=true), where they
fail: CI must run them (tests.support.browser.require_browser).
"""

from __future__ import annotations

import pytest
from tests.support.browser import CHROMIUM, ROOT, require_browser, start_server

SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


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


@pytest.fixture
def device_tab(browser, app_server):
    """tab(device): a fresh session in a browser context of that device (DEVICES["phone"]: a
    400 px touch screen, DEVICES["desk"]); every tab made is closed after the test."""
    contexts = []

    def make(device: dict):
        context = browser.new_context(**device)
        contexts.append(context)
        tab = context.new_page()
        tab.set_default_timeout(180_000)
        return tab

    yield make
    for context in contexts:
        context.close()
