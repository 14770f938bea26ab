"""Issue 51's researcher (items 11-14), walked again in headless chromium at the desk size
where each was seen (1400 px), on the bundled SmolLM2 (MiniLM for its ablation map): each
test failed on main before the fix it holds.

11. Path patching into L23.H3: every cell within +-0.01 on a colour bar stretched to +-0.01.
12. Editing the clean prompt kept the old corrupted prompt, targets and token to replace,
    and patched at once; "Alice" replaced " John" as "park,Alice"; a prediction chip left
    the contrast alone.
13. The circuit panel: "Faithfulness 0.39" above "Heads' faithfulness 61%" and "Heads'
    necessity 210%", explained in tooltips only.
14. MiniLM's ablation map wrote 10-px numbers that ran together, a pruning title was cut,
    and a click from the circuit graph into Attention maps took three Back presses."""

from __future__ import annotations

import pytest
from tests.support.browser import (assert_no_exception, error_texts, open_page,  # noqa: E402
                                   settle, shoot)
from tests.support.circuits_browser import (NODE_CENTRE, click_point,  # noqa: E402
                                            run_path_patching)
from tests.support.layout_probe import layout_problems  # noqa: E402

pytestmark = pytest.mark.browser

DESK = (1400, 1000)
QUERY = "?model=smollm2"
NEW_CLEAN = "When Alice and Bob went to the park, Bob gave a drink to"

# every patching map's colour range, by its title
COLOUR_RANGES = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
    .filter(gd => gd._fullData.some(t => t.type === 'heatmap'))
    .map(gd => [String(gd.layout.title.text), gd._fullData[0].zmin, gd._fullData[0].zmax])"""
# every figure's title against the figure's own box, and the numbers written in cells
TITLES_AND_CELLS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => {
    const box = gd.getBoundingClientRect();
    const title = gd.querySelector('.g-gtitle text');
    const right = title ? title.getBoundingClientRect().right : box.left;
    const cells = Array.from(gd.querySelectorAll('g.heatmap-label text'))
        .filter(el => el.textContent.trim() && el.getBoundingClientRect().width > 0)
        .map(el => parseFloat(getComputedStyle(el).fontSize));
    return {title: String(gd.layout.title.text), overrun: right - box.right, cells};
})"""


def main_text(tab) -> str:
    return tab.locator('[data-testid="stMain"]').inner_text()


def type_into(tab, label: str, text: str) -> None:
    """Type into a text box with the keyboard, then commit it (Enter)."""
    box = tab.get_by_label(label, exact=True)
    box.click()
    tab.keyboard.press("Control+A")
    tab.keyboard.type(text)
    tab.keyboard.press("Enter")


def finished(tab) -> None:
    tab.wait_for_function("""() => document.querySelector('[data-testid="stApp"]')
        .getAttribute('data-test-script-state') === 'notRunning'""", polling=200)
    tab.wait_for_timeout(400)
    tab.wait_for_function("""() => document.querySelector('[data-testid="stApp"]')
        .getAttribute('data-test-script-state') === 'notRunning'""", polling=200)


@pytest.mark.slow
def test_11_path_patching_within_noise_says_so_on_the_shared_scale(sized_tab, app_server,
                                                                   screenshots):
    tab = sized_tab(*DESK)
    open_page(tab, app_server, "Circuits", 1, QUERY)
    heads = tab.evaluate(COLOUR_RANGES)
    assert [(low, high) for _, low, high in heads] == [(-1, 1)], heads
    said = main_text(tab)
    assert said.count("Colours on this page") == 1  # stated once
    assert "from the corrupted run's metric (0) to the clean run's (1)" in said
    tab.goto(f"{app_server.url}/Circuits{QUERY}&c_view=paths&c_recv=L23.H3&c_part=q")
    run_path_patching(tab, "L23.H3", "q", timeout=300_000)
    assert_no_exception(tab, app_server)
    paths = tab.evaluate(COLOUR_RANGES)
    assert [(low, high) for _, low, high in paths] == [(-1, 1)], paths  # not +-0.01
    said = main_text(tab)
    assert "Nothing here stands out from noise" in said, said
    assert "Darkest" not in said  # no caption reads structure into noise
    assert "−1 = all the way" not in said and "0 = no change from the clean" not in said
    tab.locator(".js-plotly-plot").first.scroll_into_view_if_needed()
    shoot(tab, screenshots, "researcher_11_paths_within_noise")


