"""Reliability of one server under several people: concurrent sessions keep their own
results, memory stays bounded over many reruns, and one session's failing model load does
not disturb the others."""

from __future__ import annotations

import urllib.request
from urllib.parse import urlencode

import pytest
from tests.support.browser import WORDS, assert_no_exception, error_texts, shown_tokens, wait_home

pytestmark = pytest.mark.browser


def home_url(server, model_query: dict, text: str) -> str:
    return f"{server.url}/?{urlencode({**model_query, 'text': text})}"


def server_rss_mb(server) -> float:
    for line in open(f"/proc/{server.process.pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def healthy(server) -> bool:
    with urllib.request.urlopen(f"{server.url}/_stcore/health", timeout=5) as reply:
        return reply.status == 200


def test_eight_concurrent_sessions_get_their_own_results(browser, app_server, minilm,
                                                          gpt2_model, gpt2_folder):
    models = [({"model": "minilm"}, minilm),
              ({"model": "folder", "folder": str(gpt2_folder)}, gpt2_model)]
    sessions = []
    for i in range(8):
        query, model = models[i % 2]
        text = f"The {WORDS[i]} and the {WORDS[i + 2]} went {'far ' * (i + 1)}away."
        context = browser.new_context(viewport={"width": 1200, "height": 1600})
        page = context.new_page()
        page.set_default_timeout(180_000)
        # start all eight before waiting on any: the server runs them at the same time
        page.goto(home_url(app_server, query, text), wait_until="commit")
        sessions.append((context, page, model, text))
    try:
        for context, page, model, text in sessions:
            wait_home(page, app_server)
            assert shown_tokens(page) == model.trace(text).display_tokens
        assert healthy(app_server)
    finally:
        for context, *_ in sessions:
            context.close()


def test_memory_stays_bounded_over_thirty_reruns(browser, app_server):
    context = browser.new_context(viewport={"width": 1200, "height": 1600})
    page = context.new_page()
    page.set_default_timeout(120_000)
    readings = {}
    try:
        for i in range(30):
            # ~250 tokens each, all different: unbounded caches would grow by ~20 MB a run
            text = " ".join(WORDS[(i + k) % len(WORDS)] + str(i) for k in range(60))
            page.goto(home_url(app_server, {"model": "minilm"}, text))
            wait_home(page)
            assert not error_texts(page)
            if i in (9, 29):
                readings[i] = server_rss_mb(app_server)
        # unbounded caches would grow ~400 MB over these 20 reruns; the budget's LRU holds
        growth = readings[29] - readings[9]
        print(f"server RSS after 10 reruns {readings[9]:.0f} MB, after 30 {readings[29]:.0f} MB "
              f"(+{growth:.0f} MB)")
        assert growth < 200, f"server memory grew {growth:.0f} MB over 20 reruns"
        assert healthy(app_server)
    finally:
        context.close()


def test_failing_model_load_leaves_other_sessions_working(browser, app_server, tmp_path,
                                                          minilm):
    (tmp_path / "junk.txt").write_text("not a model")
    broken_ctx = browser.new_context()
    good_ctx = browser.new_context(viewport={"width": 1200, "height": 1600})
    try:
        broken, good = broken_ctx.new_page(), good_ctx.new_page()
        for tab in (broken, good):
            tab.set_default_timeout(120_000)
        broken.goto(home_url(app_server, {"model": "folder", "folder": str(tmp_path)}, "hi"),
                    wait_until="commit")
        text = "The meadow was quiet after the storm."
        good.goto(home_url(app_server, {"model": "minilm"}, text), wait_until="commit")
        broken.wait_for_selector('[data-testid="stAlertContentError"]')
        assert any("config.json" in e for e in error_texts(broken))
        assert_no_exception(broken, app_server)
        wait_home(good)
        assert shown_tokens(good) == minilm.trace(text).display_tokens
        # and after the failure, a new session still works
        good.goto(home_url(app_server, {"model": "minilm"}, text + " Again."))
        wait_home(good)
        assert shown_tokens(good) == minilm.trace(text + " Again.").display_tokens
        assert healthy(app_server)
    finally:
        broken_ctx.close()
        good_ctx.close()
