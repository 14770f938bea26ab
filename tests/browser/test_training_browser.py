"""The Training page (issues 42 and 49) in headless chromium on the bundled attention-only
run, at desktop and projector sizes: its slider and its play button change the maps, and a
series folder that is empty gets a message, not a traceback. On a projector (1280x720,
presentation mode) no figure text is under 14 px; on a 400-px phone every plot is at least
250 px wide."""

from __future__ import annotations

import re
import time
from urllib.parse import quote

import pytest

from tests.support.browser import (assert_no_exception, assert_only_own_host,  # noqa: E402
                                   error_texts, open_page, settle, shoot)
from tests.support.layout_probe import layout_problems  # noqa: E402

pytestmark = pytest.mark.browser

# loss, ICL score, the induction head's keys, heads over steps, the layer x head map, the
# head on the probe
N_CHARTS = 6
SIZES = {"desktop": (1400, 1000), "projector": (1280, 720)}
TITLES = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
    .map(p => String(((p.layout || {}).title || {}).text || ''))"""

# every figure title drawn from now on, in window.titlesSeen (noted at each change of the page)
NOTE_TITLES = f"""() => {{
    const seen = new Set(), note = () => ({TITLES})().forEach(t => seen.add(t));
    window.titlesSeen = [];
    new MutationObserver(() => {{ note(); window.titlesSeen = Array.from(seen); }})
        .observe(document.body, {{subtree: true, childList: true, characterData: true}});
}}"""

# every text Plotly drew in a figure (ticks, titles, legend, labels), with its font size
FIGURE_TEXTS = """() => Array.from(document.querySelectorAll('.js-plotly-plot svg.main-svg text'))
    .filter(el => !el.closest('.hoverlayer') && el.textContent.trim()
                  && el.getBoundingClientRect().width > 0)
    .map(el => [el.textContent.slice(0, 30), parseFloat(getComputedStyle(el).fontSize)])"""


def map_titles(tab) -> list[str]:
    return [t for t in tab.evaluate(TITLES) if " at step " in t]


def probe_map_at(step: str):
    return re.compile(rf"L1\.H\d on the probe at step {step}\b")


@pytest.mark.parametrize("size", list(SIZES))
def test_the_slider_and_play_walk_the_steps(sized_tab, app_server, screenshots, size):
    width, height = SIZES[size]
    tab = sized_tab(width, height)
    open_page(tab, app_server, "Training", N_CHARTS,
              "?present=1" if size == "projector" else "")
    assert_no_exception(tab, app_server)
    assert not error_texts(tab)
    assert any(t.startswith("Induction score at step 3,000") for t in map_titles(tab))
    assert any(probe_map_at("3,000").match(t) for t in map_titles(tab))
    shoot(tab, screenshots, f"training_{size}")
    # the slider: Home takes it to the first step, and both maps follow
    thumb = tab.locator('[data-testid="stMain"] input[type="range"]').first
    thumb.focus()
    thumb.press("Home")
    tab.wait_for_function(f"""() => ({TITLES})().some(t => t.startsWith(
        'Induction score at step 10'))""", polling=200)
    settle(tab, N_CHARTS)
    assert any(probe_map_at("10").match(t) for t in map_titles(tab))
    # play: the maps pass through the steps in between and stop on the last. Every title
    # drawn is noted as the page changes: a frame shown between two polls counts too.
    tab.evaluate(NOTE_TITLES)
    tab.get_by_role("button", name="▶ Play").click()
    tab.wait_for_function("""() => window.titlesSeen.some(t => t.startsWith(
        'Induction score at step 3,000'))""", polling=200)
    seen = tab.evaluate("() => window.titlesSeen")
    assert any(t.startswith("Induction score at step 757") for t in seen), seen
    settle(tab, N_CHARTS)
    assert_no_exception(tab, app_server)
    overflow = tab.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .filter(p => p.getBoundingClientRect().right > window.innerWidth + 1).length""")
    assert overflow == 0
    assert_only_own_host(tab, app_server)


def test_on_a_projector_no_figure_text_is_under_14_px(sized_tab, app_server, screenshots):
    """Issue 49 (and 51 item 9): the log axis's minor tick labels were 13.5 px."""
    tab = sized_tab(1280, 720)
    open_page(tab, app_server, "Training", N_CHARTS, "?present=1")
    assert_no_exception(tab, app_server)
    found = tab.evaluate(FIGURE_TEXTS)
    assert len(found) > 50, found  # ticks, titles, legends of six figures
    small = [(text, size) for text, size in found if size < 14]
    assert not small, small


