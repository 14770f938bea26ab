"""Every page at desktop (1400 px), projector (1280x720) and phone (400 px) sizes, and in
presentation mode: full-page screenshots into artifacts/layout/ and a report of what is
wrong in the figures (overprinted text, plot areas under 250 px, colour bars taller than
their maps; see tests/support/layout_probe.py).

    python benchmarks/layout.py [--model smollm2] [--sizes phone projector] [--present]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _browser import free_port, start_server, stop_server  # noqa: E402
from tests.support.layout_probe import layout_problems  # noqa: E402

PAGES = ["", "Attention_Maps", "Entropy", "Head_Similarity", "Pruning_Impact",
         "Inside_One_Head", "Predictions", "Head_Roles"]
SIZES = {"desktop": (1400, 1000), "projector": (1280, 720), "phone": (400, 860)}
TEXT = "The cat sat on the mat because it was warm."
READY = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    return app && app.getAttribute('data-test-script-state') === 'notRunning'
        && !document.querySelector('[data-stale="true"]')
        && document.querySelector('[data-testid="stMain"] h1')
        && Array.from(document.querySelectorAll('.js-plotly-plot')).every(
            gd => gd.layout && gd.layout.meta && gd.layout.meta.fitted);
}"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--pages", nargs="+", default=PAGES)
    parser.add_argument("--present", action="store_true", help="presentation mode")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args(argv)
    out = ROOT / "artifacts" / "layout"
    out.mkdir(parents=True, exist_ok=True)
    query = f"?model={args.model}&text={quote(TEXT)}" + ("&present=1" if args.present else "")

    from playwright.sync_api import sync_playwright

    port = free_port()
    server = start_server(port, Path(tempfile.mkdtemp()) / "server.log")
    total = 0
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=args.chromium, args=[
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            for size in args.sizes:
                width, height = SIZES[size]
                context = browser.new_context(viewport={"width": width, "height": height})
                tab = context.new_page()
                tab.set_default_timeout(180_000)
                for path in args.pages:
                    tab.goto(f"http://127.0.0.1:{port}/{path}{query}")
                    tab.wait_for_function(READY, polling=200)
                    tab.wait_for_timeout(1500)
                    tab.wait_for_function(READY, polling=200)
                    name = f"{size}{'_present' if args.present else ''}_{path or 'home'}"
                    problems = layout_problems(tab)
                    charts = tab.locator('[data-testid="stPlotlyChart"]')
                    for k in range(charts.count()):  # each figure at its real size
                        charts.nth(k).screenshot(path=str(out / f"{name}_fig{k}.png"))
                    # the page scrolls inside Streamlit's main block, not the document: a
                    # viewport as tall as that block shows all of it (last: in presentation
                    # mode the page refits its figures to the new height)
                    tall = tab.evaluate("""() => document.querySelector(
                        '[data-testid="stMain"]').scrollHeight""")
                    tab.set_viewport_size({"width": width, "height": min(tall, 16000)})
                    tab.wait_for_timeout(500)
                    tab.screenshot(path=str(out / f"{name}.png"))
                    tab.set_viewport_size({"width": width, "height": height})
                    total += len(problems)
                    print(f"{name}: {'ok' if not problems else ''}")
                    for problem in problems:
                        print(f"    {problem}")
                context.close()
            browser.close()
    finally:
        stop_server(server)
    print(f"{total} problems; screenshots in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
