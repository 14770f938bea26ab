"""Home, the sidebar, Entropy, Head roles and Predictions in chromium, at the sizes where issue
51 saw them (a 400 px touch screen, a desk) and issue 49's Continue and weights switch: the
sidebar says what it holds and folds once a page is chosen on a phone (51.4); a newcomer meets
words before jargon and no hover instructions on a touch screen (51.5); Predictions' red means
one thing (51.10); Continue writes tokens on Home, marked on Attention maps and Predictions,
with a message for 0 tokens and for a request past the context, and Cancel (49.3); the
weights / what-moves switch changes Entropy's and Head roles' numbers (49.2)."""

from __future__ import annotations

import re
from urllib.parse import quote

import numpy as np
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from tests.support.browser import (DEVICES, HOME_TOKENS, assert_no_exception, settle, shoot,
                                   wait_fitted)

pytestmark = pytest.mark.browser

PHONE, DESK = DEVICES["phone"], DEVICES["desk"]
TEXT = "the cat sat on the mat and the dog ran to the"
MARK = "✎"
IN_VIEW = """(selector) => {
    const box = document.querySelector(selector)?.getBoundingClientRect();
    return !!box && box.width > 0 && box.left >= 0 && box.right <= window.innerWidth;
}"""
SIDEBAR_TEXT = '[data-testid="stSidebar"] textarea'
MAIN_TEXT = "() => document.querySelector('[data-testid=\"stMain\"]').innerText"
# a heatmap's values as plain rows (the browser holds them as typed arrays), by title
HEATMAPS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => ({
    title: (g.layout.title && g.layout.title.text) || '',
    z: Array.from(g._fullData[0].z || [], row => Array.from(row)),
    scale: JSON.stringify(g._fullData[0].colorscale), zmid: g.data[0].zmid}))"""


def folder_query(folder, text: str = TEXT, **extra) -> str:
    pairs = {"model": "folder", "folder": str(folder), "text": text, **extra}
    return "?" + "&".join(f"{k}={quote(str(v))}" for k, v in pairs.items())


def tops(tab, *texts: str) -> list[float]:
    """The top of the first element of the main area whose own text starts with each text,
    in the scrolling main area's coordinates."""
    return tab.evaluate("""(texts) => {
        const main = document.querySelector('[data-testid="stMain"]');
        const all = Array.from(main.querySelectorAll('h1, h2, h3, p, label, div'));
        return texts.map(t => {
            const el = all.find(e => (e.innerText || '').trim().startsWith(t));
            return el ? el.getBoundingClientRect().top + main.scrollTop : null;
        });
    }""", list(texts))


# ------------------------------------------------------------------ issue 51, items 4 and 5


def test_the_sidebar_says_what_it_holds_and_folds_after_a_page_is_chosen(
        device_tab, app_server, screenshots):
    """51.4 on a 400 px touch screen: the folded sidebar was an unlabelled » that Home asked
    a newcomer to "pick in"; after choosing a page it stayed open over the page."""
    tab = device_tab(PHONE)
    tab.goto(f"{app_server.url}/?model=minilm")
    settle(tab, 0)
    expand = tab.locator('[data-testid="stExpandSidebarButton"]')
    label = tab.evaluate("""() => getComputedStyle(document.querySelector(
        '[data-testid="stExpandSidebarButton"]'), '::after').content""").strip('"')
    assert label not in ("", "none", "normal"), label
    assert expand.bounding_box()["width"] > 80  # the words are drawn beside the »
    intro = tab.evaluate(MAIN_TEXT)[:700]
    assert f"» {label}" in intro, intro  # Home names the button as it shows
    assert "Pick a model and a text in the sidebar" not in intro
    shoot(tab, screenshots, "home_phone_sidebar_button")
    expand.tap()
    tab.wait_for_function(IN_VIEW, arg=SIDEBAR_TEXT)
    tab.locator('[data-testid="stSidebarNav"] a', has_text="Entropy").first.tap()
    tab.wait_for_url("**/Entropy*")
    settle(tab, 1)
    tab.wait_for_timeout(1000)
    assert not tab.evaluate(IN_VIEW, SIDEBAR_TEXT), "the sidebar still covers the page"
    shoot(tab, screenshots, "entropy_phone_after_choosing_it")


