"""The Circuits page in a real browser, on the bundled SmolLM2 (30 layers x 9 heads).

1. Head map: from pressing Enter on a new corrupted prompt (the indirect-object sentence with
   its second "John" swapped for a name never used before in the run, so nothing is cached)
   to the head map drawn for that pair: every one of the 270 heads patched, the figure built,
   sent and rendered. Issue 22's target: <= 5 s.
2. Circuit graph: its data (edge scores and the exactly measured circuit) computed first;
   then the time from choosing the "Circuit graph" view to the graph rendered, and, in this
   process, the time to build the figure from the circuit. Target: <= 2 s after the data.

Each trial's reference, measured in the same run: the library call alone
(activation_patching on the same pair, in this process), so the page's overhead shows.

    python benchmarks/app_circuits.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from _browser import READY, free_port, launch, print_load, start_server, stop_server  # noqa: E402

CLEAN = "When Mary and John went to the store, John gave a drink to"
NAMES = ["Tom", "James", "Paul", "Mark", "Anna", "Sarah", "Michael", "David", "Lisa", "Peter",
         "Kate", "George", "Emma"]
HEADS_FOR = """([digest]) => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .find(p => p._fullData && p._fullData.some(t => t.name === 'heads'));
    return !!gd && gd.layout.meta && gd.layout.meta.pairs !== digest;
}"""
HEAD_DIGEST = """() => { const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
    .find(p => p._fullData && p._fullData.some(t => t.name === 'heads'));
    return gd ? gd.layout.meta.pairs : null; }"""
GRAPH_DRAWN = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
    return Array.from(document.querySelectorAll('.js-plotly-plot'))
        .some(p => p._fullData && p._fullData.some(t => t.name === 'nodes'));
}"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args(argv)
    if args.repeats + 1 > len(NAMES):
        parser.error(f"at most {len(NAMES) - 1} repeats (one fresh name each)")

    from playwright.sync_api import sync_playwright

    from mha_viz import load_model, plots
    from mha_viz.analysis import activation_patching, circuit
    from mha_viz.analysis.prompts import PromptPair

    model = load_model("smollm2")
    port = free_port()
    log_path = Path(tempfile.gettempdir()) / f"mha_viz_bench_circuits_{port}.log"
    server = start_server(port, log_path)
    try:
        with sync_playwright() as pw:
            browser = launch(pw, args.chromium)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            start = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}/Circuits?model=smollm2", timeout=300_000)
            page.wait_for_function(READY, timeout=300_000)
            page.wait_for_timeout(1000)
            page.wait_for_function(READY, timeout=300_000)
            print(f"first open of /Circuits (model load + every head patched): "
                  f"{time.perf_counter() - start:.1f} s")
            box = page.get_by_label("Corrupted prompt", exact=True)
            page_times, library_times = [], []
            for trial, name in enumerate(NAMES[:args.repeats + 1]):  # the first warms up
                corrupted = CLEAN.replace("store, John", f"store, {name}")
                old = page.evaluate(HEAD_DIGEST)
                box.fill(corrupted)
                t0 = time.perf_counter()
                box.press("Enter")
                page.wait_for_function(HEADS_FOR, arg=[old], polling="raf", timeout=300_000)
                elapsed = time.perf_counter() - t0
                t0 = time.perf_counter()
                activation_patching(model, [PromptPair(CLEAN, corrupted, " Mary", " John")],
                                    None, "logit_diff", "head", "denoise")
                if trial:
                    page_times.append(elapsed)
                    library_times.append(time.perf_counter() - t0)
            on_page, alone = statistics.median(page_times), statistics.median(library_times)
            print(f"head map, 270 heads patched on a 14-token pair: Enter -> rendered: median "
                  f"{on_page:.2f} s (min {min(page_times):.2f}, max {max(page_times):.2f}) "
                  f"over {len(page_times)}; the library call alone in this process: median "
                  f"{alone:.2f} s (page / library {on_page / alone:.2f}x)")

            # the circuit graph: data first (computed by opening the view once), then timed
            page.get_by_text("Circuit graph", exact=True).click()
            page.wait_for_function(GRAPH_DRAWN, timeout=300_000)
            graph_times = []
            for _ in range(args.repeats):
                page.get_by_text("Heads", exact=True).click()
                page.wait_for_function(READY, timeout=300_000)
                t0 = time.perf_counter()
                page.get_by_text("Circuit graph", exact=True).click()
                page.wait_for_function(GRAPH_DRAWN, polling="raf", timeout=300_000)
                graph_times.append(time.perf_counter() - t0)
            last = CLEAN.replace("store, John", f"store, {NAMES[args.repeats]}")
            found = circuit(model, [PromptPair(CLEAN, last, " Mary", " John")], None,
                            "logit_diff", top_k=50)
            builds = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                plots.circuit_graph(found.edges, model.info.n_layer, model.info.n_head)
                builds.append(time.perf_counter() - t0)
            print(f"circuit graph (50 edges), data ready: view chosen -> graph rendered: median "
                  f"{statistics.median(graph_times):.2f} s (max {max(graph_times):.2f}); "
                  f"building the figure: median {1e3 * statistics.median(builds):.0f} ms")
            print_load()
            browser.close()
    finally:
        stop_server(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
