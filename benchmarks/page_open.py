"""Time from opening a page in a fresh tab to every chart on it rendered (laid out for the
window), for each page, model and text length, on a cold server (its first page) and warm
(the text already traced by an earlier visit, a new session each time).

Targets (issues 13 and 24): warm <= 2 s per page; the cold first page <= 8 s. Warm is measured in a
new tab of a browser already used (its cookies and cache: the figures are laid out on the
first run, from the window size the last tab reported) and in a browser never used before
(it fetches plotly.js; its first run is laid out too, from the size the page's HTML guessed
from the window: mha_viz/server/static_assets.py).

A page opens as a reader first sees it: the sections it folds below its first screen stay
folded (no ?open=). A chart counts as drawn only when its code has arrived: a new tab loads
plotly.js (~4 MB) before its first chart, and Streamlit shows a skeleton until then (the check
before this one counted a page with skeletons as done, and so under-timed Head similarity and
Pruning impact).
First, the floors in the same run: a bare Streamlit page with no, one and six small Plotly
charts (--no-floors skips them), so a page's time reads against what Streamlit and Plotly
themselves cost on this machine.
Each page is also opened the way a reader moves through the app, by its link in the sidebar
of an open tab (no new tab: plotly.js is already loaded), timed from the click.

    python benchmarks/page_open.py [--models minilm smollm2] [--sizes 30 500] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _browser import WORDS, free_port, start_server, stop_server  # noqa: E402

PAGES = ["", "Attention_Maps", "Entropy", "Head_Similarity", "Pruning_Impact",
         "Inside_One_Head", "Predictions", "Head_Roles"]
DONE = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
    // a skeleton is a chart whose code (plotly.js, loaded per tab) has not yet arrived
    if (document.querySelector('[data-stale="true"], [data-testid="stSpinner"], '
                               + '[data-testid="stSkeleton"]')) return false;
    const main = document.querySelector('[data-testid="stMain"]');
    if (!main || !main.querySelector('h1')) return false;
    const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
    // something the page ends on: its charts, the home page's tokens, a message, or the
    // folded sections a page lists below its first screen
    if (plots.length === 0 && !main.querySelector(
        '[data-testid="stCode"], [data-testid="stAlert"], [data-testid="stExpander"]'))
        return false;
    return plots.every(gd => gd.layout && gd.layout.meta && gd.layout.meta.fitted
                       && gd.querySelector('.main-svg'));
}"""


def text_of(model, n_tokens: int) -> str:
    """A text of about n_tokens tokens for the model's own tokenizer."""
    from mha_viz import load_model

    tokenizer = load_model(model).tokenizer
    words, i = [], 0
    while len(tokenizer(" ".join(words))["input_ids"]) < n_tokens:
        words.append(WORDS[i % len(WORDS)])
        i += 1
    return " ".join(words)


def open_once(browser, url: str, window=None, width: int = 1400, height: int = 1000) -> float:
    """Seconds from opening url in a new tab to every chart drawn. window: a browser context
    the tab opens in (its cookies and HTTP cache, as a new tab of a browser in use); None
    opens it in a browser never used before (a new context)."""
    context = window or browser.new_context(viewport={"width": width, "height": height})
    tab = context.new_page()
    tab.set_default_timeout(600_000)
    start = time.perf_counter()
    tab.goto(url)
    tab.wait_for_function(DONE, polling=50)
    elapsed = time.perf_counter() - start
    tab.close()
    if window is None:
        context.close()
    return elapsed


TITLES = {"": "Home", "Attention_Maps": "Attention maps", "Entropy": "Entropy",
          "Head_Similarity": "Head similarity", "Pruning_Impact": "Pruning impact",
          "Inside_One_Head": "Inside one head", "Predictions": "Predictions",
          "Head_Roles": "Head roles", "Features": "Features"}
HEADING = """(title) => {
    const h = document.querySelector('[data-testid="stMain"] h1');
    return h !== null && (title === 'Home' ? !h.innerText.includes('Inside') : h.innerText
                          .toLowerCase().startsWith(title.toLowerCase()));
}"""


def navigate_once(tab, page: str) -> float:
    """Seconds from clicking page's link in the sidebar of the open tab to every chart of
    the new page drawn."""
    link = tab.locator('[data-testid="stSidebarNav"] a', has_text=TITLES[page]).first
    start = time.perf_counter()
    link.click()
    tab.wait_for_function(HEADING, arg=TITLES[page], polling=30)
    tab.wait_for_timeout(50)  # the old page's charts are gone before the check reads them
    tab.wait_for_function(DONE, polling=30)
    return time.perf_counter() - start


