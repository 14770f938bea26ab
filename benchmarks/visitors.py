"""What a visitor costs the server (issue 59 item 3): the server's CPU seconds per visitor
when a class opens Attention maps at once, each in a browser session of its own.

Starts `streamlit run app.py` (the default model, the warm start off so that nothing runs
in the background while CPU is counted), lets one visitor load the model, waits until the
server is idle, then opens N sessions at the same moment and waits until every one has drawn
every chart. The server's CPU (user + system, every thread, from /proc) before and after,
divided by N, is the cost of one visitor. Two rounds: N different texts (each visitor's own
forward), then N visitors with one text none of them has sent before (computed once, shared).
Targets: <= 0.33 s a visitor with different texts, <= 0.1 s with the same text.

    python benchmarks/visitors.py [--visitors 30] [--model smollm2] [--rounds 2]
        [--baseline FOLDER]   # an earlier checkout, measured in the same run
        [--baseline-hide MODULE ...]   # modules its server cannot import (e.g. httptools
                                       # uvloop: the packages this checkout added)
        [--profile FOLDER]    # then one more round under cProfile, its files kept there
        [--floor]             # and a page with a title, a text area and one chart
                              # (benchmarks/floor_app.py), served the same way: what any
                              # Streamlit page costs a new visitor on this machine
        [--no-forward]        # skip the forward reference (below)

Then, as a reference measured in the same run, what one visitor's own forward costs: the
trace of each round's texts, one at a time, in this process, with the server's torch threads
(MHA_VIZ_TORCH_THREADS, 1 by default): the part of a visitor with a text of its own that no
page, figure or sharing can remove (the server batches texts that arrive while a forward
runs; visitors who arrive one after another are traced one by one, as here).

Chromium's own CPU is not counted (it is another process); on two cores the browsers slow
the wall time, not the server's CPU seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _browser import WORDS, free_port, launch, print_load, stop_server  # noqa: E402
from page_open import DONE  # noqa: E402 (every chart drawn and laid out)
from warm_start import start  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
TARGETS = {"different texts": 0.33, "same text": 0.10}


def cpu_seconds(pid: int) -> float:
    """User + system seconds of a process, every thread (and its waited-for children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICKS


def wait_idle(pid: int, quiet: float = 0.05, window: float = 2.0, limit: float = 120) -> None:
    """Until the server uses under `quiet` of a core over `window` seconds."""
    deadline = time.time() + limit
    while time.time() < deadline:
        before = cpu_seconds(pid)
        time.sleep(window)
        if (cpu_seconds(pid) - before) / window < quiet:
            return
    print(f"    (the server was still busy after {limit:.0f} s)")


def sentence(visitor: int, round_name: str) -> str:
    """A text no visitor has sent before: about 30 tokens, different for each visitor."""
    words = [WORDS[(visitor * 7 + i) % len(WORDS)] for i in range(22)]
    return f"{round_name} {visitor}: " + " ".join(words) + "."


def one_round(browser, port: int, pid: int, texts: list[str]) -> tuple[float, float]:
    """(server CPU seconds per visitor, wall seconds until every visitor's page was drawn)."""
    wait_idle(pid)
    sessions = []
    before, started = cpu_seconds(pid), time.perf_counter()
    for text in texts:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        tab = context.new_page()
        tab.set_default_timeout(600_000)
        tab.goto(f"http://127.0.0.1:{port}/Attention_Maps?{urlencode({'text': text})}",
                 wait_until="commit")
        sessions.append((context, tab))
    for context, tab in sessions:
        tab.wait_for_function(DONE, polling=100)
    wall = time.perf_counter() - started
    used = cpu_seconds(pid) - before
    for context, _ in sessions:
        context.close()
    return used / len(texts), wall


def measure(browser, model: str, visitors: int, rounds: int, root: Path,
            profile: Path | None = None, hide: tuple[str, ...] = ()) -> dict[str, list]:
    """Each round's (CPU a visitor, wall) for different texts and the same text; with
    profile (a folder), the server writes a cProfile file per page run there. hide: modules
    the server cannot import (a module of that name that raises ImportError, first on its
    path)."""
    port = free_port()
    out = {name: [] for name in TARGETS}
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "server.log"
        env = {"MHA_VIZ_WEIGHTS_CACHE": str(Path(folder) / "weights")}
        if hide:
            stubs = Path(folder) / "hidden"
            stubs.mkdir()
            for name in hide:
                (stubs / f"{name}.py").write_text(f"raise ImportError('{name} hidden')\n")
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(stubs), os.environ.get("PYTHONPATH")) if p)
        if profile is not None:
            env["MHA_VIZ_PROFILE"] = str(profile)
        process, _ = start(port, log, model, False, None, env, root)
        try:
            # one visitor loads the model (not counted)
            one_round(browser, port, process.pid, [sentence(0, "warm-up")])
            if profile is not None:  # the warm-up's runs (the model's load) set apart
                (profile / "warm-up").mkdir(parents=True, exist_ok=True)
                for path in profile.glob("*.prof"):
                    path.rename(profile / "warm-up" / path.name)
            for repeat in range(rounds):
                tag = f"round {repeat}"
                texts = [sentence(v, tag) for v in range(visitors)]
                out["different texts"].append(one_round(browser, port, process.pid, texts))
                same = [sentence(visitors + 1, tag + " shared")] * visitors
                out["same text"].append(one_round(browser, port, process.pid, same))
        finally:
            stop_server(process)
    return out


