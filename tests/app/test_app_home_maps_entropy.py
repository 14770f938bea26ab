"""The Streamlit app, page by page, through Streamlit's AppTest (no browser).

Every page renders for the bundled MiniLM and for random-weight GPT-2 and BERT checkpoints,
and each kind of bad input shows a clear message on every page, never a traceback. The
model and the text reach the app through the URL's query parameters, as a copied link does.
"""

from __future__ import annotations

import base64
import functools
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402
from tests.support.app_pages import charts, folder_params, run_page, texts  # noqa: E402

from mha_viz.ui import DEFAULT_TEXT, page_files  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["app.py", "pages/1_Attention_Maps.py", "pages/2_Entropy.py"]
CHARTS = {"app.py": 0, "pages/1_Attention_Maps.py": 5, "pages/2_Entropy.py": 5}


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch):
    # A failure inside a page must fail the test, not turn into the friendly message.
    monkeypatch.setenv("MHA_VIZ_RAISE", "1")


def assert_clean(at: AppTest, page: str) -> None:
    assert not at.exception, texts(at.exception)
    assert not at.error, texts(at.error)
    assert len(at.get("plotly_chart")) == CHARTS[page]


# --------------------------------------------------------------------------- good input


@pytest.mark.parametrize("page", PAGES)
def test_minilm_pages_render(page):
    at = run_page(page)
    assert_clean(at, page)
    if page == "app.py":
        metrics = {m.label: m.value for m in at.metric}
        assert metrics["Layers"] == "6" and metrics["Heads per layer"] == "12"
        assert metrics["d_model"] == "384" and metrics["d_head"] == "32"
        assert metrics["Attention parameters per layer"] == f"{4 * 384 ** 2:,}"
        assert any("all-MiniLM-L6-v2" in m for m in texts(at.markdown))
    for spec in charts(at):  # every figure is tagged with the input it shows
        assert spec["layout"]["meta"]["input"]


@pytest.mark.parametrize("page", PAGES)
def test_gpt2_checkpoint_pages_render(page, gpt2_folder):
    at = run_page(page, folder_params(gpt2_folder) | {"hide": "first"})
    assert_clean(at, page)
    assert at.sidebar.text_input[0].value == str(gpt2_folder)
    assert not [t for t in at.sidebar.text_area if t.label.startswith("Sentence B")]
    if page == "pages/1_Attention_Maps.py":
        assert [t.label for t in at.main.toggle] == ["Mean of the layer's heads",
                                                     "Grey out the causal mask"]
        assert any("Hidden 1 token" in t for t in texts(at.info))
        heat = [c for c in charts(at) if "who attends" in c["layout"]["title"]["text"]][0]
        assert "grey = masked (causal)" in heat["layout"]["title"]["text"]
    if page == "pages/2_Entropy.py":
        names = {t["name"] for c in charts(at) for t in c["data"] if t.get("mode")}
        assert "first token" in names and "[CLS]" not in names


@pytest.mark.parametrize("page", PAGES)
def test_bert_checkpoint_sentence_pair_pages_render(page, bert_folder):
    params = folder_params(bert_folder) | {"text": "Where is the cat?",
                                           "pair": "The cat is on the mat.", "hide": "special"}
    at = run_page(page, params)
    assert_clean(at, page)
    pair_box = [t for t in at.sidebar.text_area if t.label.startswith("Sentence B")]
    assert pair_box and pair_box[0].value == "The cat is on the mat."
    if page == "pages/1_Attention_Maps.py":
        assert "Outline sentence-pair blocks" in [t.label for t in at.toggle]
        heat = [c for c in charts(at) if "who attends" in c["layout"]["title"]["text"]][0]
        assert {s["name"] for s in heat["layout"]["shapes"]} >= {"A→A", "A→B", "B→A", "B→B"}
        assert any("renormalized" in t for t in texts(at.info))


