"""The Head roles page through AppTest, for SmolLM2, MiniLM and a random GPT-2 (the scores
themselves are tested against hand-computed maps in tests/unit/test_head_roles.py)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("streamlit")

from tests.support.app_pages import array, charts, run_page, texts  # noqa: E402

PAGE = "pages/7_Head_Roles.py"
SMOL_TEXT = "The cat sat on the mat because it was warm."


@pytest.fixture
def _raise_in_pages(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_RAISE", "1")


def clean(at):
    assert not at.exception, texts(at.exception)
    assert not at.error, texts(at.error)


def chart_titles(at):
    return [c["layout"]["title"]["text"] for c in charts(at)]


@pytest.mark.slow
def test_page_smollm2(_raise_in_pages):
    at = run_page(PAGE, {"model": "smollm2", "text": SMOL_TEXT})
    clean(at)
    titles = chart_titles(at)
    assert len(titles) == 8  # 6 maps (no next token, no [SEP]: causal) and 2 head maps
    assert not any(t.startswith(("Next token", "Sink: [SEP]")) for t in titles)
    assert "Induction on the probe" in titles and "Sink: first token" in titles
    captions = " ".join(texts(at.caption))
    assert "repeated random tokens, seq_len 50, seed 0, 5 sequences" in captions
    assert "Grouped-query attention: 9 query heads read 3 key/value head(s)" in captions
    values = {n.label: n.value for n in at.number_input}
    assert [values[f"Probe: {name}"] for name in ("length of R (seq_len)", "sequences", "seed")
            ] == [50, 5, 0]
    table = at.dataframe[0].value
    assert len(table) == 15 and list(table["head"][:1]) == ["L18.H6"]
    induction = set(table["head"][table["role"] == "induction"])
    assert induction == {"L17.H3", "L17.H4", "L17.H5", "L18.H6", "L18.H7"}
    assert "shares K/V with" in table.columns
    # the page opens on the clearest head and shows it on the text and on the probe
    assert any(t.startswith("L18.H6 on the probe") for t in titles)
    assert any("L18.H6: induction" in m for m in texts(at.markdown))


def test_page_minilm_special_tokens_and_normalization(_raise_in_pages):
    at = run_page(PAGE, {"model": "minilm"})
    clean(at)
    specs = charts(at)
    assert len(specs) == 10  # 8 maps (next token and [SEP] too) and 2 head maps
    titles = [s["layout"]["title"]["text"] for s in specs]
    assert {"Next token", "Sink: [CLS]", "Sink: [SEP]", "Induction on the text"} <= set(titles)
    previous = array(specs[titles.index("Previous token")]["data"][0]["z"])
    at = run_page(PAGE, {"model": "minilm", "hide": "special", "norm": "transformer_lens",
                         "probe_len": "20", "probe_seed": "7", "probe_n": "2"})
    clean(at)
    specs = charts(at)
    titles = [s["layout"]["title"]["text"] for s in specs]
    dropped = array(specs[titles.index("Previous token")]["data"][0]["z"])
    assert np.abs(dropped - previous).max() > 0.1  # leaving [CLS]/[SEP] out matters
    captions = " ".join(texts(at.caption))
    assert "repeated random tokens, seq_len 20, seed 7, 2 sequences" in captions
    assert "Normalization: TransformerLens" in captions.replace("*", "")
    assert any("renormalized" in t for t in texts(at.info))
    assert at.dataframe[0].value["probe"].str.contains("without").any()


def test_page_random_gpt2_and_probe_bounds(_raise_in_pages, gpt2_folder):
    # the checkpoint's context is 128: seq_len 100 does not fit, so the default comes back
    at = run_page(PAGE, {"model": "folder", "folder": str(gpt2_folder), "probe_len": "100",
                         "layer": "1", "head": "3"})
    clean(at)
    assert len(at.get("plotly_chart")) == 8
    values = {n.label: n.value for n in at.number_input}
    assert values["Probe: length of R (seq_len)"] == 50
    assert "seq_len 50, seed 0, 5 sequences" in " ".join(texts(at.caption))
    assert any(t.startswith("L1.H3 on the text") for t in chart_titles(at))
