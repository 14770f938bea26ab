"""The registry of head statistics (mha_viz.analysis.head_statistics): each is declared once,
and the corpus, the command line, the Corpus page and the docs read it."""

import re
from pathlib import Path

import numpy as np
import pytest

from mha_viz import InputError, corpus
from mha_viz.analysis import entropy, head_statistics, token_class_mass

ROOT = Path(__file__).resolve().parents[2]


def test_every_statistic_has_its_docs_section():
    sections = set(re.findall(r"^## (.+)$", (ROOT / "docs/analyses.md").read_text(), re.M))
    assert {s.docs for s in head_statistics.REGISTRY.values()} <= sections
    for name, s in head_statistics.REGISTRY.items():
        assert set(s.reads) <= set(head_statistics.ACCUMULATORS), name
        assert s.label and s.unit


def test_the_corpus_and_the_command_line_read_the_registry():
    assert corpus.ALL_STATS == tuple(head_statistics.REGISTRY)
    assert corpus.STATS == head_statistics.DEFAULT == ("entropy", "mass", "roles", "similarity")
    assert corpus.IMPORTANCE == ("ablation", "gradient", "pruning")
    with pytest.raises(InputError, match="statistics must be some of entropy, mass"):
        head_statistics.check_names(["nonsense"])
    page = (ROOT / "pages/8_Corpus.py").read_text()
    assert "head_statistics.labels()" in page


def test_a_segments_arrays_equal_the_analyses_on_its_trace(gpt2_model):
    """Through the registry, one segment's entropy and token-class mass equal the library's
    own functions on the same trace, and the accumulators the roles share are built once."""
    trace = gpt2_model.trace("The cat sat on the mat. The cat sat on the mat.")
    out = corpus.segment_statistics(trace, ["entropy", "mass", "roles"])
    np.testing.assert_allclose(out["entropy"], entropy(trace), rtol=1e-6)
    np.testing.assert_allclose(out["entropy_normalised"], entropy(trace, normalized=True),
                               rtol=1e-6)
    for name, value in token_class_mass(trace).items():
        np.testing.assert_allclose(out["mass " + name], value, rtol=1e-6)
    assert any(name.startswith("role ") for name in out)
    segment = head_statistics.Segment(list(trace.tokens), list(trace.display_tokens),
                                      trace.token_ids, *trace.maps_shape[:2], True)
    shared = head_statistics.SegmentAccumulators(["entropy", "mass", "roles"], segment)
    assert sorted(shared.by_name) == ["class_mass", "row_entropy", "text_scores"]
