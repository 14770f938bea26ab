"""From `streamlit run app.py` to the first figure on Attention maps (issue 59, target <= 5 s):
a cold start (nothing kept on disk: no weights cache, no prepared results; the modules'
bytecode compiled, as in the Docker image) and a second start (what the first one kept),
each opened in a new tab of a browser never used before the moment the server answers its
health check, as shipped (the warm start on, the default model). Then
where the seconds go, each step timed in a fresh process of its own: the imports of the server
and of the first page (`python -X importtime`, summed by top-level package), the default
model's load (the GGUF dequantized, and read back from the weights cache) and its first trace.

    python benchmarks/cold_start.py [--model smollm2] [--repeats 2] [--no-profile]
        [--baseline FOLDER]   # e.g. git archive <commit> | tar -x -C FOLDER: before/after

Figures are seconds on this machine; the cold/second ratio within one run is what compares.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _browser import free_port, launch, stop_server  # noqa: E402
from page_open import DONE  # noqa: E402 (every chart drawn and laid out)
from visitors import cpu_seconds  # noqa: E402
from warm_start import start  # noqa: E402

# at least one of the page's Plotly figures drawn (its SVG is in the page): a figure of the
# input, which ui.show_figure tags with it (not the empty chart that stands while the model
# loads, ui.loading.charts_code_meanwhile)
FIRST = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).some(
    gd => gd._fullLayout && gd.layout.meta && gd.layout.meta.input !== undefined
          && gd.querySelector('.main-svg'))"""


def one_start(browser, model: str, kept: Path,
              root: Path = ROOT) -> tuple[float, float, float, float]:
    """(health, first figure, every figure) in seconds from the server process's start, and
    the server's CPU seconds (every thread) at the first figure, with the weights cache and the
    prepared results in kept; the app of the checkout at root. The CPU seconds vary less than
    the wall time on a machine whose two cores the browser shares."""
    port = free_port()
    env = {"MHA_VIZ_WEIGHTS_CACHE": str(kept / "weights")}
    with tempfile.TemporaryDirectory() as folder:
        process, started = start(port, Path(folder) / "server.log", model, True,
                                 kept / "prepared", env, root)
        healthy = time.perf_counter() - started
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            tab = context.new_page()
            tab.set_default_timeout(300_000)
            tab.goto(f"http://127.0.0.1:{port}/Attention_Maps")
            tab.wait_for_function(FIRST, polling=20)
            first = time.perf_counter() - started
            cpu = cpu_seconds(process.pid)
            tab.wait_for_function(DONE, polling=50)
            done = time.perf_counter() - started
            context.close()
            return healthy, first, done, cpu
        finally:
            stop_server(process)


def server_starts(model: str, repeats: int, chromium: str, baseline: Path | None) -> None:
    """Pairs of starts (cold, then second) of this checkout, and, interleaved with them, of
    the checkout at baseline (an earlier commit, e.g. from `git archive`), each with its own
    empty folders."""
    from playwright.sync_api import sync_playwright

    roots = {"this": ROOT} | ({"baseline": baseline} if baseline else {})
    for root in roots.values():
        compiled(root)
    print(f"model {model}; {repeats} pair(s) of starts each; seconds from the server "
          f"process's start")
    print("checkout | start  | health | first figure | every figure | server CPU at first")
    rows = collections.defaultdict(list)
    with sync_playwright() as playwright:
        browser = launch(playwright, chromium)
        for _ in range(repeats):
            for name, root in roots.items():
                with tempfile.TemporaryDirectory() as kept:
                    for label in ("cold", "second"):
                        times = one_start(browser, model, Path(kept), root)
                        rows[name, label].append(times)
                        print(f"{name:8} | {label:6} | {times[0]:6.2f} | {times[1]:12.2f} | "
                              f"{times[2]:12.2f} | {times[3]:19.2f}", flush=True)
        browser.close()
    first = {key: statistics.median(r[1] for r in runs) for key, runs in rows.items()}
    cpu = {key: statistics.median(r[3] for r in runs) for key, runs in rows.items()}
    for name in roots:
        cold, second = first[name, "cold"], first[name, "second"]
        print(f"{name}: median first figure cold {cold:.2f} s, second {second:.2f} s "
              f"(second/cold {second / cold:.2f}); server CPU at the first figure cold "
              f"{cpu[name, 'cold']:.2f} s, second {cpu[name, 'second']:.2f} s")
    if baseline:
        for what, figures in (("first figure", first), ("server CPU", cpu)):
            print(f"this/baseline, {what}: " + ", ".join(
                f"{label} {figures['this', label] / figures['baseline', label]:.2f}"
                for label in ("cold", "second")))