def test_on_a_phone_every_plot_keeps_250_px(sized_tab, app_server, screenshots):
    """Issue 49: at 400 px the layer x head map was 136 px wide."""
    tab = sized_tab(400, 800)
    open_page(tab, app_server, "Training", N_CHARTS)
    assert_no_exception(tab, app_server)
    widths = tab.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .map(gd => Math.max(...Array.from(gd.querySelectorAll('.nsewdrag'))
                                 .map(d => d.getBoundingClientRect().width)))""")
    assert len(widths) == N_CHARTS and min(widths) >= 250, widths
    assert not layout_problems(tab), layout_problems(tab)
    shoot(tab, screenshots, "training_phone")


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


# while ▶ Play runs: the slider's value, the step each line chart marks, and the play status
# beside the button with whether it is on the screen
PLAY_STATE = """() => {
    const thumb = document.querySelector('[data-testid="stMain"] [data-testid="stSliderThumbValue"]');
    // a chart the rerun is about to replace is marked stale: it is not the frame's chart
    const charts = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .filter(gd => !gd.closest('[data-stale="true"]'))
        .filter(gd => gd.layout && gd.layout.xaxis && gd.layout.xaxis.type === 'log');
    const marks = charts.map(gd => (gd.layout.annotations || []).map(a => String(a.text))
        .filter(t => /^step [0-9,]+$/.test(t)).join(''));
    const status = Array.from(document.querySelectorAll('[data-testid="stMarkdownContainer"]'))
        .find(el => el.textContent.startsWith('Playing: step'));
    const box = status ? status.getBoundingClientRect() : null;
    return {slider: thumb ? thumb.textContent.trim() : null, marks,
            status: status ? status.textContent : null,
            visible: !!box && box.top >= 0 && box.bottom <= window.innerHeight};
}"""


def test_play_moves_the_slider_and_every_charts_marker_in_view(sized_tab, app_server,
                                                               screenshots):
    """Issue 51 item 6, on a projector (1280x720, presentation mode): ▶ Play used to leave
    the slider and the loss chart's marker on their step for ~15 s, then jump to 3,000,
    while only the maps 2,250 px below moved. Now each frame moves the slider and every
    line chart's step marker together, and says which step it draws beside the button,
    on the screen."""
    tab = sized_tab(1280, 720)
    open_page(tab, app_server, "Training", N_CHARTS, "?present=1")
    assert_no_exception(tab, app_server)
    tab.get_by_role("button", name="▶ Play").click()
    seen, deadline = [], time.time() + 150
    while time.time() < deadline:
        state = tab.evaluate(PLAY_STATE)
        seen.append(state)
        if len(seen) > 5 and state["status"] is None and state["slider"] == "3,000":
            break
        tab.wait_for_timeout(150)
    frames = [s for s in seen if s["status"]]
    in_between = {s["slider"] for s in frames if s["slider"] not in ("10", "3,000")}
    assert len(in_between) >= 5, seen[-5:]  # the slider walked the steps
    moving = [s for s in frames if s["slider"] not in (None, "3,000")
              and s["status"].startswith(f"Playing: step {s['slider']} ")]
    assert moving, frames[:5]
    # each line chart marks the slider's step while it plays: judged per step drawn, since a
    # frame can be sampled while its charts are being replaced (more often on a busy machine)
    together = [s for s in moving if len(s["marks"]) == 4
                and all(m == f"step {s['slider']}" for m in s["marks"])]
    steps_drawn = {s["slider"] for s in moving}
    steps_marked = {s["slider"] for s in together}
    assert len(steps_marked) >= len(steps_drawn) // 2, (sorted(steps_drawn - steps_marked),
                                                        moving[:5])
    assert all(s["visible"] for s in frames), [s for s in frames if not s["visible"]][:3]
    shoot(tab, screenshots, "training_play_projector")
    settle(tab, N_CHARTS)
    assert tab.evaluate(PLAY_STATE)["slider"] == "3,000"
    assert_no_exception(tab, app_server)


def test_at_step_10_the_loss_axis_still_spans_the_run(sized_tab, app_server, screenshots):
    """Issue 51 item 7, as seen on a projector: with the slider at step 10 the loss chart's
    log axis ran to "10B" and squeezed every curve into its left third (fixed on main by the
    marker's label; this holds it in the browser)."""
    tab = sized_tab(1280, 720)
    open_page(tab, app_server, "Training", N_CHARTS, "?present=1&tstep=10")
    assert_no_exception(tab, app_server)
    axes = tab.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .filter(gd => gd._fullLayout.xaxis.type === 'log')
        .map(gd => ({range: gd._fullLayout.xaxis.range,
                     ticks: Array.from(gd.querySelectorAll('.xtick text'))
                                 .map(t => t.textContent)}))""")
    assert len(axes) == 4, axes
    for axis in axes:
        low, high = axis["range"]
        assert 0.9 < low < 1.0 and 3.47 < high < 3.6, axis
        assert axis["ticks"] == ["10", "30", "100", "300", "1,000", "3,000"], axis
    shoot(tab, screenshots, "training_step10_projector")
