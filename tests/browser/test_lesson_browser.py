"""Inside one head's lesson mode in headless chromium, as a teacher uses it on a projector
(1280x720, ?present=1, SmolLM2): the arrow keys walk every step, each step fits one screen
(measured on Streamlit's scrolling container, issue 51 item 8), the steps are numbered once
and every "step N" names the step the lesson shows as N, the sentences are true for the model
(SmolLM2's attention has no biases; no "above" about another screen: item 9), no figure text
is under 14 px, Back goes back, the URL keeps the step, and every idea of the lesson is on
screen."""

from __future__ import annotations

import re

import pytest

from tests.support.browser import assert_no_exception, shoot, wait_fitted  # noqa: E402

pytestmark = pytest.mark.browser

WIDTH, HEIGHT = 1280, 720
QUERY = "?model=smollm2&lesson=1&present=1&layer=1&head=2"
STEP = re.compile(r"Step (\d+) of (\d+): (.*)")
# How tall a screen's content is: the height of the container Streamlit scrolls (its main
# area scrolls in its own container, not the document).
SCREEN_HEIGHT = """() => document.querySelector('[data-testid="stMain"]').scrollHeight"""
HEADINGS = """() => Array.from(document.querySelectorAll('[data-testid="stMain"] h4'))
    .map(h => h.innerText)"""
AT_STEP = """(k) => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
    if (document.querySelector('[data-stale="true"]')) return false;
    const bar = document.querySelector('[data-testid="stProgress"]');
    return !!bar && bar.innerText.includes(`Step ${k} of`);
}"""
# What the lesson teaches, each found on one of its screens (SmolLM2: grouped-query
# attention, RoPE, three projection matrices as the GGUF file names them).
IDEAS = ["X: what the head reads", "three matrices (attn_q, attn_k, attn_v)",
         "(batch, heads, seq, d_k)",
         "np.einsum('ib,ba->ia', X, W_Q)", "Rotary positions (RoPE)", "√d_k",
         "Causal: query i may only see keys j ≤ i", "Every row sums to 1", "online softmax",
         "Chunked attention", "Σⱼ weightⱼ · Vⱼ", "W_O slice of L1.H2",
         "concatenating the heads' outputs", "dL/dW_Q^h = Xᵀ dL/dQ^h", "4 × d_model²",
         "KV cache", "grouped-query (3 K/V heads)", "multi-query (1 K/V head)",
         "of it comes from the key side", "K-composition", "induction toy",
         # step 10 on the toy (item 5): both layer-0 heads credited, the query side drawn,
         # the induction score as the Training page measures it
         "L0.H0 (+8.5) and L0.H1 (+8.3)", "Q: embed", "on the Training page's probe",
         "what it moves", "Kobayashi et al. 2020", "it is a sink", "differ most",
         # the KV cache's screen (item 6): what is kept, in the dtype the model is held in
         "What is cached, and why", "never read again", "× 4 bytes (float32"]


