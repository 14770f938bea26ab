"""A bounded loopback load test of hostile visitors (issue 14): four people upload traces
that unpack to ~185 MB each, one opens a trace of 2,048 heads on Head similarity, one
points the app at a checkpoint whose config claims a billion layers. The server keeps its
memory budget, every one of them gets a page (a message or the figures) and, once they have
left, the server's CPU is free again within seconds."""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

import numpy as np
import pytest

from tests.support.app_pages import OPENED
from tests.support.browser import _status, assert_no_exception, settle, upload

pytestmark = [pytest.mark.browser, pytest.mark.slow]

BUDGET_MB = 2560  # the budget_server fixture's


def _cpu_seconds(server) -> float:
    import os

    fields = open(f"/proc/{server.process.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _uniform_trace(path, n_layer: int, n_head: int, n_tokens: int, seed: int) -> None:
    """A valid trace file (rows sum to 1) that compresses to almost nothing."""
    maps = np.full((n_layer, n_head, n_tokens, n_tokens), 1.0 / n_tokens, dtype=np.float32)
    tokens = np.array([f"t{seed}_{i}" for i in range(n_tokens)])
    np.savez_compressed(
        path, attentions=maps, token_ids=np.arange(n_tokens) + seed, tokens=tokens,
        display_tokens=tokens, special_mask=np.zeros(n_tokens, bool),
        segment_ids=np.zeros(n_tokens, np.int64),
        metadata=np.asarray(json.dumps({"format": "mha_viz.trace", "version": 1,
                                        "causal": False, "truncated": False,
                                        "n_tokens_before_truncation": n_tokens,
                                        "model_name": f"upload {seed}"})))


def _new_tab(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 1400})
    tab = context.new_page()
    tab.set_default_timeout(300_000)
    return context, tab


def test_hostile_uploads_and_configs_keep_the_budget_and_free_the_cpu(
        browser, budget_server, tmp_path, gpt2_folder):
    context, tab = _new_tab(browser)
    tab.goto(f"{budget_server.url}/Entropy?{urlencode({'model': 'minilm', 'open': OPENED})}")
    settle(tab, 4)
    context.close()
    baseline = _status(budget_server)["VmRSS"]

    files = []
    for seed in range(4):  # 8 x 8 heads x 850^2 tokens: 185 MB of maps each, ~0.2 MB files
        files.append(tmp_path / f"big{seed}.npz")
        _uniform_trace(files[-1], 8, 8, 850 + seed, seed)
    many_heads = tmp_path / "many_heads.npz"
    _uniform_trace(many_heads, 32, 64, 6, 99)  # 2,048 heads
    absurd = tmp_path / "absurd"
    absurd.mkdir()
    for item in gpt2_folder.iterdir():
        (absurd / item.name).write_bytes(item.read_bytes())
    config = json.loads((absurd / "config.json").read_text())
    (absurd / "config.json").write_text(json.dumps({**config, "n_layer": 1_000_000_000}))

    sessions = []
    try:
        for path in files:
            context, tab = _new_tab(browser)
            query = urlencode({"model": "minilm", "open": OPENED})
            tab.goto(f"{budget_server.url}/Entropy?{query}")
            settle(tab, 4)
            upload(tab, path)
            sessions.append((context, tab, "Showing the saved trace"))
        context, tab = _new_tab(browser)
        query = urlencode({"model": "minilm", "open": OPENED})
        tab.goto(f"{budget_server.url}/Head_Similarity?{query}")
        settle(tab, 3)
        upload(tab, many_heads)
        sessions.append((context, tab, "each cell is the mean over a block"))
        context, tab = _new_tab(browser)
        tab.goto(f"{budget_server.url}/?" + urlencode({"model": "folder",
                                                       "folder": str(absurd)}))
        sessions.append((context, tab, "n_layer is 1,000,000,000"))
        for context, tab, expected in sessions:
            tab.wait_for_function(
                "(text) => document.body.innerText.includes(text)", arg=expected,
                timeout=300_000)
            assert_no_exception(tab, budget_server)
        peak_in_use = _status(budget_server)
    finally:
        for context, *_ in sessions:
            context.close()

    time.sleep(5)  # the visitors have left: whatever they started should be over
    before = _cpu_seconds(budget_server)
    time.sleep(5)
    busy = (_cpu_seconds(budget_server) - before) / 5
    status = _status(budget_server)
    grew = status["VmHWM"] - baseline
    print(f"server RSS {baseline} MB after loading MiniLM, {peak_in_use} with every visitor "
          f"on, peak {status['VmHWM']} MB (+{grew} MB), now {status['VmRSS']} MB; budget "
          f"{BUDGET_MB} MB; CPU after they left: {busy:.0%} of a core")
    assert grew < BUDGET_MB, f"the server grew {grew} MB past its {BUDGET_MB} MB budget"
    assert busy < 0.2, f"the server still uses {busy:.0%} of a core after everyone left"