# What Streamlit and Plotly themselves cost a new tab on this machine: a page with a title, a
# line of code and n small Plotly charts (?charts=n), timed like the app's pages.
FLOOR_APP = """
import plotly.graph_objects as go
import streamlit as st

st.title("Floor")
st.code("a bare page")
for i in range(int(st.query_params.get("charts", "0"))):
    fig = go.Figure(go.Heatmap(z=[[1, 2], [3, 4]]))
    fig.update_layout(meta={"fitted": True}, height=300)
    st.plotly_chart(fig, theme=None, key=f"c{i}")
"""


def floors(browser, repeats: int) -> dict[int, float]:
    """Warm new-tab medians of the floor app with 0, 1 and 6 charts, in a browser in use."""
    folder = Path(tempfile.mkdtemp())
    (folder / "floor.py").write_text(FLOOR_APP)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(folder / "floor.py"),
         "--server.headless", "true", "--server.port", str(port),
         "--server.address", "127.0.0.1"], cwd=folder,
        stdout=(folder / "server.log").open("w"), stderr=subprocess.STDOUT)
    found = {}
    try:
        wait_healthy(port)
        window = browser.new_context(viewport={"width": 1400, "height": 1000})
        for charts in (0, 1, 6):
            url = f"http://127.0.0.1:{port}/?charts={charts}"
            open_once(browser, url, window)
            found[charts] = statistics.median(open_once(browser, url, window)
                                              for _ in range(repeats))
        window.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return found


def wait_healthy(port: int, seconds: float = 60.0) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError("the floor app did not start")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["minilm", "smollm2"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[30, 500])
    parser.add_argument("--pages", nargs="+", default=PAGES)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--no-floors", action="store_true",
                        help="skip timing a bare Streamlit page with 0, 1 and 6 small charts")
    args = parser.parse_args(argv)

    from playwright.sync_api import sync_playwright

    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        if not args.no_floors:
            for charts, seconds in floors(browser, args.repeats).items():
                print(f"floor: a bare Streamlit page with {charts} small chart(s): warm median "
                      f"new tab {seconds:.2f} s", flush=True)
        for model in args.models:
            for size in args.sizes:
                text = text_of(model, size)
                port = free_port()
                server = start_server(port, Path(tempfile.mkdtemp()) / "server.log")
                try:
                    url = f"http://127.0.0.1:{port}/{{page}}?" + urlencode(
                        {"model": model, "text": text})
                    cold = open_once(browser, url.format(page=args.pages[0]))
                    print(f"{model} {size} tokens: cold first page ({args.pages[0] or 'Home'})"
                          f" {cold:.2f} s", flush=True)
                    window = browser.new_context(viewport={"width": 1400, "height": 1000})
                    for page in args.pages:
                        open_once(browser, url.format(page=page), window)  # compute once
                        in_use = [open_once(browser, url.format(page=page), window)
                                  for _ in range(args.repeats)]
                        new = [open_once(browser, url.format(page=page))
                               for _ in range(args.repeats)]
                        warm = statistics.median(in_use)
                        rows.append((model, size, page or "Home", warm, cold))
                        print(f"{model} {size} tokens: {page or 'Home':16s} warm median: new "
                              f"tab {warm:.2f} s ({', '.join(f'{t:.2f}' for t in in_use)}); "
                              f"new browser {statistics.median(new):.2f} s", flush=True)
                    tab = window.new_page()
                    tab.set_default_timeout(120_000)
                    tab.goto(url.format(page=args.pages[0]))
                    tab.wait_for_function(DONE, polling=50)
                    order = [p for p in args.pages if p in TITLES][1:] + [args.pages[0]]
                    clicks = {page: [] for page in order}
                    for _ in range(args.repeats):
                        for page in order:
                            clicks[page].append(navigate_once(tab, page))
                    for page in order:
                        print(f"{model} {size} tokens: {page or 'Home':16s} from the sidebar: "
                              f"median {statistics.median(clicks[page]):.2f} s "
                              f"({', '.join(f'{t:.2f}' for t in clicks[page])})", flush=True)
                    window.close()
                finally:
                    stop_server(server)
        browser.close()
    over = [r for r in rows if r[3] > 2.0]
    print(f"\n{len(rows)} page openings measured; warm over 2 s: "
          + (", ".join(f"{m}/{s}/{p} {w:.2f} s" for m, s, p, w, _ in over) or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
