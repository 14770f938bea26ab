"""The Circuits page tests the drawn circuit's heads (issue 43): faithfulness and necessity
under the ablation picked, the library's own numbers, on the bundled SmolLM2."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")

from tests.support.circuits_page import PAIR, clean_run  # noqa: E402

from mha_viz import load_model  # noqa: E402
from mha_viz.analysis import circuit, circuit_heads, circuit_test  # noqa: E402

pytestmark = pytest.mark.slow  # the bundled SmolLM2


def test_the_drawn_circuits_heads_are_tested():
    smollm2 = load_model("smollm2")
    at = clean_run({"c_view": "circuit", "c_edges": "40"})
    heads = circuit_heads(smollm2, circuit(smollm2, PAIR, None, "logit_diff", top_k=40))
    for ablation in ("mean", "zero"):
        if ablation != "mean":
            at.radio(key="_mv_w_c_ablation").set_value(ablation).run()
            assert not at.exception and not at.error
        expected = circuit_test(smollm2, PAIR, heads, "logit_diff", ablation)
        metrics = {m.label: m.value for m in at.metric}
        assert metrics["Faithfulness of its heads"] == f"{expected.faithfulness:.0%}"
        assert metrics["Necessity of its heads"] == f"{expected.necessity:.0%}"
        assert any(f"{len(heads)} heads" in c.value for c in at.caption)
