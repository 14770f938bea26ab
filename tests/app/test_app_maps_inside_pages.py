"""What the Attention maps and Inside one head pages compute outside their widgets, in their
views' modules (mha_viz/ui/views/attention_maps/sizes.py, ui/words/attention_maps.py,
inside_one_head/, ui/words/inside_one_head.py) and mha_viz/ui/lesson.py: their
size policies, the texts they write from numbers and which steps they show, each against the
real model's values."""

from functools import partial

import numpy as np
import pytest

from mha_viz import analysis
from mha_viz.analysis.one_head.steps import inside_one_head, summarise
from mha_viz.maps.downsample import block_factor
from mha_viz.ui.views.attention_maps import sizes as maps_page
from mha_viz.ui.views.inside_one_head import contents as inside_page
from mha_viz.ui.views.inside_one_head import matrices as inside_matrices
from mha_viz.ui.words import attention_maps as maps_words
from mha_viz.ui.words import inside_one_head as inside_words

TEXT = "The cat sat on the mat because it was warm."


@pytest.fixture(scope="module")
def gpt2_trace(gpt2_model):
    return gpt2_model.trace(TEXT)


@pytest.fixture(scope="module")
def inside(gpt2_model):
    return inside_one_head(gpt2_model, TEXT, 1, 2)


@pytest.fixture(scope="module")
def t5_toy():
    from mha_viz import load_model
    return load_model("t5-toy")


# ------------------------------------------------------------------ Attention maps


def test_grid_thumbnails_grow_as_heads_get_fewer(gpt2_trace, minilm):
    assert minilm.info.n_head == 12 and maps_page.grid_cell_px(12) == 720 // 12 == 60
    assert gpt2_trace.n_head == 4 and maps_page.grid_cell_px(4) == 110  # 180 px, capped
    assert maps_page.grid_cell_px(32) == 40  # 22 px, raised to the least that reads


def test_the_sentence_pair_boundary_is_sentence_bs_first_token(bert_model):
    trace = bert_model.trace("Where is the cat?", "The cat is on the mat.")
    segments = np.asarray(trace.segment_ids)
    first_b = list(segments).index(1)
    assert trace.display_tokens[first_b - 1] == "[SEP]"  # A ends on its separator
    assert maps_page.pair_boundary(segments, outline=True) == first_b
    assert maps_page.pair_boundary(segments, outline=False) is None
    one = np.asarray(bert_model.trace("Where is the cat?").segment_ids)
    assert maps_page.pair_boundary(one, outline=True) is None


def test_a_long_input_says_how_it_is_drawn():
    factor = block_factor(300, maps_page.HEATMAP_MAX)
    assert factor == 2
    assert maps_page.long_input_caption(300, factor) == (
        "Long input (300 tokens): heatmaps are block-averaged to at most 256×256 cells and "
        "axis labels thinned; a window you move along the text shows 64-256 tokens at full "
        "resolution, and the line view shows 40 tokens at a time; the grid uses 32×32 "
        "thumbnails.")
    assert maps_page.long_input_caption(41, block_factor(41, 256)) == (
        "Long input (41 tokens): only some axis labels are shown; click a cell for its "
        "tokens. The CSV downloads keep every cell.")
    assert maps_page.long_input_caption(40, 1) is None
    assert maps_page.heatmap_size(24) == {"max_size": 256, "max_ticks": 40, "height": None}
    assert maps_page.heatmap_size(40) == {"max_size": 256, "max_ticks": 40, "height": 720}
    assert maps_page.heatmap_size(41) == {"max_size": 256, "max_ticks": 24, "height": 760}


def test_the_grids_texts_count_its_maps(gpt2_trace):
    texts = maps_page.thumbnail_texts(gpt2_trace.n_layer, gpt2_trace.n_head, 1234)
    assert texts["label"] == "Drawing the 8 heads' thumbnails over 1,234 tokens…"
    assert texts["button"] == "Draw every head's thumbnail (8 maps of 1,234 tokens)"
    assert texts["waiting"].startswith("The grid reads every head's whole map: over 1,234 ")