def test_12_a_new_clean_prompt_marks_what_depends_on_it(sized_tab, app_server, screenshots):
    tab = sized_tab(*DESK)
    open_page(tab, app_server, "Circuits", 1, QUERY)
    type_into(tab, "Clean prompt", NEW_CLEAN)
    tab.wait_for_function("() => document.body.innerText.includes('The clean prompt changed')")
    finished(tab)
    assert_no_exception(tab, app_server)
    assert tab.locator(".js-plotly-plot").count() == 0  # nothing patched on the old pair
    warning = tab.locator('[data-testid="stAlert"]').filter(has_text="clean prompt changed")
    said = warning.inner_text()
    assert "the corrupted prompt, the target token and the contrast token were set" in said \
        .lower(), said
    shoot(tab, screenshots, "researcher_12_stale")
    # the swap helper (opened by itself) offers the new prompt's tokens
    tab.get_by_role("combobox", name="Token to replace").click()
    if not tab.get_by_role("listbox").is_visible():  # a click that only focused the box
        tab.keyboard.press("ArrowDown")
    tab.get_by_role("listbox").wait_for()
    options = tab.get_by_role("option").all_inner_texts()
    assert "9: ␣Bob" in options and not any("John" in o for o in options), options
    tab.get_by_role("option", name="9: ␣Bob", exact=True).click()
    type_into(tab, "Replace it with", "Alice")
    tab.get_by_role("button", name="Swap").click()
    tab.wait_for_selector('[data-testid="stAlertContentError"]')
    errors = error_texts(tab)
    assert any("use ' Alice'" in e for e in errors), errors
    type_into(tab, "Replace it with", " Alice")
    tab.get_by_role("button", name="Swap").click()
    tab.wait_for_function(f"""() => Array.from(document.querySelectorAll('input'))
        .some(i => i.value === {NEW_CLEAN.replace(", Bob", ", Alice")!r})""")
    finished(tab)
    # a prediction chip: the target, and what the corrupted prompt predicts the contrast
    tab.get_by_role("radio", name="␣Alice", exact=True).click()
    tab.wait_for_function("""() => Array.from(document.querySelectorAll('input'))
        .some(i => i.value === ' Alice')""")
    finished(tab)
    target = tab.get_by_label("Target token", exact=True).input_value()
    contrast = tab.get_by_label("Contrast token", exact=True).input_value()
    assert (target, contrast) == (" Alice", " Bob"), (target, contrast)
    # every field now fits the new prompt: the warning goes and the pair is patched
    tab.wait_for_selector(".js-plotly-plot", timeout=300_000)
    settle(tab, 1)
    assert "The clean prompt changed" not in main_text(tab)
    assert_no_exception(tab, app_server)
    shoot(tab, screenshots, "researcher_12_patched")


@pytest.mark.slow
def test_13_the_circuit_panels_figures_each_one_name_format_and_definition(
        sized_tab, app_server, screenshots):
    tab = sized_tab(*DESK)
    open_page(tab, app_server, "Circuits", 1, QUERY + "&c_view=circuit")
    tab.wait_for_function("() => document.body.innerText.includes('Necessity of its heads')",
                          timeout=300_000)
    finished(tab)
    assert_no_exception(tab, app_server)
    metrics = dict(zip(tab.locator('[data-testid="stMetricLabel"]').all_inner_texts(),
                       tab.locator('[data-testid="stMetricValue"]').all_inner_texts()))
    for label in ("Recovered by the kept edges", "Faithfulness of its heads",
                  "Necessity of its heads"):
        assert metrics[label].endswith("%"), metrics  # one format: a share
    assert "Faithfulness" not in metrics and "Heads' necessity" not in metrics
    said = main_text(tab)
    assert "F(C) / F(M)" in said and "1 − F(M \\ C) / F(M)" in said  # on the page
    assert "0%) to the clean run's (100%)" in said
    necessity = float(metrics["Necessity of its heads"].rstrip("%"))
    if necessity > 100:
        assert "Over 100%: with the circuit's heads ablated the metric does not just fall" \
            in said
    shoot(tab, screenshots, "researcher_13_circuit_panel")


def ablation_page_is_legible(tab, server, screenshots, model: str, charts: int) -> list:
    open_page(tab, server, "Pruning_Impact", charts, f"?model={model}")
    assert_no_exception(tab, server)
    figures = tab.evaluate(TITLES_AND_CELLS)
    assert all(f["overrun"] <= 1 for f in figures), figures  # no title cut
    cells = [size for f in figures for size in f["cells"]]
    assert all(size >= 12 for size in cells), figures
    assert not layout_problems(tab), layout_problems(tab)  # nothing runs together
    assert main_text(tab).count("Colours on this page") == 1
    tab.locator(".js-plotly-plot").first.scroll_into_view_if_needed()
    shoot(tab, screenshots, f"researcher_14_ablation_{model}")
    return cells


def test_14_minilms_ablation_numbers_are_legible_and_its_title_whole(sized_tab, app_server,
                                                                     screenshots):
    cells = ablation_page_is_legible(sized_tab(*DESK), app_server, screenshots, "minilm", 1)
    assert len(cells) == 72  # its 6 x 12 map has room for every number at 12 px


@pytest.mark.slow
def test_14_smollm2s_ablation_title_is_whole(sized_tab, app_server, screenshots):
    ablation_page_is_legible(sized_tab(*DESK), app_server, screenshots, "smollm2", 3)


def test_14_back_from_the_clicked_heads_map_in_one_press(sized_tab, app_server, screenshots):
    tab = sized_tab(*DESK)
    open_page(tab, app_server, "Circuits", 1, QUERY + "&c_view=circuit")
    click_point(tab, NODE_CENTRE, "L23.H3")
    tab.wait_for_url("**/Attention_Maps**", timeout=60_000)
    settle(tab, 3)
    tab.wait_for_timeout(1500)  # any later change of the address would be a step more
    assert "layer=23" in tab.url and "head=3" in tab.url
    tab.go_back()
    tab.wait_for_url("**/Circuits**", timeout=30_000)
    finished(tab)
    assert_no_exception(tab, app_server)
    shoot(tab, screenshots, "researcher_14_back")
