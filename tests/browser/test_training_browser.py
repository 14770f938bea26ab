"""The Training page (issue 42) in headless chromium on the bundled attention-only run, at
desktop and projector sizes: its slider and its play button change the maps, and a series
folder that is empty gets a message, not a traceback."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.support.browser import (assert_no_exception, assert_only_own_host,  # noqa: E402
                                   error_texts, open_page, settle, shoot)

pytestmark = pytest.mark.browser

N_CHARTS = 5  # loss, ICL score, heads over steps, the layer x head map, the head on the probe
SIZES = {"desktop": (1400, 1000), "projector": (1280, 720)}
TITLES = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
    .map(p => String((p.layout.title || {}).text || ''))"""


def map_titles(tab) -> list[str]:
    return [t for t in tab.evaluate(TITLES) if " at step " in t]


@pytest.mark.parametrize("size", list(SIZES))
def test_the_slider_and_play_walk_the_steps(sized_tab, app_server, screenshots, size):
    width, height = SIZES[size]
    tab = sized_tab(width, height)
    open_page(tab, app_server, "Training", N_CHARTS,
              "?present=1" if size == "projector" else "")
    assert_no_exception(tab, app_server)
    assert not error_texts(tab)
    assert any(t.startswith("Induction score at step 3,000") for t in map_titles(tab))
    assert any(t.startswith("L1.H0 on the probe at step 3,000") for t in map_titles(tab))
    shoot(tab, screenshots, f"training_{size}")
    # the slider: Home takes it to the first step, and both maps follow
    thumb = tab.locator('[data-testid="stMain"] input[type="range"]').first
    thumb.focus()
    thumb.press("Home")
    tab.wait_for_function(f"""() => ({TITLES})().some(t => t.startsWith(
        'Induction score at step 10'))""", polling=200)
    settle(tab, N_CHARTS)
    assert any(t.startswith("L1.H0 on the probe at step 10") for t in map_titles(tab))
    # play: the maps pass through the steps in between and stop on the last
    tab.get_by_role("button", name="▶ Play").click()
    tab.wait_for_function(f"""() => ({TITLES})().some(t => t.startsWith(
        'Induction score at step 1,122'))""", polling=100)
    tab.wait_for_function(f"""() => ({TITLES})().some(t => t.startsWith(
        'Induction score at step 3,000'))""", polling=200)
    settle(tab, N_CHARTS)
    assert_no_exception(tab, app_server)
    overflow = tab.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .filter(p => p.getBoundingClientRect().right > window.innerWidth + 1).length""")
    assert overflow == 0
    assert_only_own_host(tab, app_server)


def test_an_empty_series_folder_gets_a_message(sized_tab, app_server, tmp_path):
    tab = sized_tab(1400, 1000)
    empty = tmp_path / "empty_run"
    empty.mkdir()
    tab.goto(f"{app_server.url}/Training?series=folder&sfolder={quote(str(empty))}")
    tab.wait_for_selector('[data-testid="stAlertContentError"]')
    assert_no_exception(tab, app_server)
    errors = error_texts(tab)
    assert any("holds no checkpoints" in e for e in errors), errors
    assert str(tmp_path) not in " ".join(errors)