def test_a_newcomer_meets_words_before_jargon_and_no_hover_on_a_phone(
        device_tab, app_server, screenshots, gpt2_folder):
    """51.5 at 400 px, touch: Home showed the architecture and the KV cache before "How to
    read the maps", and "Each box is one token" with no boxes drawn; Entropy opened on a
    formula and "Hover a cell"; no page may tell a touch screen to hover."""
    tab = device_tab(PHONE)
    tab.goto(f"{app_server.url}/?model=minilm")
    tab.locator('[data-testid="stMetricLabel"]').first.wait_for()  # the model's card
    settle(tab, 0)
    how, card, cache = tops(tab, "How to read the maps", "Layers", "Attention parameters")
    assert how is not None and card is not None and how < card, (how, card)
    assert cache is None or how < cache
    boxes = tab.locator(f"{HOME_TOKENS} .mv-token")
    n_tokens = int(re.search(r"(\d+) tokens", tab.evaluate(MAIN_TEXT)).group(1))
    assert boxes.count() == n_tokens
    border = boxes.first.evaluate("b => getComputedStyle(b).borderTopWidth")
    assert float(border.rstrip("px")) >= 1  # drawn as boxes, as the words say
    shoot(tab, screenshots, "home_phone_newcomer")
    for path, charts, query in (("", 0, "?model=minilm"), ("Entropy", 1, "?model=minilm"),
                                ("Head_Roles", 0, "?model=minilm"),
                                ("Predictions", 3, folder_query(gpt2_folder))):
        tab.goto(f"{app_server.url}/{path}{query}")
        settle(tab, charts)
        shown = tab.evaluate(MAIN_TEXT)
        assert "hover" not in shown.lower(), (path, shown[shown.lower().find("hover") - 80:][:200])
        figures = tab.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
            .map(g => (g.layout.title && g.layout.title.text) || '').join(' ')""")
        assert "hover" not in figures.lower(), (path, figures)
        if path == "Entropy":  # words first: no formula in the first two lines
            intro = shown.split("\n", 2)[1] if "\n" in shown else shown
            assert "Σ" not in intro[:140], intro
            shoot(tab, screenshots, "entropy_phone_newcomer")


# --------------------------------------------------------------------- issue 51, item 10


def test_predictions_red_means_the_head_raises_the_metric(page, app_server, screenshots,
                                                          gpt2_folder, gpt2_model):
    """51.10 on a desk: the direct effects (red = the head helps the target) sat beside the
    ablation map where blue meant the head was helping. Both maps now say what a head adds to
    the metric: the exact map is the metric with every head on minus the metric with that head
    switched off, computed here one head mask at a time."""
    from mha_viz import TargetMetric

    page.goto(f"{app_server.url}/Predictions{folder_query(gpt2_folder)}")
    settle(page, 3)
    wait_fitted(page)
    figures = page.evaluate(HEATMAPS)
    dla = next(f for f in figures if f["title"].startswith("Direct effect"))
    exact = next(f for f in figures if f["title"].startswith("Exact effect"))
    assert dla["scale"] == exact["scale"] and dla["zmid"] == exact["zmid"] == 0
    shown = page.evaluate(MAIN_TEXT)
    assert shown.count("red = the head raises the metric") == 1, shown
    assert "Blue = the head was helping" not in shown
    # the metric the page measures: the model's first guess against its second, at the end
    ids = gpt2_model.encode(TEXT).input_ids
    guesses = gpt2_model.predict(TEXT, k=2).top_ids[-1]
    metric = TargetMetric(len(ids) - 1, int(guesses[0]), int(guesses[1]), "logit_diff")
    info = gpt2_model.info
    every = np.ones((info.n_layer, info.n_head), dtype=np.float32)
    on = gpt2_model.score(TEXT, metric=metric, head_mask=every)
    adds = np.zeros((info.n_layer, info.n_head))
    for layer in range(info.n_layer):
        for head in range(info.n_head):
            mask = every.copy()
            mask[layer, head] = 0
            adds[layer, head] = on - gpt2_model.score(TEXT, metric=metric, head_mask=mask)
    np.testing.assert_allclose(np.array(exact["z"], dtype=float), adds, rtol=1e-4, atol=1e-5)
    assert np.abs(adds).max() > 1e-3
    shoot(page, screenshots, "predictions_one_colour_meaning")


# ------------------------------------------------------------------------ issue 49, item 3


def continue_button(tab):
    return tab.get_by_role("button", name=re.compile(r"^Continue( further)?$"))


def ask(tab, count: int) -> None:
    """Type a count with the keyboard, then press Continue."""
    box = tab.get_by_role("spinbutton", name="Tokens to write")
    box.click()
    tab.keyboard.press("Control+A")
    tab.keyboard.type(str(count))
    tab.keyboard.press("Tab")
    settle(tab, 0)
    continue_button(tab).click()
    settle(tab, 0)


def test_continue_writes_tokens_marked_on_every_page(page, app_server, screenshots,
                                                     gpt2_folder, gpt2_model):
    page.goto(f"{app_server.url}/{folder_query(gpt2_folder)}")
    settle(page, 0)
    context = gpt2_model.info.max_positions
    ask(page, 0)
    assert "Ask for one token or more" in page.evaluate(MAIN_TEXT)
    ask(page, context)
    shown = page.evaluate(MAIN_TEXT)
    assert "past the end" in shown and f"context is {context:,}" in shown
    assert "cont=" not in page.url
    ask(page, 6)
    page.wait_for_function("() => location.search.includes('cont=6')")
    settle(page, 0)
    written = page.locator(f"{HOME_TOKENS} .mv-written")
    assert written.count() >= 5  # six tokens, one of them perhaps joined to the prompt's last
    assert all(t.startswith(MARK) for t in written.locator(".mv-token-text").all_inner_texts())
    assert "The model wrote 6 tokens" in page.evaluate(MAIN_TEXT)
    shoot(page, screenshots, "home_continue_written")
    for link, path in (("Attention maps", "Attention_Maps"), ("Predictions", "Predictions")):
        page.locator('[data-testid="stSidebarNav"] a', has_text=link).first.click()
        page.wait_for_url(f"**/{path}*")
        settle(page, 1)
        wait_fitted(page)
        assert "cont=6" in page.url
        labels = page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
            .map(g => JSON.stringify([g.data.map(t => [t.x, t.y, t.text]),
                                      g.layout.xaxis && g.layout.xaxis.ticktext,
                                      g.layout.yaxis && g.layout.yaxis.ticktext])).join(' ')""")
        assert MARK in labels, link
        assert f"{MARK} marks the" in page.evaluate(MAIN_TEXT)
        assert_no_exception(page, app_server)
        shoot(page, screenshots, f"continue_marked_{link.replace(' ', '_')}")


