"""A bounded loopback load test: twelve people open the app at once on long texts, then five
1,024-token traces of a GPT-2-small-shaped model run one after another. The server keeps its
memory budget (MHA_VIZ_MEMORY_MB), every session gets its own correct tokens, and a session
that waits is told why."""

from __future__ import annotations

import time
from urllib.parse import urlencode

import pytest

from tests.support.browser import HOME_TOKENS, WORDS, _status, shown_tokens, wait_home

pytestmark = [pytest.mark.browser, pytest.mark.slow]

BUDGET_MB = 2560  # the default, for a 4 GB container (the budget_server fixture)
WAITING = (f'{HOME_TOKENS}, [data-testid="stSpinner"], [data-testid="stAlert"]')


def _long_text(i: int, n_words: int) -> str:
    return " ".join(f"{WORDS[(i + k) % len(WORDS)]}{i}" if k % 7 == 0 else WORDS[(i * k) % 12]
                    for k in range(n_words))


def test_twelve_sessions_and_long_traces_keep_the_memory_budget(
        browser, budget_server, minilm, checkpoint_factory):
    gpt2_small = checkpoint_factory("gpt2", n_layer=12, n_head=12, d_model=768,
                                    n_positions=1024)
    # warm up: both models loaded, then the baseline the budget is counted from
    context = browser.new_context(viewport={"width": 1200, "height": 1600})
    page = context.new_page()
    page.set_default_timeout(300_000)
    for query in ({"model": "minilm"}, {"model": "folder", "folder": str(gpt2_small)}):
        page.goto(f"{budget_server.url}/?{urlencode({**query, 'text': 'warm up'})}")
        wait_home(page, budget_server)
    context.close()
    baseline = _status(budget_server)["VmRSS"]

    sessions = []
    try:
        for i in range(12):  # ~500 tokens each, all different: 75 MB of maps apiece
            text = _long_text(i, 420)
            ctx = browser.new_context(viewport={"width": 1200, "height": 1600})
            tab = ctx.new_page()
            tab.set_default_timeout(300_000)
            tab.goto(f"{budget_server.url}/?{urlencode({'model': 'minilm', 'text': text})}",
                     wait_until="commit")
            sessions.append((ctx, tab, text))
        # nobody stares at a blank page: each shows its tokens, a spinner or why it waits
        for _, tab, _ in sessions:
            tab.wait_for_selector(WAITING, timeout=60_000)
        for _, tab, text in sessions:
            wait_home(tab, budget_server)
            expected = minilm.display_tokens(minilm.encode(text).input_ids)
            assert shown_tokens(tab) == expected
    finally:
        for ctx, *_ in sessions:
            ctx.close()

    after_sessions = _status(budget_server)
    ctx = browser.new_context(viewport={"width": 1200, "height": 1600})
    tab = ctx.new_page()
    tab.set_default_timeout(300_000)
    try:
        for i in range(5):  # 12 x 12 heads x 1,024^2: 604 MB of maps each
            query = {"model": "folder", "folder": str(gpt2_small), "max_tokens": "1024",
                     "text": _long_text(i, 1400)}
            tab.goto(f"{budget_server.url}/?{urlencode(query)}")
            wait_home(tab, budget_server)
            assert len(shown_tokens(tab)) == 1024
            print(f"after 1,024-token trace {i + 1}: {_status(budget_server)}")
    finally:
        ctx.close()
    time.sleep(1)
    status = _status(budget_server)
    grew = status["VmHWM"] - baseline
    print(f"after the twelve sessions: {after_sessions}")
    print(f"server RSS: {baseline} MB after loading the models, peak {status['VmHWM']} MB "
          f"(+{grew} MB), now {status['VmRSS']} MB; budget {BUDGET_MB} MB")
    assert grew < BUDGET_MB, f"the server grew {grew} MB past its {BUDGET_MB} MB budget"
