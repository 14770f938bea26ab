"""A page in a real browser: time from submitting a new text to every chart rendered, and
the bytes sent to the browser.

Starts `streamlit run app.py`, drives Debian's chromium headless through Playwright, opens
the page for the model, then for each size types a fresh text into the sidebar, presses
Ctrl+Enter and waits until every Plotly chart on the page shows the new input (each figure
carries layout.meta.input, an id of the input) and a frame has been painted.
Targets: Attention maps on MiniLM, about 30 tokens <= 1.5 s, about 500 tokens <= 5 s;
Predictions (per-token loss, direct logit attribution, ablation on the metric) on SmolLM2,
about 100 tokens <= 2 s.

    python benchmarks/app.py [--repeats 5] [--sizes 30 500] [--chromium /usr/bin/chromium]
    python benchmarks/app.py --page Predictions --model smollm2 --sizes 100
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Attention maps: grid, head heatmap, line view, aggregate, two-token links.
# Predictions: loss strip and direct logit attribution (past 32 tokens the exact ablation
# beside it waits for a click, so it is not part of the submit-to-rendered time).
CHARTS = {"Attention_Maps": 5, "Predictions": 2}
TARGETS = {("Attention_Maps", 30): 1.5, ("Attention_Maps", 500): 5.0, ("Predictions", 100): 2.0}
from _browser import free_port, minilm_tokenizer, start_server, stop_server, text_of  # noqa: E402


CHART_STATE = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(
    gd => (gd.layout && gd.layout.meta && gd.layout.meta.input) || null)"""

ALL_NEW = """([old, n]) => {
    const ids = Array.from(document.querySelectorAll('.js-plotly-plot')).map(
        gd => (gd.layout && gd.layout.meta && gd.layout.meta.input) || null);
    const app = document.querySelector('[data-testid="stApp"]');
    return ids.length === n && ids.every(id => id && id !== old && id === ids[0])
        && app && app.getAttribute('data-test-script-state') === 'notRunning';
}"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[30, 500])
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--page", default="Attention_Maps", choices=sorted(CHARTS))
    parser.add_argument("--model", default="minilm", help="a bundled model: minilm, smollm2")
    args = parser.parse_args(argv)
    charts_on_page = CHARTS[args.page]

    from playwright.sync_api import sync_playwright

    if args.model == "minilm":
        tokenizer = minilm_tokenizer()
    else:
        from mha_viz import load_model
        tokenizer = load_model(args.model).tokenizer
    port = free_port()
    log_path = Path(tempfile.gettempdir()) / f"mha_viz_bench_{port}.log"
    server = start_server(port, log_path)
    frames: list[bytes] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=args.chromium,
                args=["--headless", "--no-sandbox", "--disable-gpu",
                      "--disable-background-networking"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("websocket", lambda ws: ws.on(
                "framereceived",
                lambda payload: frames.append(payload if isinstance(payload, bytes)
                                              else payload.encode())))
            start = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}/{args.page}?model={args.model}", timeout=180_000)
            page.wait_for_function(
                f"document.querySelectorAll('.js-plotly-plot').length >= {charts_on_page}",
                timeout=180_000)
            print(f"first load of /{args.page} with {args.model} (model load + trace): "
                  f"{time.perf_counter() - start:.1f} s; {os.cpu_count()} CPUs, load average "
                  f"{os.getloadavg()[0]:.1f} (server and browser share this machine)")
            box = page.get_by_label("Text", exact=True)
            trial = 0
            results = {}
            for size in args.sizes:
                times, grid_bytes, total_bytes = [], [], []
                for repeat in range(args.repeats + 1):  # the first one warms up
                    trial += 1
                    text = text_of(tokenizer, size, trial)
                    old = page.evaluate(CHART_STATE)[0]
                    box.fill(text)
                    frames.clear()
                    t0 = time.perf_counter()
                    box.press("Control+Enter")
                    page.wait_for_function(ALL_NEW, arg=[old, charts_on_page], polling="raf",
                                           timeout=120_000)
                    elapsed = time.perf_counter() - t0
                    grid = [f for f in frames if b'"thumbnails"' in f]
                    if repeat:
                        times.append(elapsed)
                        grid_bytes.append(max((len(f) for f in grid), default=0))
                        total_bytes.append(sum(len(f) for f in frames))
                results[size] = (times, grid_bytes, total_bytes)
                n_tokens = len(tokenizer(text)["input_ids"])
                median = statistics.median(times)
                target = TARGETS.get((args.page, size))
                verdict = "" if target is None else (
                    f"(target <= {target:.1f} s: {'met' if median <= target else 'MISSED'})")
                print(f"~{size} tokens (T={n_tokens}): submit -> all {charts_on_page} charts "
                      f"rendered: median {median:.2f} s, min {min(times):.2f} s, "
                      f"max {max(times):.2f} s over {len(times)} {verdict}")
                print(f"    bytes to the browser per submit: {statistics.median(total_bytes):,.0f}"
                      f" (all-heads grid: {statistics.median(grid_bytes):,.0f})")
            browser.close()
    finally:
        stop_server(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
