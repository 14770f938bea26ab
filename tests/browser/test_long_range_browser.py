"""The Long range page (issue 56) in headless chromium, on a random grouped-query Llama, at a
desktop's width and a 400-px phone's: the page opens with the needle grid, the sinks and
StreamingLLM's table drawn; the per-head sweep over 1,024 tokens (past what it runs by
itself) waits for its button, runs as a job with its progress, and its map appears; nothing
overprints, no plot is too narrow to read, nothing comes from another host."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.support.browser import (assert_no_exception, assert_only_own_host,
                                   close_sidebar_on_a_phone, error_texts, grow_to_whole_page,
                                   open_page, settle, shoot, wait_fitted)
from tests.support.layout_probe import layout_problems

pytestmark = pytest.mark.browser

SIZES = {"desktop": (1400, 1000), "phone": (400, 860)}
# a window of each size's own: the server keeps a finished sweep for every session, and each
# size must run its own
WINDOWS = {"desktop": 256, "phone": 200}
N_OPENING = 4  # the needle grid, the two sink maps, the table
# each figure's title, its line breaks (a narrow figure wraps it) as spaces
TITLES = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
    .map(p => String((p.layout.title || {}).text || '').replace(/<br>/g, ' '))"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from mha_viz.testing import make_llama_checkpoint

    return make_llama_checkpoint(tmp_path_factory.mktemp("llama_long_range_browser"),
                                 n_layer=2, n_head=4, n_kv_head=2, d_model=64, n_positions=1024)


@pytest.mark.parametrize("size", list(SIZES))
def test_the_page_runs_a_sweep_and_shows_its_figures(sized_tab, app_server, screenshots,
                                                     folder, size):
    width, height = SIZES[size]
    tab = sized_tab(width, height)
    query = (f"?model=folder&folder={quote(str(folder))}&lr_len=256,512&lr_depths=3"
             f"&lr_tokens=1024&lr_window={WINDOWS[size]}")
    open_page(tab, app_server, "Long_Range", N_OPENING, query)
    wait_fitted(tab)
    assert_no_exception(tab, app_server)
    assert not error_texts(tab), error_texts(tab)
    titles = tab.evaluate(TITLES)
    assert any(t.startswith("Copy accuracy by context length") for t in titles), titles
    assert any(t.startswith("Loss of 1,024 tokens") for t in titles), titles
    close_sidebar_on_a_phone(tab)
    shoot(tab, screenshots, f"long_range_{size}")
    button = tab.get_by_role("button", name="Restrict each of the 8 heads alone")
    button.scroll_into_view_if_needed()
    button.click()
    tab.wait_for_function(f"""() => ({TITLES})().some(t => t.startsWith(
        'What a sink + window costs'))""", polling=200)
    settle(tab, N_OPENING + 1)
    wait_fitted(tab)
    assert_no_exception(tab, app_server)
    assert not error_texts(tab), error_texts(tab)
    body = tab.locator('[data-testid="stMain"]').inner_text()
    assert "Key/value cache at 1,024 tokens" in body and "key/value heads keep only" in body
    assert str(folder) not in body
    assert not layout_problems(tab), layout_problems(tab)
    grow_to_whole_page(tab)
    shoot(tab, screenshots, f"long_range_{size}_full")
    assert_only_own_host(tab, app_server)