# What a reader first sees: the figures at the top, and the rest of the page as folded
# sections (each Plotly figure costs a new tab ~0.1-0.2 s of the browser's time).
FIRST_OPEN = {
    "pages/1_Attention_Maps.py": (3, ["Aggregates over heads and layers",
                                      "Which heads link two tokens"]),
    "pages/2_Entropy.py": (1, ["How far each head looks: mean attention distance",
                               "Entropy of each query token in one head",
                               "Where the attention goes: mass on kinds of tokens"]),
    "pages/3_Head_Similarity.py": (2, ["The maps of L0.H0 and its nearest heads"]),
    "pages/5_Inside_One_Head.py": (1, ["Q, K, V: three projections",
                                       "Scores: every query against every key", "The mask",
                                       "Softmax: the attention weights",
                                       "Weights × V: each token's mix of values",
                                       "W_O: from one head back to the model's width"]),
    "pages/7_Head_Roles.py": (0, ["Every head, role by role",
                                  "One head on the text and on the probe"]),
}


@pytest.mark.parametrize("page", list(FIRST_OPEN))
def test_a_page_opens_on_its_first_figures_with_the_rest_folded(page):
    n_charts, folded = FIRST_OPEN[page]
    at = run_page(page, {"open": ""})
    assert not at.exception and not at.error, texts(at.exception) + texts(at.error)
    assert len(at.get("plotly_chart")) == n_charts
    labels = [e.label for e in at.expander]
    assert [label for label in labels if label in folded] == folded, labels


def test_a_folded_section_is_computed_only_once_opened(monkeypatch):
    from mha_viz import analysis

    calls = []
    real = analysis.mean_attention_distance

    @functools.wraps(real)  # its name and signature: the result's key stays the same
    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(analysis, "mean_attention_distance", counted)
    text = "A folded section waits for its reader."
    at = run_page("pages/2_Entropy.py", {"open": "", "text": text})
    assert not at.exception and len(at.get("plotly_chart")) == 1 and not calls
    at = run_page("pages/2_Entropy.py", {"open": "distance", "text": text})  # a link opens it
    assert not at.exception and calls
    titles = [c["layout"]["title"]["text"] for c in charts(at)]
    assert len(titles) == 2 and titles[1].startswith("Mean attention distance per head")
    at = run_page("pages/2_Entropy.py", {"open": "", "text": text},
                  session={"_mv_open_class_mass": True})  # opened earlier in the session
    titles = [c["layout"]["title"]["text"] for c in charts(at)]
    assert len(titles) == 3 and titles[1].startswith("Attention mass by token class")


def test_layer_head_choice_survives_page_switch_and_lives_in_the_url():
    at = run_page("pages/1_Attention_Maps.py", {"layer": "3", "head": "7", "agg": "rollout"})
    assert_clean(at, "pages/1_Attention_Maps.py")
    assert [s.value for s in at.selectbox if s.label in ("Layer", "Head")] == [3, 7]
    assert any("One head: L3.H7" in h for h in texts(at.subheader))
    assert at.query_params["layer"] == "3" and at.query_params["agg"] == "rollout"
    at.selectbox(key="_mv_w_head").set_value(2).run()
    assert at.query_params["head"] == "2"
    at.switch_page("pages/2_Entropy.py").run()
    assert_clean(at, "pages/2_Entropy.py")
    assert [s.value for s in at.selectbox if s.label in ("Layer", "Head")] == [3, 2]
    assert at.query_params["layer"] == "3" and at.query_params["head"] == "2"
    # back to the default: the parameter leaves the URL
    at.selectbox(key="_mv_w_layer").set_value(0).run()
    assert "layer" not in at.query_params