# Every heat map's plot area (as Plotly drew it), its rows and the row labels it shows.
MAPS = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
  .filter(gd => gd.data[0] && gd.data[0].type === 'heatmap')
  .map(gd => ({title: String((gd.layout.title || {}).text || '').slice(0, 40),
               height: gd._fullLayout.yaxis._length, rows: gd.calcdata[0][0].z.length,
               labels: gd.querySelectorAll('.yaxislayer-above .ytick text').length}))"""
MIN_PLOT_PX = 300  # issue 57: no lesson map under 300 px high on a 1280x720 projector


def at_step(tab, k: int) -> None:
    tab.wait_for_function(AT_STEP, arg=k, polling=200)
    wait_fitted(tab)


@pytest.mark.slow
def test_the_lesson_walks_with_the_arrow_keys_and_each_step_fits_the_projector(
        sized_tab, app_server, screenshots):
    tab = sized_tab(WIDTH, HEIGHT)
    tab.goto(f"{app_server.url}/Inside_One_Head{QUERY}")
    at_step(tab, 1)
    n = int(STEP.search(tab.locator('[data-testid="stProgress"]').inner_text()).group(2))
    assert n >= 12
    seen, heights, titles, small, headings, cramped = [], {}, {}, {}, [], {}
    for k in range(1, n + 1):
        if k > 1:
            tab.mouse.click(WIDTH - 4, HEIGHT // 2)  # the page has the focus, not a widget
            tab.keyboard.press("ArrowRight")
            at_step(tab, k)
        assert_no_exception(tab, app_server)
        assert f"lstep={k}" in tab.url or k == 1, tab.url  # a link to this step
        heights[k] = tab.evaluate(SCREEN_HEIGHT)
        titles[k] = STEP.search(tab.locator('[data-testid="stProgress"]').inner_text()).group(3)
        seen.append(tab.locator('[data-testid="stMain"]').inner_text())
        headings += tab.evaluate(HEADINGS)
        smallest = min([f["smallest"] for f in tab.evaluate(FIGURE_PROBE, [30, 9])] or [99])
        if smallest < 14:
            small[k] = smallest
        maps = [m for m in tab.evaluate(MAPS) if m["height"] < MIN_PLOT_PX
                or (m["rows"] <= 40 and m["labels"] < m["rows"])]
        if maps:  # too low to read, or rows without their labels
            cramped[k] = maps
        shoot(tab, screenshots, f"lesson_projector_step{k:02d}")
    too_long = {k: h for k, h in heights.items() if h > HEIGHT}
    assert not too_long, too_long  # every step on one screen
    assert not small, small  # no figure text under 14 px on a projector
    assert not cramped, cramped  # every map >= 300 px high, each of its rows labelled
    # numbered once: the progress line counts the screens, no heading carries a number
    assert not [h for h in headings if re.match(r"\d+[a-z]?\. ", h)], headings
    text = "\n".join(seen)
    for number in re.findall(r"\bsteps? (\d+)", text):  # "step N" names a screen there is
        assert 1 <= int(number) <= n, number
    rope = int(re.search(r"RoPE, step (\d+)", seen[0]).group(1))
    assert "RoPE" in titles[rope], (rope, titles)
    # true for SmolLM2: no attention biases, and no word of "above" across screens
    assert "has no biases" in text and "biases are included" not in text, "biases"
    assert "+ b_Q" not in text and "+ b_a" not in text, "a bias in a formula"
    assert "gradients above" not in text
    missing = [idea for idea in IDEAS if idea not in text]
    assert not missing, missing
    # the last step stays the last; Back and the left arrow go back
    tab.keyboard.press("ArrowRight")
    tab.wait_for_timeout(1500)
    assert f"Step {n} of {n}" in tab.locator('[data-testid="stProgress"]').inner_text()
    tab.get_by_role("button", name="← Back").click()
    at_step(tab, n - 1)
    tab.mouse.click(WIDTH - 4, HEIGHT // 2)
    tab.keyboard.press("ArrowLeft")
    at_step(tab, n - 2)
    # a prepared link opens on its step
    tab.goto(f"{app_server.url}/Inside_One_Head{QUERY}&lstep=5")
    at_step(tab, 5)


# Every text drawn in every figure, its size, and whether it pokes out of its figure; the
# plot area of every layer x head map (cells [layers, heads] or [heads, layers]).
FIGURE_PROBE = """([nLayer, nHead]) => Array.from(document.querySelectorAll('.js-plotly-plot'))
  .map(gd => {
    const box = gd.getBoundingClientRect();
    const texts = Array.from(gd.querySelectorAll('svg text'))
        .filter(t => t.textContent.trim() && t.getBoundingClientRect().width > 0);
    const cells = (gd.layout.meta || {}).cells || [];
    const layerHead = cells.length === 2 && ((cells[0] === nLayer && cells[1] === nHead)
                                             || (cells[0] === nHead && cells[1] === nLayer));
    return {
      title: String((gd.layout.title || {}).text || '').slice(0, 50),
      smallest: Math.min(...texts.map(t => parseFloat(getComputedStyle(t).fontSize)), 99),
      cut: Array.from(gd.querySelectorAll('.gtitle, .legend text')).filter(t => {
          const r = t.getBoundingClientRect();
          return r.right > box.right + 2 || r.left < box.left - 2; }).length,
      layerHeadWidth: layerHead ? gd._fullLayout.xaxis._length : null,  // as drawn
    };
  })"""
PRESENT_PAGES = [("Attention_Maps", 5), ("Entropy", 5), ("Head_Similarity", 3),
                 ("Pruning_Impact", 1), ("Inside_One_Head", 9), ("Predictions", 3),
                 ("Head_Roles", 1)]
# ideas of the lesson that live on the other pages (cross-attention, cross-modal attention
# and the relative position bias are walked on T5 and the digit reader elsewhere:
# test_encoder_decoder_browser.py)
PAGE_IDEAS = {"Attention_Maps": ["All heads at a glance", "Grouped-query attention"],
              "Entropy": ["How far each head looks: mean attention distance"],
              "Head_Similarity": ["Jensen-Shannon", "cosine (1 − cos)"],
              "Pruning_Impact": ["Switch heads off", "Gradient importance"]}


@pytest.mark.slow
def test_every_figure_reads_from_the_back_of_the_room(sized_tab, app_server, screenshots):
    """At 1280x720 with ?present=1: no text in a figure under 14 px, every layer x head map
    at least half the window wide, no title or legend cut off at a figure's edge."""
    from tests.support.browser import open_page

    tab = sized_tab(WIDTH, HEIGHT)
    problems, maps_seen = [], 0
    for path, n_charts in PRESENT_PAGES:
        open_page(tab, app_server, path, n_charts, "?model=smollm2&present=1")
        wait_fitted(tab)
        assert_no_exception(tab, app_server)
        body = tab.locator('[data-testid="stMain"]').inner_text()
        problems += [(path, "missing", idea) for idea in PAGE_IDEAS.get(path, [])
                     if idea not in body]
        for figure in tab.evaluate(FIGURE_PROBE, [30, 9]):
            if figure["smallest"] < 14:
                problems.append((path, figure["title"], "text", figure["smallest"]))
            if figure["cut"]:
                problems.append((path, figure["title"], "cut", figure["cut"]))
            if figure["layerHeadWidth"] is not None:
                maps_seen += 1
                if figure["layerHeadWidth"] < WIDTH / 2:
                    problems.append((path, figure["title"], "narrow",
                                     figure["layerHeadWidth"]))
        shoot(tab, screenshots, f"present_{path}")
    assert not problems, problems
    assert maps_seen >= 8  # the probe saw the layer x head maps it is about


