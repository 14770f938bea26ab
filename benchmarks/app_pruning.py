"""The pruning page in a real browser: time from submitting a new text to the page rendered
with the full ablation sweep (every head of MiniLM switched off in turn, 72 heads).

Starts `streamlit run app.py` (bundled MiniLM), drives Debian's chromium headless through
Playwright, opens /Pruning_Impact, then for each trial types a fresh text of about --tokens
tokens into the sidebar (never seen before, so nothing is cached), presses Ctrl+Enter and
waits until every Plotly chart on the page shows the new input (layout.meta.input) and the
script run is over. With --off, some heads are also switched off (the score with them off,
the masked trace, the map-change heatmap and the before/after maps are drawn too).

    python benchmarks/app_pruning.py [--repeats 5] [--tokens 64] [--off L5.H11,L3.H4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _browser import (READY, free_port, launch, minilm_tokenizer, print_load,  # noqa: E402
                      start_server, stop_server, text_of)
ALL_NEW = """([old, n]) => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
    const ids = Array.from(document.querySelectorAll('.js-plotly-plot')).map(
        gd => (gd._fullLayout && gd.layout.meta && gd.layout.meta.input) || null);
    return ids.length === n && ids.every(id => id && id !== old && id === ids[0]);
}"""
FIRST_ID = """() => { const gd = document.querySelector('.js-plotly-plot');
    return (gd && gd.layout.meta && gd.layout.meta.input) || null; }"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--off", default="", help="heads to switch off, e.g. L5.H11,L3.H4")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args(argv)

    from playwright.sync_api import sync_playwright

    tokenizer = minilm_tokenizer()
    port = free_port()
    log_path = Path(tempfile.gettempdir()) / f"mha_viz_bench_pruning_{port}.log"
    server = start_server(port, log_path)
    try:
        with sync_playwright() as pw:
            browser = launch(pw, args.chromium)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            query = "?text=" + quote(text_of(tokenizer, args.tokens, 0))
            if args.off:
                query += "&off=" + quote(args.off)
            start = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}/Pruning_Impact{query}", timeout=300_000)
            page.wait_for_function(READY, timeout=300_000)
            page.wait_for_timeout(1000)  # a rerun after the URL hand-over, if any
            page.wait_for_function(READY, timeout=300_000)
            n_charts = page.evaluate("document.querySelectorAll('.js-plotly-plot').length")
            print(f"first load of /Pruning_Impact (model load + trace + sweep of "
                  f"{args.tokens} tokens): {time.perf_counter() - start:.1f} s; "
                  f"{n_charts} charts on the page")
            box = page.get_by_label("Text", exact=True)
            times = []
            for trial in range(1, args.repeats + 2):  # the first one warms up
                text = text_of(tokenizer, args.tokens, trial)
                old = page.evaluate(FIRST_ID)
                box.fill(text)
                t0 = time.perf_counter()
                box.press("Control+Enter")
                page.wait_for_function(ALL_NEW, arg=[old, n_charts], polling="raf",
                                       timeout=300_000)
                if trial > 1:
                    times.append(time.perf_counter() - t0)
            n_tokens = len(tokenizer(text)["input_ids"])
            print(f"~{args.tokens} tokens (T={n_tokens}), full ablation sweep (72 heads)"
                  + (f", heads off: {args.off}" if args.off else "")
                  + f": submit -> pruning page rendered: median {statistics.median(times):.2f} s,"
                  f" min {min(times):.2f} s, max {max(times):.2f} s over {len(times)}")
            print_load()
            browser.close()
    finally:
        stop_server(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