def test_example_buttons_fill_the_text(gpt2_folder):
    at = run_page("app.py", folder_params(gpt2_folder))
    at.button(key="_mv_example_induction").click().run()
    text = at.sidebar.text_area[0].value
    half = text[:len(text) // 2].strip()  # a passage and its repeat (a short one when the
    assert len(half) > 10 and text.count(half) == 2, text  # checkpoint's context is small)
    at.button(key="_mv_example_pair").click().run()  # GPT-2: the pair becomes one text
    assert "Where did the cat sleep" in at.sidebar.text_area[0].value
    assert "warm mat" in at.sidebar.text_area[0].value
    assert not at.exception and not at.error


def test_the_repeated_text_example_repeats_within_a_small_context():
    """Issue 57 item 8: on the induction toy (a 64-token context) the example was cut at 64
    tokens, before its repeat, so no induction showed."""
    from mha_viz import analysis, load_model

    at = run_page("app.py", {"model": "induction-toy"})
    at.button(key="_mv_example_induction").click().run()
    text = at.sidebar.text_area[0].value
    toy = load_model("induction-toy")
    assert len(toy.tokenizer(text)["input_ids"]) < toy.info.max_positions, text  # uncut
    half = text[:len(text) // 2].strip()
    assert len(half) > 10 and text.count(half) == 2, text  # a passage, then its repeat
    analysis.induction_example(toy.trace(text))
    assert not at.exception and not at.error


def test_text_change_reaches_every_figure():
    at = run_page("pages/1_Attention_Maps.py")
    before = {c["layout"]["meta"]["input"] for c in charts(at)}
    at.sidebar.text_area[0].set_value("Students read about attention heads.").run()
    after = {c["layout"]["meta"]["input"] for c in charts(at)}
    assert len(before) == len(after) == 1 and before != after
    assert at.query_params["text"] == "Students read about attention heads."


def test_long_input_is_downsampled_and_says_so():
    text = " ".join(["the animal did not cross the street because it was too tired"] * 40)
    at = run_page("pages/1_Attention_Maps.py", {"text": text, "max_tokens": "300"})
    assert not at.exception and not at.error, texts(at.error)
    # past 256 tokens a head is its block means over the whole text, and a window of it at
    # full resolution (as for an input of any length past that)
    assert [c.key for c in at.get("plotly_chart")] == ["grid", "head", "window", "lines",
                                                       "aggregate", "link"]
    notes = texts(at.caption)
    assert any("Long input (300 tokens)" in c and "block-averaged" in c for c in notes)
    assert any("line view shows 40 tokens at a time" in c for c in notes)
    head, window = charts(at)[1:3]
    assert "overview" in head["layout"]["title"]["text"]
    assert head["data"][0]["z"]["shape"] == "150, 150"  # 300 tokens in 2 x 2 blocks
    assert window["data"][0]["z"]["shape"] == "128, 128"  # the default window, whole
    assert any("truncated" in c.lower() or "only the first 300" in c for c in texts(at.warning))
    grid = [c for c in charts(at) if c["data"][0].get("name") == "thumbnails"][0]
    assert "downsampled" in grid["layout"]["title"]["text"]


# --------------------------------------------------------------------------- bad input

BAD_TEXTS = {
    "empty": ("", "The text is empty"),
    "whitespace": ("  \n\t  ", "The text is empty"),
    "control characters only": ("\x00\x01\x02", "no tokens"),
}


# every page that reads the sidebar's text (the Corpus page reads a corpus instead, the
# Circuits page its own two prompts: tests/test_app_circuits.py; the Training page a series
# of checkpoints: tests/app/test_app_training.py)
EVERY_PAGE = ["app.py", *(page.path for page in page_files()[1:]
                          if not page.path.endswith(("_Corpus.py", "_Circuits.py",
                                                     "_Training.py")))]


@pytest.mark.parametrize("page", EVERY_PAGE)
@pytest.mark.parametrize("case", list(BAD_TEXTS))
def test_bad_text_shows_a_clear_error(page, case):
    """On every page: one message that says what is wrong and what to do, and no chart."""
    text, message = BAD_TEXTS[case]
    at = run_page(page, session={"_mv_state_text": text})
    assert not at.exception, texts(at.exception)
    errors = texts(at.error)
    assert len(errors) == 1 and message in errors[0], errors
    assert "Change the text" in errors[0]
    assert not at.get("plotly_chart")


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("text", ["emoji 🙂👍🏽 ZWJ 👨‍👩‍👧 and RTL שלום مرحبا",
                                  "lone surrogate \ud800 and combining e\u0301 a\u0308",
                                  "\u200b\u200bzero width, NUL \x00 inside, $x$ <b>tags</b> *md*"])
def test_odd_unicode_renders(page, text, gpt2_folder):
    at = run_page(page, folder_params(gpt2_folder), session={"_mv_state_text": text})
    assert_clean(at, page)


@pytest.mark.parametrize("page", PAGES)
def test_over_long_text_is_cut_with_a_warning(page, bert_folder):
    text = "the cat sat on the mat and " * 200  # far beyond the checkpoint's 128 positions
    at = run_page(page, folder_params(bert_folder), session={"_mv_state_text": text})
    assert_clean(at, page)
    warnings = texts(at.warning)
    assert any("only the first 128 are traced" in w for w in warnings), warnings


@pytest.mark.parametrize("page", PAGES)
def test_folder_that_is_not_a_checkpoint(page, tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    at = run_page(page, folder_params(tmp_path))
    assert not at.exception, texts(at.exception)
    errors = texts(at.error)
    assert errors and all("no config.json" in e for e in errors), errors
    assert "The model could not be loaded" in errors[0]


@pytest.mark.parametrize("page", PAGES)
def test_missing_folder_and_empty_folder_field(page, tmp_path):
    at = run_page(page, folder_params(tmp_path / "does-not-exist"))
    assert not at.exception
    assert at.error and "not a checkpoint this server offers" in texts(at.error)[0]
    at = run_page(page, {"model": "folder"})
    assert not at.exception
    assert at.error and "No folder given" in texts(at.error)[0]


def test_a_visitor_probing_server_paths_learns_nothing(tmp_path, monkeypatch):
    """The page shows one message for a folder that exists outside the allowed folders, one
    that does not exist, a file and a climb; none names a server folder."""
    shown = set()
    for probe in ["/etc", "/proc/self", "/no/such/dir", "../../etc", "/etc/passwd",
                  str(tmp_path / "missing")]:
        at = run_page("pages/1_Attention_Maps.py", folder_params(probe))
        assert not at.exception
        shown.add(texts(at.error)[0])
    assert len(shown) == 1, shown
    assert "not a checkpoint this server offers" in shown.pop()


def figure_z(chart: dict) -> np.ndarray:
    """A heatmap's numbers as Plotly received them (a typed array, base64)."""
    z = chart["data"][0]["z"]
    shape = [int(s) for s in z["shape"].split(",")]
    return np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"]).reshape(shape)


def test_a_text_whose_maps_exceed_the_memory_budget_gets_maps_on_demand(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_MEMORY_MB", "100")  # one input may take 25 MB
    text = "the cat sat on the mat " * 60  # ~360 tokens: 6 x 12 x 360^2 x 4 = 37 MB of maps
    at = run_page("pages/1_Attention_Maps.py", session={"_mv_state_text": text})
    assert not at.exception and not at.error, texts(at.error)
    assert any("computed when you look at them" in t for t in texts(at.info))
    by_key = dict(zip((c.key for c in at.get("plotly_chart")), charts(at)))
    assert "overview" in by_key["head"]["layout"]["title"]["text"]
    assert "who attends to whom" in by_key["window"]["layout"]["title"]["text"]
    head_overview = by_key["head"]["data"][0]["z"]
    # the layer's head mean, in the overview and the window
    at.toggle(key="_mv_w_lmean").set_value(True).run()
    assert not at.exception and not at.error, texts(at.error)
    by_key = dict(zip((c.key for c in at.get("plotly_chart")), charts(at)))
    title = by_key["head"]["layout"]["title"]["text"]
    assert title.startswith("L0 head mean: overview"), title
    title = by_key["window"]["layout"]["title"]["text"]
    assert title.startswith("L0 head mean: who attends to whom"), title
    assert by_key["head"]["data"][0]["z"] != head_overview
    assert any("every head of layer 0" in t for t in texts(at.caption))
    # Entropy, Head similarity and Head roles stream their statistics over blocks of rows
    for page, n_charts in (("pages/2_Entropy.py", 5), ("pages/3_Head_Similarity.py", 3),
                           ("pages/7_Head_Roles.py", 10)):
        at = run_page(page, session={"_mv_state_text": text})
        assert not at.exception and not at.error, texts(at.error)
        assert len(charts(at)) == n_charts, page
    # hiding tokens, as for any input: the trace as shown stays on demand
    for page, n_charts in (("pages/2_Entropy.py", 5), ("pages/7_Head_Roles.py", 10)):
        at = run_page(page, {"hide": "special"}, session={"_mv_state_text": text})
        assert not at.exception and not at.error, texts(at.error)
        assert len(charts(at)) == n_charts, page
        assert any("Hidden 2 token(s)" in t for t in texts(at.info)), page
    # Inside one head holds one layer's maps, which fit: it draws every step
    at = run_page("pages/5_Inside_One_Head.py", session={"_mv_state_text": text})
    assert not at.exception and not at.error, texts(at.error)
    assert len(charts(at)) == 9  # as for a short text (MiniLM)
    # Pruning impact: the sweep of a text this long waits for its button
    at = run_page("pages/4_Pruning_Impact.py", session={"_mv_state_text": text})
    assert not at.exception and not at.error, texts(at.error)
    assert any("so it waits for the button above" in t for t in texts(at.info))
    # the same pages refuse what one layer's maps or a backward pass would not fit in
    from mha_viz.core import budget

    share = 4 * (3 * 12 + 4) * 200 ** 2  # what one MiniLM layer's steps hold over 200 tokens
    monkeypatch.setattr(budget, "ONE_INPUT_SHARE", share / budget.budget_bytes())
    at = run_page("pages/5_Inside_One_Head.py", session={"_mv_state_text": text})
    assert not at.exception and not at.error and not charts(at)
    assert any("it runs on up to 200 tokens. Set *Max tokens* in the sidebar to that or fewer"
               in t.replace("\\", "") for t in texts(at.info)), texts(at.info)


def test_error_messages_never_show_the_servers_folders():
    from mha_viz import ui
    from mha_viz.checkpoints import allowed_dirs

    cache = allowed_dirs(ui.APP_DIR / "models")[0]
    message = ui.without_server_paths(
        f"config.json in '{cache}/models--gpt2/snapshots/1/config.json' is unreadable; "
        f"see {ui.APP_DIR}/pages")
    assert str(cache) not in message and str(ui.APP_DIR) not in message
    assert "'…/models--gpt2/snapshots/1/config.json'" in message


@pytest.mark.parametrize("page", PAGES)
def test_hub_id_while_offline(page, tmp_path, monkeypatch):
    import huggingface_hub.constants as hub_constants

    cache = tmp_path / "hf"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache / "hub"))
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache / "hub"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    at = run_page(page, {"model": "distilgpt2"})
    assert not at.exception, texts(at.exception)
    errors = texts(at.error)
    assert errors and "hub cannot be reached" in errors[0], errors
    assert "MiniLM" in errors[0]  # what to do instead
    assert str(tmp_path) not in errors[0]  # the visitor learns nothing of the server's paths


def test_unexpected_error_shows_a_generic_message(monkeypatch):
    """Anything that is not a MhaVizError: a friendly message, the traceback only in the log."""
    from mha_viz import plots

    monkeypatch.delenv("MHA_VIZ_RAISE")

    def broken(*args, **kwargs):
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(plots, "model_view_grid", broken)
    at = run_page("pages/1_Attention_Maps.py")
    assert not at.exception
    errors = texts(at.error)
    assert len(errors) == 1 and "Something went wrong" in errors[0]
    assert "secret internal detail" not in errors[0]


def test_figures_download_as_png_or_svg_and_matrices_as_csv():
    at = run_page("pages/1_Attention_Maps.py")
    configs = [json.loads(e.proto.config) for e in at.get("plotly_chart")]
    assert all(c["toImageButtonOptions"]["format"] == "png" for c in configs)
    assert all(c["displaylogo"] is False and c["typesetMath"] is False for c in configs)
    labels = [b.proto.label for b in at.get("download_button")]
    assert "⬇ L2.H1 as CSV" in labels and "⬇ L2 head mean as CSV" in labels  # the opening head
    assert "⬇ Trace (.npz)" in labels
    at.radio(key="_mv_w_img").set_value("svg").run()
    configs = [json.loads(e.proto.config) for e in at.get("plotly_chart")]
    assert all(c["toImageButtonOptions"]["format"] == "svg" for c in configs)
    assert at.query_params["img"] == "svg"
    at.switch_page("pages/2_Entropy.py").run()
    configs = [json.loads(e.proto.config) for e in at.get("plotly_chart")]
    assert configs and all(c["toImageButtonOptions"]["format"] == "svg" for c in configs)
    labels = [b.proto.label for b in at.get("download_button")]
    # the head opened on Attention maps (L2.H1) followed to this page
    assert {"⬇ Entropy as CSV", "⬇ L2.H1 per query as CSV", "⬇ Token-class mass as CSV",
            "⬇ Trace (.npz)"} <= set(labels)


def test_streamlit_config_keeps_the_browser_on_this_server():
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["browser"]["gatherUsageStats"] is False
    assert config["client"]["showErrorDetails"] == "none"
    assert config["client"]["toolbarMode"] == "minimal"


def test_page_list_is_read_once_however_many_sessions_start_together(monkeypatch):
    """Eight sessions starting at once each drew the page links; parsing the page files in
    every one of them raced in CPython 3.11's ast.parse (a SystemError on the page). The list
    is read once per process: concurrent first calls parse each page file once."""
    import ast
    import threading

    from mha_viz import ui

    parsed = []
    real_parse = ast.parse
    monkeypatch.setattr(ast, "parse", lambda *a, **k: parsed.append(1) or real_parse(*a, **k))
    monkeypatch.setattr(ui.controls, "_pages", None)
    results, start = [], threading.Barrier(8)

    def session():
        start.wait()
        results.append(ui.page_files())

    threads = [threading.Thread(target=session) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and all(r == results[0] for r in results)
    assert len(parsed) == len(results[0]) - 1  # every file in pages/, once (Home is app.py)
    assert [p.label for p in results[0][:3]] == ["Home", "Attention maps", "Entropy"]


def test_a_text_too_long_for_the_link_says_so():
    from mha_viz.ui import URL_MAX_CHARS

    text = "word " * (URL_MAX_CHARS // 5 + 10)
    at = run_page("app.py", session={"_mv_state_text": text})
    assert not at.exception and not at.error
    assert any("too long for the page's link" in c for c in texts(at.caption))
    assert "text" not in at.query_params
    short = run_page("app.py", {"text": "A short text."})
    assert not any("too long for the page's link" in c for c in texts(short.caption))


def test_one_long_word_is_one_unknown_token_not_an_error(minilm, gpt2_model):
    """BERT's tokenizer gives [UNK] for a word over 100 characters (a hash, a URL): that is
    the text, shown and traced, not a special token to hide."""
    trace = minilm.trace("a" * 101)
    assert trace.tokens == ["[CLS]", "[UNK]", "[SEP]"]
    assert trace.special_mask.tolist() == [True, False, True]
    at = run_page("app.py", {"text": "f" * 120})
    assert not at.error, texts(at.error)
    # GPT-2's <|endoftext|> is its unknown token too, and stays special
    eot = gpt2_model.tokenizer.eos_token_id
    assert gpt2_model.tokenizer.unk_token_id == eot
    assert gpt2_model.encode("<|endoftext|> hi").special_mask[0]


@pytest.mark.parametrize("page", ["pages/1_Attention_Maps.py", "pages/5_Inside_One_Head.py"])
def test_pages_open_on_the_head_that_links_it_to_what_it_reads(page, minilm):
    """Not L0.H0 (a diffuse head) following 'street': the example is about 'it', so the page
    opens on 'it' and on the head that gives it the most weight to the token it reads most."""
    from mha_viz.analysis import opening_view

    trace = minilm.trace(DEFAULT_TEXT)
    query, key, layer, head = opening_view(trace.attentions, trace.display_tokens,
                                           trace.special_mask)
    assert trace.display_tokens[query] == "it" and (layer, head) != (0, 0)
    assert trace.attentions[layer, head, query, key] == trace.attentions[:, :, query, key].max()
    # read from the trace itself (one query row per layer), whole or rebuilt on demand
    lazy = minilm.trace(DEFAULT_TEXT, maps="on_demand")
    for source in (trace, lazy):
        assert opening_view(source, trace.display_tokens, trace.special_mask) == (
            query, key, layer, head)
    at = run_page(page)
    assert not at.exception and not at.error
    assert at.selectbox(key="_mv_w_layer").value == layer
    assert at.selectbox(key="_mv_w_head").value == head
    if page.endswith("Inside_One_Head.py"):
        assert at.selectbox(key="_mv_w_query").value == query
    else:
        assert at.selectbox(key="_mv_w_q").value == query
        assert at.selectbox(key="_mv_w_k").value == key
    # a head the person picked wins over the opening one
    assert run_page(page, {"layer": "0", "head": "3"}).selectbox(key="_mv_w_head").value == 3


def test_hiding_tokens_on_a_long_input_shows_the_renormalized_weights(monkeypatch):
    """A long input (maps on demand) with [CLS] and [SEP] hidden: the window the page draws
    holds the model's own weights restricted to the other tokens, each row divided by its
    mass on them (the formula, from a whole trace of the same text)."""
    from mha_viz import load_model

    monkeypatch.setenv("MHA_VIZ_MEMORY_MB", "100")
    text = "the cat sat on the mat " * 60
    at = run_page("pages/1_Attention_Maps.py",
                  {"hide": "special", "layer": "2", "head": "5", "window": "100", "wsize": "64"},
                  session={"_mv_state_text": text})
    assert not at.exception and not at.error, texts(at.error)
    assert any("Hidden 2 token(s)" in t for t in texts(at.info))
    by_key = dict(zip((c.key for c in at.get("plotly_chart")), charts(at)))
    shown = figure_z(by_key["window"]).astype(np.float64)
    full = load_model("minilm").trace(text, maps="full")
    keep = ~full.special_mask
    kept = np.flatnonzero(keep)
    head = full.head_map(2, 5).astype(np.float64)[kept][:, kept]
    expected = (head / head.sum(-1, keepdims=True))[100:164, 100:164]
    assert shown.shape == (64, 64) and np.abs(shown - expected).max() < 1e-5
    assert by_key["window"]["data"][0]["y"][0].startswith("100 ")


def test_pruning_refuses_a_backward_pass_that_would_not_fit(gpt2_folder, monkeypatch):
    """Gradient importance keeps every head's attention of the scored text: past the share of
    the budget one input gets, its section and a gradient-ranked curve say so, with the
    length that fits (budget.too_long of 8 x L x H bytes per squared token), and the rest of
    the page still draws."""
    from mha_viz import load_model
    from mha_viz.core import budget

    model = load_model(str(gpt2_folder))
    info = model.info
    text = "the cat sat on the mat and " * 12
    n = len(model.encode(text).input_ids)
    share = 8 * info.n_layer * info.n_head * 60 ** 2  # what a backward pass of 60 tokens holds
    monkeypatch.setattr(budget, "ONE_INPUT_SHARE", share / budget.budget_bytes())
    at = run_page("pages/4_Pruning_Impact.py", folder_params(gpt2_folder) | {"by": "gradient"},
                  session={"_mv_state_text": text})
    assert not at.exception and not at.error, texts(at.error)
    refusals = [t for t in texts(at.info) if t.startswith("A backward pass")]
    assert len(refusals) == 2, texts(at.info)
    assert f"over {n} tokens" in refusals[0] and "it runs on up to 60 tokens" in refusals[0]
    assert "Rank the heads by their ablation effect instead" in refusals[1]
    assert [c.key for c in at.get("plotly_chart")] == ["ablation"]