@pytest.mark.slow
def test_the_toy_lesson_opens_in_a_tab_of_its_own(sized_tab, app_server):
    """Issue 57 item 2: step 10's toy link replaced the session's model and text (the
    teacher's sentence gone from every page, the toy's Max tokens left on SmolLM2, three
    Back presses to return). It opens a tab, a session of its own, presenting as this one
    does; this tab keeps the teacher's model, text and Max tokens, its step and its keys."""
    from urllib.parse import parse_qs, urlparse

    tab = sized_tab(WIDTH, HEIGHT)
    own = "My class reads this sentence about a tired animal."
    tab.goto(f"{app_server.url}/Inside_One_Head?model=smollm2&lesson=1&present=1&lstep=10"
             f"&max_tokens=100&text={own.replace(' ', '+')}")
    at_step(tab, 10)
    with tab.context.expect_page() as opened:
        tab.get_by_text("Open the lesson on the toy").click()  # the old link, too
    toy = opened.value
    toy.set_default_timeout(180_000)
    toy.wait_for_function(AT_STEP, arg=1, polling=200)
    asked = parse_qs(urlparse(toy.url).query)
    assert asked["model"] == ["induction-toy"] and asked["present"] == ["1"], toy.url
    assert_no_exception(toy, app_server)
    tab.bring_to_front()
    tab.mouse.click(WIDTH - 4, HEIGHT // 2)
    tab.keyboard.press("ArrowLeft")  # this session goes on where it was
    at_step(tab, 9)
    kept = parse_qs(urlparse(tab.url).query)
    assert kept.get("model") == ["smollm2"] and kept.get("text") == [own], tab.url
    assert kept.get("max_tokens") == ["100"], tab.url


@pytest.mark.slow
def test_after_continue_each_step_still_fits_and_the_way_out_is_in_sight(sized_tab, app_server):
    """Issue 57 item 7: after Continue (the model's 20 tokens after the text) steps 3, 11 and
    16 grew to 732-759 px (the line about the written tokens took the screen's rows), and
    the way out of the lesson was inside the folded sidebar."""
    tab = sized_tab(WIDTH, HEIGHT)
    for k in (3, 11, 16):
        tab.goto(f"{app_server.url}/Inside_One_Head{QUERY}&cont=20&lstep={k}")
        at_step(tab, k)
        assert_no_exception(tab, app_server)
        assert tab.evaluate(SCREEN_HEIGHT) <= HEIGHT, (k, tab.evaluate(SCREEN_HEIGHT))
    leave = tab.get_by_role("button", name="✕")
    box = leave.bounding_box()
    assert box and box["y"] + box["height"] <= HEIGHT and box["x"] + box["width"] <= WIDTH
    leave.click()
    tab.wait_for_function("""() => !document.querySelector('[data-testid="stProgress"]')
        && document.querySelector('[data-testid="stApp"]')
               .getAttribute('data-test-script-state') === 'notRunning'""", polling=200)
    assert "lesson=0" in tab.url or "lesson=" not in tab.url, tab.url


@pytest.mark.slow
def test_a_phone_opening_a_teachers_presenting_link_keeps_its_own_layout(browser, app_server):
    """Issue 57 item 9: the link a teacher shares carries present=1, which on a phone set
    the type at 24 px and shrank its map to 170 px for 35 tokens. A phone ignores it."""
    from tests.support.browser import DEVICES, close_sidebar_on_a_phone

    context = browser.new_context(**DEVICES["phone"])
    try:
        tab = context.new_page()
        tab.set_default_timeout(180_000)
        tab.goto(f"{app_server.url}/Attention_Maps?model=smollm2&present=1")
        close_sidebar_on_a_phone(tab)
        tab.wait_for_function("""() => document.querySelectorAll('.js-plotly-plot').length""")
        wait_fitted(tab)
        assert_no_exception(tab, app_server)
        assert tab.evaluate("getComputedStyle(document.documentElement).fontSize") != "24px"
        widths = tab.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
            .filter(gd => gd.data[0] && gd.data[0].type === 'heatmap')
            .map(gd => gd._fullLayout.xaxis._length)""")
        assert widths and max(widths) >= 250, widths  # the phone's map keeps its width
    finally:
        context.close()