def test_cancel_stops_the_writing(device_tab, app_server, checkpoint_factory):
    """A model with a long context asked for 3,000 tokens: Cancel, while its progress shows,
    stops it; nothing is written, and asking again starts over."""
    folder = checkpoint_factory("gpt2", n_layer=4, n_head=4, d_model=128, n_positions=4096)
    tab = device_tab(DESK)
    tab.goto(f"{app_server.url}/{folder_query(folder, max_tokens=4096)}")
    settle(tab, 0)
    box = tab.get_by_role("spinbutton", name="Tokens to write")
    box.fill("3000")
    box.press("Tab")
    settle(tab, 0)
    assert box.input_value() == "3000"
    continue_button(tab).click()
    progress = tab.locator('[data-testid="stProgress"]').filter(has_text="writing")
    try:
        progress.first.wait_for(state="visible", timeout=120_000)
    except PlaywrightTimeoutError:  # seen once in a clean-clone run, cause not found: say more
        raise AssertionError("no progress of the writing 120 s after Continue; the page "
                             f"reads:\n{tab.evaluate(MAIN_TEXT)[:3000]}\n"
                             f"{app_server.log_tail()}") from None
    tab.get_by_role("button", name="Cancel", exact=True).click()
    tab.get_by_text("Cancelled: nothing more was written.").first.wait_for()
    settle(tab, 0)
    assert tab.locator(f"{HOME_TOKENS} .mv-written").count() == 0
    assert "cont=" not in tab.url
    assert continue_button(tab).inner_text() == "Continue"


# ------------------------------------------------------------------------ issue 49, item 2


@pytest.mark.parametrize("path,title", [("Entropy", "Mean entropy"),
                                        ("Head_Roles", "Previous token")])
def test_the_what_moves_switch_changes_the_numbers(page, app_server, path, title):
    page.goto(f"{app_server.url}/{path}?model=minilm&open=role_maps")
    settle(page, 1)
    wait_fitted(page)

    def values():
        found = next(f for f in page.evaluate(HEATMAPS) if f["title"].startswith(title))
        return found["title"], found["z"]

    before_title, before = values()
    page.get_by_text("What moves", exact=True).click()
    page.wait_for_function("() => location.search.includes('weights=value')")
    settle(page, 1)
    wait_fitted(page)
    after_title, after = values()
    assert "what moves" in after_title and "what moves" not in before_title
    difference = np.nanmax(np.abs(np.array(after, dtype=float) - np.array(before, dtype=float)))
    assert difference > 1e-3
    assert "what each head moves" in page.evaluate(MAIN_TEXT)
