"""The bundled toy T5 (an encoder-decoder, issue 27) in headless chromium at desktop,
projector (1280x720) and phone (400 px) sizes: cross-attention on the Attention maps and
Entropy pages, the encoder's self-attention on the Entropy page, a head's steps (T5's relative
position bias among them) on Inside one head, the loss increase of every cross-attention head
switched off on Pruning impact, the decoder's predictions and the heads that write one, head
similarity of the encoder and of cross-attention, the encoder's head roles, every head
patched on Circuits, and Corpus reading the encoder over its texts; then the digit
reader's image with its cross-attention (cross-modal). Screenshots land in
artifacts/screenshots/."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.support.browser import (SIZES, assert_no_exception, assert_only_own_host,  # noqa: E402
                                   error_texts, open_page, settle, shoot, wait_fitted)
from tests.support.layout_probe import layout_problems  # noqa: E402

pytestmark = pytest.mark.browser

SOURCE = "red car follows small dog near old house"
TARGET = "voiture rouge suit chien petit près maison vieux"


# (page, charts, kind, more of the query, a sentence the page shows)
VISITS = [
    ("", 0, "cross", "", "The source (the encoder reads it)"),
    ("Entropy", 2, "cross", "", "Mean entropy over the source"),
    ("Entropy", 5, "encoder", "", "Encoder self-attention over the source"),
    ("Inside_One_Head", 15, "encoder", "&layer=1&head=2", "5b. relative position bias"),
    ("Inside_One_Head", 10, "cross", "&layer=1&head=2", "M, the encoder's output"),
    ("Pruning_Impact", 4, "cross", "", "The heads the model needs most"),
    ("Predictions", 3, "cross", "", "Which heads write one prediction"),
    ("Head_Similarity", 3, "encoder", "", "Encoder self-attention over the source"),
    ("Head_Similarity", 2, "cross", "", "between cross-attention heads"),
    ("Head_Roles", 6, "encoder", "", "Induction probe"),
    ("Circuits", 3, "cross", "", "the first token the corruption changes"),
]


def query(kind: str) -> str:
    return (f"?model=t5-toy&kind={kind}&text={quote(SOURCE)}&target={quote(TARGET)}")


@pytest.mark.parametrize("size", list(SIZES))
def test_toy_t5_cross_attention_and_self_attention(sized_tab, app_server, screenshots, size):
    width, height = SIZES[size]
    tab = sized_tab(width, height)
    open_page(tab, app_server, "Attention_Maps", 3, query("cross"))
    assert_no_exception(tab, app_server)
    assert not error_texts(tab)
    body = tab.locator('[data-testid="stMain"]').inner_text()
    assert "All cross-attention heads" in body and "Alignment" in body
    if size == "phone":
        wait_fitted(tab)
        assert not layout_problems(tab), layout_problems(tab)
    shoot(tab, screenshots, f"t5toy_{size}_cross")
    for path, n_charts, kind, extra, expected in VISITS:
        open_page(tab, app_server, path, n_charts, query(kind) + extra)
        assert_no_exception(tab, app_server)
        assert not error_texts(tab)
        assert expected in tab.locator('[data-testid="stMain"]').inner_text(), (path, kind)
        shoot(tab, screenshots, f"t5toy_{size}_{path.lower() or 'home'}_{kind}")
    tab.goto(f"{app_server.url}/Corpus{query('encoder')}&maxseg=20")  # through the encoder
    tab.wait_for_selector('[data-testid="stAlertContentInfo"]')
    settle(tab, 0)
    assert_no_exception(tab, app_server)
    assert "encoder's self-attention" in tab.locator('[data-testid="stMain"]').inner_text()
    # cross-modal: the digit reader's image with each written digit's attention under it
    open_page(tab, app_server, "Attention_Maps", 4, "?model=reader-toy&kind=cross&text=40721")
    assert_no_exception(tab, app_server)
    assert not error_texts(tab)
    assert "Where each written character looks in the image" in tab.locator(
        '[data-testid="stMain"]').inner_text()
    if size == "phone":
        wait_fitted(tab)
        assert not layout_problems(tab), layout_problems(tab)
    shoot(tab, screenshots, f"reader_{size}_cross")
    assert_only_own_host(tab, app_server)