def test_names_and_titles_of_a_head_or_its_layers_mean():
    assert maps_words.shown_name(3, 7, layer_mean=False) == analysis.head_name(3, 7) == "L3.H7"
    assert maps_words.shown_name(3, 7, layer_mean=True) == "L3 head mean"
    assert maps_words.head_subheader(3, 7, 12, False, False) == "One head: L3.H7 (layer 3, head 7)"
    assert (maps_words.head_subheader(3, 7, 12, True, True)
            == "The mean of layer 3's 12 heads: the whole text")
    assert maps_words.layers_through([5]) == "L5"
    assert maps_words.layers_through([2, 3, 4, 5]) == "L2–L5"


def test_a_windows_caption_is_its_mass(gpt2_trace):
    start, stop = 3, 8
    rows = gpt2_trace.rows(1, start, stop, [2])[0]  # [5, T]: every key
    inside, first = analysis.window_mass(rows, start, stop)
    expected_inside = float(rows[:, start:stop].sum(axis=1).mean())
    assert inside == pytest.approx(expected_inside, abs=1e-6)
    caption = maps_page.window_caption(start, stop, inside, first)
    assert caption.startswith(f"These 5 queries give {expected_inside:.0%} of their attention "
                              f"to keys inside the window and {first:.0%} to the first token")
    assert "first token" not in maps_page.window_caption(0, 5, inside, first)
    assert maps_page.window_lines_caption(40, 2, True) == (
        "The first 40 tokens of the window (the line view shows 40 tokens at a time), every "
        "head of layer 2; lines to keys outside it are not drawn.")


def test_the_aggregates_texts(gpt2_trace):
    n_layer = gpt2_trace.n_layer
    assert maps_words.aggregate_labels(0)["rollout"] == "Attention rollout through layer 0"
    assert maps_words.aggregate_labels(1) == {"mean": "Head mean of layer 1",
                                             "rollout": "Attention rollout through layers 0–1"}
    assert maps_words.aggregate_what("mean", n_layer) == "The head mean of a layer"
    assert "2 whole maps each" in maps_words.aggregate_what("rollout", n_layer)
    name, text = maps_words.aggregate_text("rollout", 0, n_layer, hidden=False)
    assert name == "rollout to L0" and "Pick the last layer (L1) for the full rollout." in text
    name, text = maps_words.aggregate_text("mean", 1, n_layer, hidden=True)
    assert name == "L1 head mean"
    assert text.endswith("then the hidden tokens were removed and rows renormalized.")


def test_the_strongest_heads_of_a_link_are_its_largest_weights(gpt2_trace):
    link = gpt2_trace.weights_between(7, 2)  # 'it' -> 'sat'
    order = np.argsort(-link, axis=None, kind="stable")[:3]
    expected = ", ".join(f"L{i // link.shape[1]}.H{i % link.shape[1]} "
                         f"{link.flat[i]:.0%}" for i in order)
    assert maps_words.strongest_caption(link, " (note)") == f"Strongest: {expected} (note)."


# ------------------------------------------------------------------ Inside one head


def test_dims_and_the_refusal_and_length_notes():
    assert inside_words.dims(3, "d") == ["d0", "d1", "d2"]
    assert inside_words.dims(2, "bucket ") == ["bucket 0", "bucket 1"]
    assert inside_words.too_long_what(9, 8000) == (
        "Inside one head (every step of one layer's attention: 9 heads' weights and this "
        "head's scores, 8,000² each)")
    assert inside_words.short_text_note(40) is None
    assert inside_words.short_text_note(41).startswith("This text has 41 tokens.")


def test_how_a_matrix_is_drawn_by_its_size(inside, minilm):
    t, dk = inside.Q.shape
    assert inside_matrices.matrix_view(t, dk, ".2f") == (True, t, dk, ".2f")
    assert inside_matrices.matrix_view(10, 30, ".2f") == (True, 10, 30, ".1f")  # wide: 1 decimal
    d = minilm.info.d_model  # X of MiniLM: 384 columns, no values, drawn whole
    assert inside_matrices.matrix_view(t, d, ".2f") == (False, t, d, ".2f")
    assert inside_matrices.matrix_view(100, 1000, ".2g") == (False, 64, 768, ".2g")


