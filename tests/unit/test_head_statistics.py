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


def test_a_segments_arrays_equal_the_analyses_on_its_trace(gpt2_model):
    """Through the registry, one segment's entropy and token-class mass equal the library's
    own functions on the same trace, and the accumulators the roles share are built once."""
    trace = gpt2_model.trace("The cat sat on the mat. The cat sat on the mat.")
    out = corpus.segment_statistics(trace, ["entropy", "mass", "roles"])
    np.testing.assert_allclose(out["entropy"], entropy(trace), rtol=1e-6)
    np.testing.assert_allclose(out["entropy_normalized"], entropy(trace, normalized=True),
                               rtol=1e-6)
    for name, value in token_class_mass(trace).items():
        np.testing.assert_allclose(out["mass " + name], value, rtol=1e-6)
    assert any(name.startswith("role ") for name in out)
    segment = head_statistics.Segment(list(trace.tokens), list(trace.display_tokens),
                                      trace.token_ids, *trace.maps_shape[:2], True)
    shared = head_statistics.SegmentAccumulators(["entropy", "mass", "roles"], segment)
    assert sorted(shared.by_name) == ["class_mass", "row_entropy", "text_scores"]


def test_mean_attention_distance_over_a_corpus(gpt2_model, capsys):
    """A statistic added by one registry entry: each segment's value is the library's
    mean_attention_distance on that segment's trace; the command line offers it."""
    from mha_viz.__main__ import main
    from mha_viz.analysis import mean_attention_distance

    texts = ["The cat sat on the mat because it was warm. " * 3, "One two three four five six."]
    segments = corpus.segment(gpt2_model, texts, seg_len=16, min_len=4)
    result = corpus.run(gpt2_model, segments, ["distance"])
    each = [mean_attention_distance(gpt2_model.trace_ids(list(ids))) for ids in segments.ids]
    np.testing.assert_allclose(result.mean("distance"), np.mean(each, axis=0), rtol=1e-5)
    with pytest.raises(SystemExit):
        main(["corpus", "--help"])
    assert "distance (Mean attention distance)" in " ".join(capsys.readouterr().out.split())


def test_the_distance_kinds_the_similarity_page_offers(gpt2_model):
    from mha_viz.analysis import head_distances, map_cosine_distances
    from mha_viz.analysis.map_cosine import DISTANCE_KINDS, distances_of_kind

    trace = gpt2_model.trace("Two heads are alike when they spread attention alike.")
    np.testing.assert_array_equal(distances_of_kind(trace, "js"), head_distances(trace))
    np.testing.assert_array_equal(distances_of_kind(trace, "js_distance"),
                                  head_distances(trace, kind="js_distance"))
    np.testing.assert_array_equal(distances_of_kind(trace, "cosine"),
                                  map_cosine_distances(trace))
    assert set(DISTANCE_KINDS) == {"js", "js_distance", "cosine"}
    with pytest.raises(InputError, match="distance kind must be one of js, js_distance"):
        distances_of_kind(trace, "euclid")
