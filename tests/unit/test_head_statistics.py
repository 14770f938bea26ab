"""The registry of head statistics (mha_viz.analysis.head_statistics): what each statistic
gives for a segment, against the formulas of docs/analyses.md written here on transformers'
own attention maps (and, for head importance, on transformers' own loss with a hook on each
head), through a segment's trace and through a corpus run's padded batches."""

import re
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.support.hf_reference import gpt2_head_importance

from mha_viz import InputError, corpus
from mha_viz.analysis import head_statistics

ROOT = Path(__file__).resolve().parents[2]
# repeated tokens (duplicate-token and induction scores), punctuation, a long enough reach
TEXT = "The cat sat on the mat, and the cat slept. The dog sat too!"


def close(found, expected, name, atol=1e-5):
    np.testing.assert_allclose(found, expected, rtol=1e-4, atol=atol, err_msg=name)


def hf_maps(hf, ids) -> np.ndarray:
    """transformers' attention weights for ids, float64 [L, H, T, T]."""
    with torch.no_grad():
        out = hf(torch.tensor([list(ids)]), output_attentions=True)
    return torch.stack(out.attentions)[:, 0].double().numpy()


# --- the formulas (docs/analyses.md), on maps A [L, H, T, T] --------------------------------

def row_entropy(a):
    return -np.where(a > 0, a * np.log(np.where(a > 0, a, 1.0)), 0.0).sum(-1)


def entropy_formulas(a, causal):
    """Mean of H_i over the rows; normalized: H_i / ln(keys row i sees), rows seeing one key
    left out."""
    t = a.shape[-1]
    seen = np.arange(1, t + 1) if causal else np.full(t, t)
    h = row_entropy(a)
    rows = seen > 1
    return h.mean(-1), (h[..., rows] / np.log(seen[rows])).mean(-1)


def mass_on(a, keys_of_row):
    """a(S) = (1/T) sum_i sum_{j in S(i)} A_ij."""
    t = a.shape[-1]
    return sum(a[..., i, j] for i in range(t) for j in keys_of_row(i)) / t


def mean_over_rows_with_keys(a, keys_of_row):
    """The role scores: the mass on S(i), averaged over the rows i that have such keys."""
    rows = [i for i in range(a.shape[-1]) if keys_of_row(i)]
    if not rows:
        return np.zeros(a.shape[:2])
    return np.mean([sum(a[..., i, j] for j in keys_of_row(i)) for i in rows], axis=0)


def is_punctuation(label):
    text = label.replace("␣", "").strip()
    text = text[2:] if text.startswith("##") and len(text) > 2 else text
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def class_masses(a, tokens, display, ids, specials):
    t = len(ids)
    cls = [j for j in range(t) if tokens[j] == specials.get("cls")]
    sep = [j for j in range(t) if tokens[j] == specials.get("sep")]
    punctuation = [j for j in range(t) if is_punctuation(display[j]) or is_punctuation(tokens[j])]
    return {"mass [CLS]": mass_on(a, lambda i: cls), "mass [SEP]": mass_on(a, lambda i: sep),
            "mass punctuation": mass_on(a, lambda i: punctuation),
            "mass first token": mass_on(a, lambda i: [0]), "mass self": mass_on(a, lambda i: [i]),
            "mass previous": mass_on(a, lambda i: [i - 1] if i > 0 else []),
            "mass next": mass_on(a, lambda i: [i + 1] if i < t - 1 else [])}


def role_formulas(a, ids, masses):
    t = len(ids)
    earlier = [[j for j in range(i) if ids[j] == ids[i]] for i in range(t)]
    return {"role previous token": mean_over_rows_with_keys(a, lambda i: [i - 1] if i else []),
            "role next token": mean_over_rows_with_keys(
                a, lambda i: [i + 1] if i < t - 1 else []),
            "role duplicate token": mean_over_rows_with_keys(a, lambda i: earlier[i]),
            "role induction (text)": mean_over_rows_with_keys(
                a, lambda i: [j + 1 for j in earlier[i]]),
            "role first token": masses["mass first token"], "role [SEP]": masses["mass [SEP]"]}


def js_divergences(a, smoothing=1e-3):
    """d(a, b) = (1/T) sum_i JS(A_a[i], A_b[i]), each row smoothed as 0.999 p + 0.001 / T;
    heads numbered l * H + h."""
    t = a.shape[-1]
    p = (1 - smoothing) * a.reshape(-1, t, t) + smoothing / t
    m = (p[:, None] + p[None, :]) / 2
    kl_a = (p[:, None] * np.log(p[:, None] / m)).sum(-1)
    kl_b = (p[None, :] * np.log(p[None, :] / m)).sum(-1)
    return (0.5 * kl_a + 0.5 * kl_b).mean(-1)


def mean_distance(a):
    """The mean over rows of d_i = sum_j A_ij |i - j|."""
    t = a.shape[-1]
    reach = np.abs(np.arange(t)[:, None] - np.arange(t)[None, :])
    return (a * reach).sum(-1).mean(-1)


def every_formula(a, tokens, display, ids, specials, causal):
    entropy, normalized = entropy_formulas(a, causal)
    masses = class_masses(a, tokens, display, ids, specials)
    return {"entropy": entropy, "entropy_normalized": normalized, **masses,
            **role_formulas(a, ids, masses), "js_divergence": js_divergences(a),
            "distance": mean_distance(a)}


FROM_MAPS = ["entropy", "mass", "roles", "similarity", "distance"]