def test_a_large_matrix_is_summarised_in_one_line(inside):
    stats = summarise(inside.X)
    t, d = inside.X.shape
    caption = inside_words.summary_caption(inside.X, t, d)
    assert caption == (f"{t} × {d} = {t * d:,} numbers, too many to print: click a cell for "
                       f"its value. Whole array: min {stats['min']:.4g} · max "
                       f"{stats['max']:.4g} · mean {stats['mean']:.4g} · std {stats['std']:.4g}"
                       f" · mean row norm {stats['mean row norm']:.4g}.")
    masked = inside.masked_scores  # causal: the future is -inf
    n_masked = int(np.isneginf(masked).sum())
    assert n_masked == t * (t - 1) // 2
    caption = inside_words.summary_caption(masked, 4, t)
    assert "showing the first 4 rows and " + str(t) + " columns; " in caption
    assert caption.endswith(f" · {n_masked} −∞ entries.")


def test_the_steps_shown_on_the_page_and_in_a_lesson(inside, t5_toy):
    from mha_viz.analysis.one_head.seq2seq_steps import inside_one_head_seq2seq

    page = inside_page.sections(inside, False, 7, "it", gradients=True)
    assert [key for _, key, _ in page] == ["overview", "X", "qkv", "scores", "mask", "softmax",
                                           "why", "flash", "context", "output", "gradients",
                                           "cost"]
    assert [key for _, key, folded in page if not folded] == ["overview", "X"]
    lesson = inside_page.sections(inside, True, 7, "it", gradients=True)
    assert [key for _, key, _ in lesson] == [
        "overview", "X", "qkv", "layout", "scores", "mask", "softmax", "follow", "textbook",
        "flash", "context", "moves", "output", "contribution", "gradients", "learning", "cost",
        "features"]
    assert ("Follow query 7 'it'", "follow", True) in lesson
    # one numbering on the screen: the page's steps, or the lesson's screens
    numbers = inside_words.step_numbers(inside, lesson, True)
    assert numbers["scores"] == "5" and numbers["learning"] == "16"
    assert inside_words.step_ref(numbers, "gradients") == "step 15"
    page_numbers = inside_words.step_numbers(inside, page, False)
    assert page_numbers["scores"] == "5" and page_numbers["softmax"] == "7"
    assert inside_words.step_ref(page_numbers, "rope") == "step 4b"
    cross = inside_one_head_seq2seq(t5_toy, "the cat sleeps", None, "cross", 0, 0)
    keys = [key for _, key, _ in inside_page.sections(cross, False, 0, "x", gradients=False)]
    assert keys[:3] == ["overview", "memory", "X"] and "gradients" not in keys
    assert "bias" not in keys  # cross-attention has no relative position bias
    encoder = inside_one_head_seq2seq(t5_toy, "the cat sleeps", None, "encoder", 0, 0)
    keys = [key for _, key, _ in inside_page.sections(encoder, True, 0, "x", gradients=False)]
    assert keys[keys.index("scores") + 1] == "bias" and "layout" not in keys


