"""The Circuits page's "Show" box over several pairs, through AppTest on the bundled SmolLM2:
its values are the numbers the page reads (each pair by its index), shown as labels, and the
map drawn for a pair is that pair's, as the library computes it."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("streamlit")

from tests.support.app_pages import array, run_page, texts  # noqa: E402

from mha_viz import load_model  # noqa: E402
from mha_viz.analysis import activation_patching  # noqa: E402
from mha_viz.analysis.prompts import ioi_pairs  # noqa: E402

pytestmark = pytest.mark.slow  # the bundled SmolLM2


@pytest.fixture(autouse=True)
def _raise_in_pages(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_RAISE", "1")


def test_the_show_box_holds_pair_numbers_shown_as_labels():
    at = run_page("pages/9_Circuits.py", {"model": "smollm2", "c_pairs": "ioi", "c_n": "2",
                                          "c_seed": "4", "c_dir": "noise"})
    [b for b in at.button if b.label.startswith("Patch every head")][0].click().run()
    assert not at.exception and not at.error, texts(at.error)
    pairs = ioi_pairs(load_model("smollm2"), 2, seed=4)
    show = at.selectbox(key="_mv_circuit_show")
    assert show.value == "mean"
    assert show.options == ["mean over 2 pairs", "spread: standard deviation over pairs",
                            f"pair 0: {pairs[0].clean}", f"pair 1: {pairs[1].clean}"]
    show.set_value(1).run()
    assert not at.exception, texts(at.exception)
    assert at.selectbox(key="_mv_circuit_show").value == 1
    expected = activation_patching(load_model("smollm2"), [pairs[1]], None, "logit_diff",
                                   "head", "noise")
    figure = json.loads(at.get("plotly_chart")[0].proto.spec)
    # noising: the change from the clean run (0 = none, -1 = to the corrupted run)
    np.testing.assert_allclose(array(figure["data"][0]["z"]), (expected.normalized - 1).T,
                               atol=1e-4)
    assert figure["layout"]["title"]["text"].startswith("Noising: normalized effect on pair 1")
