"""A class's first minutes: from the server's start, how long the first page with a figure
takes to open, and then Pruning impact's first open; with the warm start (the default model
and the example text prepared as the server starts, app.py's lifespan) and without it
(MHA_VIZ_WARM_START=0), measured in the same run. Issue 28's targets: both <= 8 s. The warm
start is measured twice: at the first start ever (nothing prepared on disk: it computes while
the class waits) and at a later start (what an earlier start kept on disk,
MHA_VIZ_PREPARED_DIR, is read instead of computed).

The first page is opened as soon as the server answers its health check (a teacher who
starts the server and opens the link at once); --delay waits that many seconds first (one
who starts it before the class). Each opening is a new tab of a browser never used before.

    python benchmarks/warm_start.py [--model smollm2] [--delay 0 20] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _browser import free_port, launch, stop_server  # noqa: E402
from page_open import open_once as open_page  # noqa: E402 (a browser never used before)


def start(port: int, log: Path, model: str, warm: bool, prepared: Path | None,
          extra_env: dict[str, str] | None = None,
          root: Path = ROOT) -> tuple[subprocess.Popen, float]:
    """The server (the app of the checkout at root), and the time it was started
    (perf_counter)."""
    env = dict(os.environ, MHA_VIZ_DEFAULT_MODEL=model, MHA_VIZ_WARM_START="1" if warm else "0",
               MHA_VIZ_PREPARED_DIR=str(prepared) if prepared else "off",
               STREAMLIT_BROWSER_GATHER_USAGE_STATS="false", TOKENIZERS_PARALLELISM="false",
               **(extra_env or {}))
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1"],
        cwd=root, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    while time.perf_counter() - started < 120:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2):
                return process, started
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"streamlit exited; see {log}")
            time.sleep(0.1)
    raise RuntimeError(f"streamlit did not start; see {log}")


def one_start(browser, model: str, warm: bool, delay: float,
              prepared: Path | None = None) -> tuple[float, float]:
    """(server start -> first page drawn, Pruning impact's first open) in seconds."""
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        process, started = start(port, Path(folder) / "server.log", model, warm, prepared)
        try:
            time.sleep(delay)
            base = f"http://127.0.0.1:{port}"
            open_page(browser, f"{base}/Attention_Maps")
            first = time.perf_counter() - started
            pruning = open_page(browser, f"{base}/Pruning_Impact")
            return first, pruning
        finally:
            stop_server(process)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--delay", type=float, nargs="+", default=[0.0, 20.0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    print(f"model {args.model}; medians of {args.repeats} server starts each")
    print("delay | warm start | start -> first page with figures | Pruning impact first open")
    with sync_playwright() as playwright:
        browser = launch(playwright, args.chromium)
        for delay in args.delay:
            with tempfile.TemporaryDirectory() as kept:
                for warm, label in ((False, "off"), (True, "on, first start"),
                                    (True, "on, later start")):
                    runs = []
                    for _ in range(args.repeats):
                        with tempfile.TemporaryDirectory() as empty:
                            # a first start finds nothing on disk; a later one what the
                            # first starts of this delay kept
                            folder = Path(kept if label.endswith("later start") else empty)
                            runs.append(one_start(browser, args.model, warm, delay, folder))
                            if label.endswith("first start"):
                                for path in Path(empty).glob("*.npz"):
                                    path.replace(Path(kept) / path.name)
                    first = statistics.median(r[0] for r in runs)
                    pruning = statistics.median(r[1] for r in runs)
                    after = "" if delay == 0 else f" ({first - delay:.1f} s after opening)"
                    print(f"{delay:5.0f} s | {label:16} | {first:6.1f} s{after} | "
                          f"{pruning:6.1f} s", flush=True)
        browser.close()


if __name__ == "__main__":
    main()