def test_a_segments_statistics_equal_the_formulas_on_transformers_maps(gpt2_folder, gpt2_model):
    """A GPT-2 segment's trace (causal): every array of every statistic from the maps."""
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(gpt2_folder, attn_implementation="eager").eval()
    trace = gpt2_model.trace(TEXT)
    out = corpus.segment_statistics(trace, FROM_MAPS, similarity_rows=None)
    expected = every_formula(hf_maps(hf, trace.token_ids), trace.tokens, trace.display_tokens,
                             trace.token_ids, trace.special_tokens, causal=True)
    assert set(out) == set(expected)
    for name, value in expected.items():
        close(out[name], value, name)
    assert not out["mass [CLS]"].any()  # GPT-2's tokenizer names no classification token
    assert out["role duplicate token"].any() and out["mass punctuation"].any()


def test_a_corpus_run_of_bert_segments_equals_the_formulas(bert_folder, bert_model):
    """The corpus's padded batches (a BERT segment: [CLS] ... [SEP], bidirectional): every
    array of every statistic from the maps, the [CLS] and [SEP] classes read from the
    tokenizer's own special tokens."""
    from transformers import AutoModel

    hf = AutoModel.from_pretrained(bert_folder, attn_implementation="eager").eval()
    segments = corpus.segment(bert_model, [TEXT], seg_len=64, min_len=4)
    assert len(segments.ids) == 1
    ids = segments.ids[0]
    result = corpus.run(bert_model, segments, FROM_MAPS, similarity_rows=None)
    tokens, display = bert_model.token_labels(ids)
    specials = {"cls": bert_model.tokenizer.cls_token, "sep": bert_model.tokenizer.sep_token}
    assert tokens[0] == specials["cls"] and tokens[-1] == specials["sep"]
    expected = every_formula(hf_maps(hf, ids), tokens, display, ids, specials, causal=False)
    assert set(result.names) == set(expected)
    for name, value in expected.items():
        close(result.mean(name), value, name)
    assert result.mean("mass [CLS]").any() and result.mean("mass [SEP]").any()


def test_head_importance_equals_transformers_loss_with_each_head_removed(gpt2_folder,
                                                                         gpt2_model):
    """The statistics that run the model again, on a GPT-2 segment: the ablation effect is
    the next-token loss with the head's slice of c_proj's input zeroed minus the loss, and
    the gradient importance |d loss / d gate| for a gate on that slice, by autograd through
    transformers' model (hooks in the tests' hf_reference)."""
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(gpt2_folder, attn_implementation="eager").eval()
    trace = gpt2_model.trace(TEXT)
    ablation, gradient = gpt2_head_importance(hf, trace.token_ids)
    out = corpus.segment_statistics(trace, ["ablation", "gradient"], model=gpt2_model)
    close(out["ablation_effect"], ablation, "ablation", atol=1e-5)
    close(out["gradient_importance"], gradient, "gradient", atol=1e-6)
    assert np.abs(ablation).min() > 1e-4  # every head matters a little on random weights


def test_every_statistic_has_its_docs_section():
    sections = set(re.findall(r"^## (.+)$", (ROOT / "docs/analyses.md").read_text(), re.M))
    assert {s.docs for s in head_statistics.REGISTRY.values()} <= sections
    for name, s in head_statistics.REGISTRY.items():
        assert set(s.reads) <= set(head_statistics.ACCUMULATORS), name
        assert s.label and s.unit


def test_the_default_statistics_and_bad_names():
    assert corpus.STATS == ("entropy", "mass", "roles", "similarity")
    assert {"ablation", "gradient"} <= set(corpus.IMPORTANCE)
    with pytest.raises(InputError, match="statistics must be some of entropy, mass"):
        head_statistics.check_names(["nonsense"])


def test_statistics_share_the_accumulators_they_read(gpt2_model):
    """The roles reuse the entropy's and the mass's accumulators: each is built once."""
    trace = gpt2_model.trace(TEXT)
    segment = head_statistics.Segment(list(trace.tokens), list(trace.display_tokens),
                                      trace.token_ids, *trace.maps_shape[:2], True)
    shared = head_statistics.SegmentAccumulators(["entropy", "mass", "roles"], segment)
    assert sorted(shared.by_name) == ["class_mass", "row_entropy", "text_scores"]


def test_the_command_line_offers_the_mean_attention_distance(capsys):
    from mha_viz.__main__ import main

    with pytest.raises(SystemExit):
        main(["corpus", "--help"])
    assert "distance (Mean attention distance)" in " ".join(capsys.readouterr().out.split())


def test_the_distance_kinds_the_similarity_page_offers(gpt2_folder, gpt2_model):
    """JS divergence, its square root and 1 - the cosine of the maps, each against its
    formula on transformers' maps."""
    from transformers import GPT2LMHeadModel

    from mha_viz.analysis.map_cosine import DISTANCE_KINDS, distances_of_kind

    hf = GPT2LMHeadModel.from_pretrained(gpt2_folder, attn_implementation="eager").eval()
    trace = gpt2_model.trace("Two heads are alike when they spread attention alike.")
    a = hf_maps(hf, trace.token_ids)
    js = js_divergences(a)
    close(distances_of_kind(trace, "js"), js, "js")
    close(distances_of_kind(trace, "js_distance"), np.sqrt(js), "js_distance", atol=1e-4)
    flat = a.reshape(-1, a.shape[-1] ** 2)
    unit = flat / np.linalg.norm(flat, axis=1, keepdims=True)
    close(distances_of_kind(trace, "cosine"), 1 - unit @ unit.T, "cosine")
    assert set(DISTANCE_KINDS) == {"js", "js_distance", "cosine"}
    with pytest.raises(InputError, match="distance kind must be one of js, js_distance"):
        distances_of_kind(trace, "euclid")