def forward_cpu(model_name: str, visitors: int) -> float:
    """The median CPU seconds (this process, every thread) of one visitor's trace: each of a
    round's different texts traced alone, after one trace to warm up, with the server's
    torch threads."""
    import torch

    sys.path.insert(0, str(ROOT))
    from mha_viz import load_model

    torch.set_num_threads(max(1, int(os.environ.get("MHA_VIZ_TORCH_THREADS", "1"))))
    model = load_model(model_name)
    model.trace(sentence(visitors + 2, "warm-up"))
    used = []
    for v in range(visitors):
        before = time.process_time()
        model.trace(sentence(v, "round 0"))
        used.append(time.process_time() - before)
    return statistics.median(used)


def floor_checkout(folder: Path) -> Path:
    """A folder that serves benchmarks/floor_app.py as its app.py, with this checkout's
    Streamlit configuration and static-files middleware."""
    (folder / ".streamlit").mkdir(parents=True)
    (folder / "mha_viz" / "server").mkdir(parents=True)
    shutil.copy(HERE / "floor_app.py", folder / "app.py")
    shutil.copy(ROOT / ".streamlit" / "config.toml", folder / ".streamlit" / "config.toml")
    shutil.copy(ROOT / "mha_viz" / "server" / "static_assets.py",
                folder / "mha_viz" / "server" / "static_assets.py")
    return folder


def print_profile(folder: Path, top: int = 30) -> None:
    """The page runs' profiles merged: functions by their own time, then by cumulative."""
    import pstats

    files = sorted(str(p) for p in folder.glob("*.prof"))
    if not files:
        print("    no profile was written")
        return
    stats = pstats.Stats(*files, stream=sys.stdout)
    stats.files = []  # print_stats would list every file read first: one line per page run
    print(f"profile of {len(files)} page runs (cProfile: the runs' own threads)")
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--visitors", type=int, default=30)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", type=Path, default=None,
                        help="an earlier checkout's folder, measured in the same run")
    parser.add_argument("--baseline-hide", nargs="*", default=[], metavar="MODULE",
                        help="modules the baseline's server cannot import (packages this "
                             "checkout added, e.g. httptools uvloop)")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--profile", type=Path, default=None, metavar="FOLDER",
                        help="then a round under cProfile, printed, its files kept in FOLDER "
                             "(read them with pstats: callers of what costs)")
    parser.add_argument("--skip-measure", action="store_true",
                        help="only the profiled round (with --profile)")
    parser.add_argument("--no-forward", action="store_true",
                        help="skip the reference: one visitor's forward alone in this process")
    parser.add_argument("--floor", action="store_true",
                        help="also a page with a title, a text area and one chart, served "
                             "the same way (benchmarks/floor_app.py)")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    floor = Path(tempfile.mkdtemp(prefix="mha-viz-floor-"))
    checkouts = [("this checkout", ROOT, ())] + (
        [("baseline", args.baseline.resolve(), tuple(args.baseline_hide))]
        if args.baseline else []) + (
        [("floor", floor_checkout(floor / "app"), ())] if args.floor else [])
    results = {}
    with sync_playwright() as playwright:
        browser = launch(playwright, args.chromium)
        try:
            for label, root, hide in ([] if args.skip_measure else checkouts):
                results[label] = measure(browser, args.model, args.visitors, args.rounds, root,
                                         hide=hide)
            if args.profile is not None:
                measure(browser, args.model, args.visitors, 1, ROOT, args.profile.resolve())
                print_profile(args.profile)
        finally:
            browser.close()
            shutil.rmtree(floor, ignore_errors=True)
    print(f"server CPU per visitor, {args.visitors} visitors at once on Attention maps "
          f"({args.model}), median of {args.rounds} rounds:")
    for label, rows in results.items():
        for name, target in TARGETS.items():
            cpu = statistics.median(c for c, _ in rows[name])
            wall = statistics.median(w for _, w in rows[name])
            line = (f"  {label:13s} {name:15s}: {cpu:.3f} s CPU a visitor (target <= "
                    f"{target}), every page drawn after {wall:.1f} s")
            if label == "floor":
                line = (f"  {label:13s} {name:15s}: {cpu:.3f} s CPU a visitor (a title, a "
                        f"text area and one chart), every page drawn after {wall:.1f} s")
            elif label != "this checkout" and "this checkout" in results:
                ours = statistics.median(c for c, _ in results["this checkout"][name])
                line += f"; this checkout / baseline {ours / cpu:.2f}"
            print(line)
    if results and not args.no_forward:
        forward = forward_cpu(args.model, args.visitors)
        print(f"  reference: one visitor's own forward (the trace of its text, alone, "
              f"{os.environ.get('MHA_VIZ_TORCH_THREADS', '1')} torch thread(s)): {forward:.3f} s "
              f"CPU")
        for label, rows in results.items():
            if label == "floor":
                continue
            different = statistics.median(c for c, _ in rows["different texts"])
            same = statistics.median(c for c, _ in rows["same text"])
            print(f"  {label}: a visitor with a text of its own costs {different - same:.3f} s "
                  f"more than one with a shared text; its forward alone is {forward:.3f} s of "
                  f"that")
    print_load()
    return 0


if __name__ == "__main__":
    sys.exit(main())