def test_the_overviews_texts_are_the_heads_sizes(inside, t5_toy):
    from mha_viz.analysis.one_head.seq2seq_steps import inside_one_head_seq2seq

    t, d, dk = inside.n_tokens, inside.d_model, inside.d_k
    assert inside_words.overview_heading(inside, None) == "Head L1.H2: layer 1, head 2 of 4"
    pipeline = inside_words.pipeline_text(inside, None, t)
    assert pipeline.startswith(f"**X** (T × d_model = {t} × {d}) → **Q, K, V** of this head "
                               f"(T × d_k = {t} × {dk} each) → **scores** Q Kᵀ / √d_k "
                               f"({t} × {t}) → **mask**")
    assert inside_words.head_formula(inside, None) == (
        r"\mathrm{head}_h = \operatorname{softmax}\!\left(\frac{(XW_Q^h)(XW_K^h)^{\top}}"
        r"{\sqrt{d_k}} + M\right) X W_V^h \; W_O^h")
    ref = partial(inside_words.step_ref, inside_words.step_numbers(inside, [], False))
    caption = inside_words.overview_caption(inside, ref)
    assert f"d_k = {dk}; √d_k = {dk ** 0.5:.3f}. Rows are tokens" in caption
    # GPT-2 has every attention bias: the caption and the formulas say so
    assert caption.endswith("its biases are included (b_Q, b_K, b_V, b_O once for the whole "
                            "layer).")
    assert inside_words.qkv_formula(inside) == (r"Q = XW_Q^h + b_Q^h \qquad K = XW_K^h + b_K^h "
                                               r"\qquad V = XW_V^h + b_V^h")
    cross = inside_one_head_seq2seq(t5_toy, "the cat sleeps", None, "cross", 0, 0)
    n_keys = len(cross.columns)
    assert inside_words.overview_heading(cross, "cross").endswith(" (cross-attention)")
    assert inside_words.cross_note(cross.n_tokens, n_keys).endswith(
        f"so its scores and weights are {cross.n_tokens} × {n_keys}.")
    assert "; K and V from M, S × d_k" in inside_words.pipeline_text(cross, "cross",
                                                                    cross.n_tokens)
    formula = inside_words.head_formula(cross, "cross")
    assert r"\frac" not in formula and r"(MW_K^h)" in formula  # T5: no 1/sqrt(d_k)
    assert "T5 does not divide by it" in inside_words.overview_caption(cross, ref)
    # T5 has no attention biases: nothing says it has
    assert inside_words.overview_caption(cross, ref).endswith(
        "this model's attention has no biases (no b_Q, b_K, b_V or b_O).")
    assert "b_" not in inside_words.qkv_formula(cross)
    encoder = inside_one_head_seq2seq(t5_toy, "the cat sleeps", None, "encoder", 0, 0)
    assert " + B^h + M" in inside_words.head_formula(encoder, "encoder")
    assert "**+ relative position bias**" in inside_words.pipeline_text(encoder, "encoder", 5)


def test_the_followed_query_and_the_heads_share_of_the_output(inside):
    query = 7
    followed = inside.followed_query(query)
    ref = partial(inside_words.step_ref, {"context": "8"})
    text = inside_words.followed_text(inside, query, inside.tokens[query], followed.strongest,
                                     ref)
    assert "(row 7 of step 8)" in text
    row = inside.weights[query]
    top = np.argsort(-row, kind="stable")[:3]
    assert text.startswith(f"Token {query} '{inside.tokens[query]}' puts "
                           f"{row[top[0]]:.0%} on {top[0]} '")
    assert text.count("% on ") == 3
    total = inside.layer_output - inside.output_bias
    share = np.linalg.norm(inside.contribution) / np.linalg.norm(total)
    assert f"L1.H2's contribution has {share:.0%} of the size" in inside_words.all_heads_text(inside)
    assert inside_words.in_code(None, 1, 2) == (
        "In code: `from mha_viz.analysis.one_head.steps import inside_one_head; "
        "inside_one_head(model, text, layer=1, head=2)` returns every array shown here.")
    assert "inside_one_head_seq2seq(model, source, target, 'cross', layer=0, head=3)" in \
        inside_words.in_code("cross", 0, 3)


def test_show_steps_draws_folded_steps_when_opened_and_a_lesson_one_at_a_time():
    from streamlit.testing.v1 import AppTest

    def script():
        import streamlit as st

        from mha_viz.ui import lesson as lesson_mode

        steps = [("First", "one", False), ("Second", "two", True), ("Third", "three", True)]
        draw = {key: (lambda key=key: st.markdown(f"drew {key}")) for _, key, _ in steps}
        lesson_mode.show_steps(steps, draw, st.session_state.get("lesson", False))

    page = AppTest.from_function(script).run()
    assert not page.exception
    assert [m.value for m in page.markdown] == ["drew one"]  # the folded ones wait
    assert [e.label for e in page.expander] == ["Second", "Third"]
    lesson = AppTest.from_function(script)
    lesson.session_state["lesson"] = True
    lesson.session_state["_mv_state_lstep"] = 2  # ui.set_value("lstep", 2): the Next button
    lesson.run()
    assert not lesson.exception
    assert [m.value for m in lesson.markdown] == ["drew two"]
    assert not lesson.expander  # a lesson's step is its screen, never folded
