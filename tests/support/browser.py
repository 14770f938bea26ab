"""The app in headless chromium: a Streamlit server of its own (start_server; the browser
tests' conftest.py starts the shared ones), the browser's presence, and what the tests wait
for and read on a page (a finished run with its charts drawn, errors, screenshots, the
requests a tab made, the home page's tokens, the server's memory).

When chromium or Playwright is missing the tests skip, except under CI (CI=true), where they
fail: CI must run them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest
from tests.support.app_pages import OPENED

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("MHA_VIZ_CHROMIUM", "/usr/bin/chromium")
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


# --- a page in a tab ----------------------------------------------------------------------

# The script run is over (Streamlit marks it on the app root) and n charts are drawn.
READY = """(n) => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
    if (document.querySelector('[data-stale="true"]')) return false;
    const main = document.querySelector('[data-testid="stMain"]');
    if (!main || !main.querySelector('h1')) return false;
    const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
    return plots.length >= n && plots.every(p => p._fullLayout);
}"""


def sections_open(query: str) -> str:
    """query with the pages' folded sections that the tests look at opened (?open=), unless
    it says which itself."""
    if "open=" in query:
        return query
    return f"{query}{'&' if query else '?'}open={OPENED}"


# the home page's tokens, one box each (mha_viz.ui.token_boxes)
HOME_TOKENS = ".mv-tokens"


def open_page(page, server, path: str, n_charts: int, query: str = "") -> None:
    page.goto(f"{server.url}/{path}{sections_open(query)}")
    if n_charts == 0:  # the home page: its figure is the token boxes
        page.wait_for_selector(HOME_TOKENS)
    settle(page, n_charts)


def settle(page, n_charts: int) -> None:
    """Wait until the script run is over and n_charts Plotly charts are drawn."""
    page.wait_for_function(READY, arg=n_charts, polling=200)
    page.wait_for_timeout(400)  # let a rerun triggered by the URL hand-over start, if any
    page.wait_for_function(READY, arg=n_charts, polling=200)


def assert_no_exception(page, server) -> None:
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, f"{exceptions.first.inner_text()}\n{server.log_tail()}"
    alerts = page.locator('[data-testid="stAlert"]').all_inner_texts()
    assert not any("Something went wrong" in a for a in alerts), server.log_tail()


def error_texts(page) -> list[str]:
    return page.locator('[data-testid="stAlertContentError"]').all_inner_texts()


def assert_only_own_host(page, server) -> None:
    for url in page.requests:
        scheme = urlparse(url).scheme
        if scheme in ("data", "blob", "about"):
            continue
        assert urlparse(url).netloc == server.host, f"request to another host: {url}"


def shoot(page, screenshots, name: str) -> None:
    page.screenshot(path=str(screenshots / f"{name}.png"))


def close_sidebar_on_a_phone(tab) -> None:
    """On a narrow screen the sidebar opens over the page: close it as a person would."""
    if tab.viewport_size["width"] >= 600:
        return
    collapse = tab.locator('[data-testid="stSidebarCollapseButton"] button')
    if collapse.count():
        collapse.first.click()
        tab.wait_for_timeout(800)


def grow_to_whole_page(tab) -> None:
    """Streamlit scrolls inside its main block: grow the window to all of it (a screenshot
    of the whole page), and let Plotly redraw at the new size."""
    total = tab.evaluate("""() => Math.max(...Array.from(document.querySelectorAll(
        '[data-testid="stMain"], [data-testid="stMainBlockContainer"]'))
        .map(e => e.scrollHeight))""")
    tab.set_viewport_size({"width": tab.viewport_size["width"],
                           "height": min(int(total) + 100, 16_000)})
    tab.wait_for_timeout(1500)


# A finished run (no script running, nothing stale, the title drawn) whose figures are all
# drawn and laid out for the browser's width, read in one look at the page: counting the
# figures first and waiting for that many after could count a rerun's outgoing ones, and
# then wait (until the timeout) for more figures than the page draws.
FITTED = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
    if (document.querySelector('[data-stale="true"]')) return false;
    const main = document.querySelector('[data-testid="stMain"]');
    if (!main || !main.querySelector('h1')) return false;
    return Array.from(document.querySelectorAll('.js-plotly-plot')).every(
        gd => gd._fullLayout && gd.layout && gd.layout.meta && gd.layout.meta.fitted);
}"""


def wait_fitted(tab) -> None:
    """The browser reports the page's width once per session; the figures are then laid
    out for it (mha_viz.plots.fit) in a second run."""
    tab.wait_for_function(FITTED, polling=200)
    tab.wait_for_timeout(400)  # let a rerun triggered by the URL hand-over start, if any
    tab.wait_for_function(FITTED, polling=200)


SIZES = {"desktop": (1400, 1000), "projector": (1280, 720), "phone": (400, 860)}
# browser contexts of a device: a phone is a touch screen (taps, no hover)
DEVICES = {"phone": {"viewport": {"width": 400, "height": 860}, "has_touch": True,
                     "is_mobile": True},
           "desk": {"viewport": {"width": 1400, "height": 900}}}


def _status(server) -> dict[str, int]:
    values = {}
    for line in open(f"/proc/{server.process.pid}/status"):
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) // 1024  # MB
    return values


def upload(page, path) -> None:
    # Open the expander if it is closed; a click on an open one would close it (it stays
    # open in the browser after "Close the saved trace"), hiding the message to be read.
    details = page.locator("details").filter(has_text="Open a saved trace (.npz)")
    if details.get_attribute("open") is None:
        page.get_by_text("Open a saved trace (.npz)").click()
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(path))


WORDS = ["apple", "river", "mountain", "violin", "copper", "lantern", "meadow", "harbor",
         "pepper", "glacier", "saddle", "thunder"]


def shown_tokens(page) -> list[str]:
    """The home page's tokens, as its boxes show them (the text of each box)."""
    return page.locator(f"{HOME_TOKENS} .mv-token-text").all_inner_texts()


OUTCOME = (f'{HOME_TOKENS}, [data-testid="stAlertContentError"], '
           '[data-testid="stException"]')


def wait_home(page, server=None) -> None:
    """Wait for the home page's token boxes, or for whatever the page shows instead (an error,
    a traceback): a failure then says what the visitor saw and what the server logged."""
    try:
        page.wait_for_selector(OUTCOME)
    except Exception:
        state = page.evaluate(
            "() => document.querySelector('[data-testid=stApp]')"
            "?.getAttribute('data-test-script-state')")
        shows = page.locator('[data-testid="stMain"]').inner_text()[:600]
        log = server.log_tail() if server else ""
        raise AssertionError(f"no token boxes at {page.url[:120]}: script state {state}; "
                             f"the page shows {shows!r}\n{log}") from None
    if server is not None:
        assert_no_exception(page, server)
    assert not error_texts(page), error_texts(page)
    page.wait_for_function(READY, arg=0, polling=200)
    page.wait_for_timeout(300)
    page.wait_for_function(READY, arg=0, polling=200)


def click_cell(tab, point, wanted: str) -> None:
    """Click a map's cell until the link holds ``wanted`` (wk=14): a click that lands while
    the page is still being redrawn (the URL's hand-over, a busy machine) can be lost, and a
    person would click again."""
    for _ in range(3):
        tab.mouse.click(*point)
        try:
            tab.wait_for_function("(w) => location.search.includes(w)", arg=wanted,
                                  timeout=20_000)
            return
        except Exception:  # noqa: BLE001 - Playwright's timeout: redrawn, try again
            wait_fitted(tab)
    raise AssertionError(f"three clicks on the map did not pick the cell ({wanted})")