def compiled(root: Path) -> None:
    """The checkout's modules compiled to bytecode, as the Docker image's are. A start leaves
    them compiled too, except where PYTHONDONTWRITEBYTECODE is set (as on some machines): there
    every start compiled the app's ~270 modules again (0.2-0.4 s, measured nowhere else). Said
    when it was needed."""
    found = subprocess.run([sys.executable, "-m", "compileall", "app.py", "pages", "mha_viz"],
                           cwd=root, check=True, capture_output=True, text=True).stdout
    written = sum(line.startswith("Compiling ") for line in found.splitlines())  # the missing
    if written:  # and the stale
        print(f"compiled {written} module(s) of {root} to bytecode (python -m compileall, "
              f"as the Dockerfile does)")


# what `streamlit run app.py` imports before it serves, then what the first page imports
IMPORTS = "import streamlit.web.bootstrap, app, mha_viz.ui.views.attention_maps"


def import_profile(top: int = 12) -> None:
    """Seconds of imports by top-level package (self times summed), one fresh process."""
    found = subprocess.run([sys.executable, "-X", "importtime", "-c", IMPORTS], cwd=ROOT,
                           capture_output=True, text=True, env=_env(), check=True).stderr
    by_package: dict[str, float] = collections.Counter()
    for line in found.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, _, name = line.removeprefix("import time:").split("|")
        by_package[name.strip().split(".")[0]] += int(own) / 1e6
    total = sum(by_package.values())
    print(f"\nimports of the server and the first page: {total:.2f} s")
    for name, seconds in sorted(by_package.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {name:24} {seconds:5.2f} s")


LOAD = """
import sys, time
t = time.perf_counter()
import torch
torch.set_num_threads(2)
from mha_viz.models.model import load_model
from mha_viz.ui.settings import default_text
imported = time.perf_counter() - t
t = time.perf_counter()
model = load_model(sys.argv[1])
loaded = time.perf_counter() - t
t = time.perf_counter()
model.trace(default_text(model), maps="budget")
traced = time.perf_counter() - t
print(imported, loaded, traced)
"""


def load_profile(model: str) -> None:
    """The model's load without a weights cache, writing it, and reading it back, and its
    first trace; each in a fresh process."""
    print(f"\n{model} in a fresh process: imports (torch, mha_viz) | load | first trace")
    with tempfile.TemporaryDirectory() as kept:
        for label, cache in (("no weights cache", "0"), ("cache written", kept),
                             ("cache read", kept)):
            found = subprocess.run([sys.executable, "-c", LOAD, model], cwd=ROOT, text=True,
                                   capture_output=True, env=_env(MHA_VIZ_WEIGHTS_CACHE=cache))
            if found.returncode:
                print(f"  {label}: failed\n{found.stderr[-2000:]}")
                continue
            imported, loaded, traced = (float(x) for x in found.stdout.split()[-3:])
            print(f"  {label:18} {imported:5.2f} s | {loaded:5.2f} s | {traced:5.2f} s")


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, TOKENIZERS_PARALLELISM="false", **extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--baseline", type=Path,
                        help="another checkout of the app (an earlier commit) to start in turn")
    args = parser.parse_args()
    server_starts(args.model, args.repeats, args.chromium, args.baseline)
    if not args.no_profile:
        import_profile()
        load_profile(args.model)


if __name__ == "__main__":
    main()
