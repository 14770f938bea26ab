"""The Head roles page with the bundled causal model, SmolLM2-135M, in headless chromium at
desktop (1400x1000), projector (1280x720) and phone (400x860) sizes. Screenshots (the first
screen and the whole page) land in artifacts/screenshots/."""

from __future__ import annotations

import pytest

from tests.support.browser import (assert_no_exception, assert_only_own_host,  # noqa: E402
                                   close_sidebar_on_a_phone, error_texts, grow_to_whole_page,
                                   open_page, settle, shoot)

pytestmark = pytest.mark.browser

QUERY = "?model=smollm2&text=The%20cat%20sat%20on%20the%20mat%20because%20it%20was%20warm."
N_CHARTS = 8  # 6 layer x head maps (no next-token or [SEP] map for a causal model), 2 head maps
SIZES = {"desktop": (1400, 1000), "projector": (1280, 720), "phone": (400, 860)}


@pytest.mark.slow
@pytest.mark.parametrize("size", list(SIZES))
def test_head_roles_page_for_smollm2(sized_tab, app_server, screenshots, size):
    width, height = SIZES[size]
    tab = sized_tab(width, height)
    open_page(tab, app_server, "Head_Roles", N_CHARTS, QUERY)
    assert_no_exception(tab, app_server)
    assert not error_texts(tab)
    body = tab.locator('[data-testid="stMain"]').inner_text()
    assert "repeated random tokens, seq_len 50, seed 0, 5 sequences" in body
    assert "Grouped-query attention" in body
    assert "L18.H6: induction" in body  # the clearest head opens by default
    titles = tab.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .map(p => String((p.layout.title || {}).text || ''))""")
    assert any(t == "Induction on the probe" for t in titles), titles
    assert any(t.startswith("L18.H6 on the probe") for t in titles), titles
    # no figure is wider than its column (nothing clipped at the right edge)
    overflow = tab.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .filter(p => p.getBoundingClientRect().right > window.innerWidth + 1).length""")
    assert overflow == 0
    if size == "desktop":
        # picking a row of the roles table opens that head (L16.H0, second row) below
        grid = tab.locator('[data-testid="stDataFrame"]').first
        box = grid.bounding_box()
        row_height = 35  # Streamlit's default, the header row the same
        tab.mouse.click(box["x"] + 15, box["y"] + row_height * 1.5 + row_height)
        tab.wait_for_function(
            """() => document.querySelector('[data-testid="stMain"]').innerText
                .includes('L16.H0: previous token')""", polling=200)
        settle(tab, N_CHARTS)
        titles = tab.evaluate("""() => Array.from(document.querySelectorAll(
            '.js-plotly-plot')).map(p => String((p.layout.title || {}).text || ''))""")
        assert any(t.startswith("L16.H0 on the probe") for t in titles), titles
    close_sidebar_on_a_phone(tab)
    shoot(tab, screenshots, f"head_roles_smollm2_{size}")
    grow_to_whole_page(tab)
    shoot(tab, screenshots, f"head_roles_smollm2_{size}_full")
    assert_only_own_host(tab, app_server)


def test_head_roles_page_for_minilm_without_special_tokens(sized_tab, app_server, screenshots):
    """A bidirectional model: next-token and [SEP] maps too, values printed in the cells;
    [CLS] and [SEP] left out, TransformerLens's normalization."""
    tab = sized_tab(1400, 1000)
    open_page(tab, app_server, "Head_Roles", 10,
              "?model=minilm&hide=special&norm=transformer_lens")
    assert_no_exception(tab, app_server)
    assert not error_texts(tab)
    body = tab.locator('[data-testid="stMain"]').inner_text()
    assert "without [CLS], [SEP]" in body and "TransformerLens" in body
    grow_to_whole_page(tab)
    shoot(tab, screenshots, "head_roles_minilm_desktop_full")


def test_picking_a_row_opens_the_folded_head_section(sized_tab, app_server):
    """As a reader first sees the page, its maps are folded; picking a row of the roles table
    opens the section that shows that head."""
    tab = sized_tab(1400, 1000)
    tab.goto(f"{app_server.url}/Head_Roles{QUERY}&open=")
    tab.locator('[data-testid="stDataFrame"]').first.wait_for()
    settle(tab, 0)
    assert_no_exception(tab, app_server)
    assert tab.locator(".js-plotly-plot").count() == 0
    grid = tab.locator('[data-testid="stDataFrame"]').first
    box = grid.bounding_box()
    row_height = 35
    tab.mouse.click(box["x"] + 15, box["y"] + row_height * 1.5 + row_height)  # L16.H0
    settle(tab, 2)
    titles = tab.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .map(p => String((p.layout.title || {}).text || ''))""")
    assert len(titles) == 2 and titles[0].startswith("L16.H0 on the text"), titles
    assert_no_exception(tab, app_server)
