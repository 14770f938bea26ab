"""The Pruning impact page's view (mha_viz/ui/views/pruning_impact*.py) in Streamlit's AppTest:
the score with heads switched off is stored under the key of its call (stores.result_key),
the measure says the model's score in the words of ModelInfo, the pruning curve section draws
the library's curve, an encoder-decoder's table of the heads it needs most is
rank_heads_of_kinds of the library's effects, and one sweep asked by two pages runs once."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("streamlit")
# the pages' shared module brings its autouse fixtures: errors raise, results start empty
from tests.support.app_pages import array, chart, texts  # noqa: E402
from tests.support.seq2seq_pages import SOURCE, TARGET, params  # noqa: E402
from tests.support.similarity_pruning_inside import (PRUNE, TEXT,  # noqa: E402, F401
                                                     _fresh_results, _raise_errors, assert_clean,
                                                     folder, run_page)


def test_score_with_heads_off_is_stored_under_its_key(gpt2_folder, gpt2_model):
    from mha_viz.analysis import heads, pruning
    from mha_viz.ui import loading, stores
    from mha_viz.ui.words.pruning import format_score

    at = run_page(PRUNE, folder(gpt2_folder) | {"text": TEXT, "off": "L0.H1"})
    assert_clean(at)
    mask = heads.names_to_mask(["L0.H1"], 2, 4)
    model = loading.get_model(str(gpt2_folder))
    found, stored = stores._small_store().get(stores.result_key(
        model.score, TEXT, head_mask=mask, ablation="zero", metric=None))
    assert found
    expected = gpt2_model.score(TEXT, head_mask=mask)
    assert stored == pytest.approx(expected, rel=1e-6)
    shown = {m.label: m.value for m in at.metric}
    assert shown["Score with those heads off"] == format_score(stored)
    # the measure: the model's own score, in ModelInfo's words
    markdown = " ".join(texts(at.markdown))
    assert "Score used on this page:" in markdown
    assert gpt2_model.info.score_explanation in markdown
    # the curve section: the library's curve, titled by its ranking
    curve = pruning.pruning_curve(gpt2_model, TEXT, step=0.1, by="gradient")
    spec = chart(at, "as heads are removed (by gradient importance)")
    assert spec["layout"]["title"]["text"].startswith(gpt2_model.info.score_short_name)
    np.testing.assert_allclose(array(spec["data"][0]["y"]).astype(float), curve.scores,
                               rtol=1e-5)


def test_encoder_decoder_table_of_the_heads_needed_most():
    from mha_viz import load_model
    from mha_viz.analysis import ablation_effects_seq2seq, heads
    from mha_viz.models.seq2seq import KIND_NAMES, KINDS

    query, session = params("encoder")
    at = run_page(PRUNE, query, session)
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    effects = ablation_effects_seq2seq(load_model("t5-toy"), SOURCE, TARGET)
    ranked = heads.rank_heads_of_kinds({k: effects[k] for k in KINDS}, KINDS)[:10]
    table = at.dataframe[0].value
    assert list(table["head"]) == [heads.head_name(l, h) for _, l, h in ranked]
    assert list(table["kind"]) == [KIND_NAMES[k] for k, _, _ in ranked]
    np.testing.assert_allclose(table["Δ loss (nats/token)"],  # a loss: red when it rises
                               [round(float(effects[k][l, h]), 4) for k, l, h in ranked],
                               atol=1e-4)
    titles = [json.loads(e.proto.spec)["layout"]["title"]["text"]
              for e in at.get("plotly_chart")]
    assert "Loss as heads are removed (by gradient importance)" in titles


PREDICT = "pages/6_Predictions.py"


def test_one_sweep_asked_by_two_pages_runs_once(gpt2_folder, gpt2_model, monkeypatch):
    """Predictions runs the exact ablation sweep of its target metric by itself; Pruning impact
    measuring the same prediction asks the same call (its mode the default, the model, text
    and metric the same): it finds the stored result, and the sweep ran once in all."""
    import functools

    from mha_viz import analysis
    from mha_viz.analysis import pruning

    real = pruning.ablation_effects
    runs = []

    @functools.wraps(real)  # its name and signature: the stored result's key stays the same
    def counted(*args, **kwargs):
        runs.append(kwargs.get("metric"))
        return real(*args, **kwargs)

    monkeypatch.setattr(pruning, "ablation_effects", counted)
    monkeypatch.setattr(analysis, "ablation_effects", counted)
    query = folder(gpt2_folder) | {"text": TEXT}
    at = run_page(PREDICT, query)
    assert_clean(at)
    assert len(runs) == 1 and runs[0] is not None  # the sweep of one target metric
    # Predictions shows what each head adds (on − off: red = raises the metric), the sweep's
    # own off − on turned over
    predicted = array(chart(at, "Exact effect of each head")["data"][0]["z"])
    at = run_page(PRUNE, query | {"measure": "target"})
    assert_clean(at)
    assert len(runs) == 1  # found, not run again
    # drawn as the metric lost (red: a head that helps the target), issue 51
    shown = array(chart(at, "Metric lost when a head is switched off")["data"][0]["z"])
    np.testing.assert_allclose(shown, -real(gpt2_model, TEXT, metric=runs[0]), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(shown, predicted, rtol=1e-6)  # one colour meaning on both
