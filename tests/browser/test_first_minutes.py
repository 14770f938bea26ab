"""Issue 51, the first ten minutes of a newcomer, a teacher and a researcher, each item at the
size where it was seen, with real key presses and taps."""

from __future__ import annotations

import pytest
from tests.support.browser import DEVICES

pytestmark = pytest.mark.browser

PHONE, DESK = DEVICES["phone"], DEVICES["desk"]
SIDEBAR_TEXT = '[data-testid="stSidebar"] textarea[aria-label="Text"]'


def finished(tab) -> None:
    """The script run is over and nothing on the page is stale."""
    tab.wait_for_function(
        """() => {
            const app = document.querySelector('[data-testid="stApp"]');
            return app && app.getAttribute('data-test-script-state') === 'notRunning'
                && !document.querySelector('[data-stale="true"]');
        }""", polling=200)


IN_VIEW = """(selector) => {
    const box = document.querySelector(selector)?.getBoundingClientRect();
    return !!box && box.width > 0 && box.left >= 0 && box.right <= window.innerWidth;
}"""


def open_sidebar(tab, touch: bool) -> None:
    """On a phone the sidebar is closed at first and after a page is chosen: a closed one is
    slid off the screen (still "visible" to Playwright), so look where the box is."""
    for _ in range(60):
        if tab.evaluate(IN_VIEW, SIDEBAR_TEXT):
            return
        expand = tab.locator('[data-testid="stExpandSidebarButton"]')
        if expand.is_visible():
            expand.tap() if touch else expand.click()
        tab.wait_for_timeout(500)
    raise AssertionError("the sidebar's text box never came into view")


def type_then_follow_link(tab, text: str, link: str, touch: bool) -> None:
    """Type `text` into the sidebar's box with the keyboard (no commit: no Ctrl+Enter, no
    click elsewhere), then go straight to a page link, as a person does."""
    open_sidebar(tab, touch)
    box = tab.locator(SIDEBAR_TEXT)
    box.tap() if touch else box.click()
    tab.keyboard.press("Control+A")
    tab.keyboard.type(text)
    target = tab.locator('[data-testid="stSidebarNav"] a', has_text=link).first
    target.tap() if touch else target.click()


def _typed_texts_followed(tab, server, touch: bool) -> list[tuple[str, str, str]]:
    """Type a text and follow a page link, twice in a row from Home: (typed, in the box
    after, the page's link) for each."""
    tab.goto(f"{server.url}/?model=minilm")
    finished(tab)
    seen = []
    for text, link, path in (("The dog chased the ball.", "Entropy", "/Entropy"),
                             ("A bird sang in the tree.", "Head similarity",
                              "/Head_Similarity")):
        type_then_follow_link(tab, text, link, touch)
        tab.wait_for_url(f"**{path}*", timeout=60_000)
        finished(tab)
        open_sidebar(tab, touch)
        seen.append((text, tab.locator(SIDEBAR_TEXT).input_value(), tab.url))
    return seen


@pytest.mark.parametrize("device", ["phone", "desk"])
def test_typed_text_survives_following_a_page_link(device_tab, app_server, device):
    """Item 1: on a phone the text went back to the default and the page stayed Home; on a
    desk the first click on a page link did not navigate. Twice in a row, as seen.

    A server too busy to start the rerun the box's blur asked for before the link's click
    arrives used to lose the typed text (Streamlit folds the two requests and keeps the newer
    one's widget values; a clean-clone run lost it twice in a row); navigation.py now carries
    a waiting commit's values over (tests/app/test_navigation.py)."""
    touch = device == "phone"
    tab = device_tab(PHONE if touch else DESK)
    seen = _typed_texts_followed(tab, app_server, touch)
    for text, shown, url in seen:
        assert shown == text, seen
        assert "text=" in url and text.split()[1] in url.replace("+", " ")
