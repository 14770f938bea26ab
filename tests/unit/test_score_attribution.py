"""Score attribution (issue 48) against transformers' own models, eager attention, on random
checkpoints built by their config classes: GPT-2, BERT (post-norm), Llama with grouped-query
attention, Gemma 2 (soft-capped scores, norms after each sub-layer), Qwen3 (QK-norm),
Pythia (attention and MLP in parallel, a quarter of each head rotating) and T5's encoder
(relative position bias). The terms sum to the scores transformers' softmax reads (its
input, read by wrapping the softmax here; Gemma 2's before its tanh); and one term, query
source L0.H1 x key source "embed", equals the score recomputed here in numpy from those two
sources' vectors alone (transformers' own weights and activations, read with forward hooks)
through the frozen norms, W_Q, W_K, the QK-norm and RoPE."""


import numpy as np
import pytest
from tests.support.hf_reference import capture_input, capture_output
from tests.support.score_reference import (Reference, ln_frozen, numpy_of, rms_frozen, rotate,
                                           run_reference, scores_read)
from tests.support.family_configs import FAMILIES

from mha_viz import InputError, load_model
from mha_viz.analysis import score_attribution
from mha_viz.testing import make_decoder_checkpoint, make_seq2seq_checkpoint

TEXT = "the cat sat on the mat and the dog ran to the tree"
SOURCE_HEAD = 1  # the query-side source of the entry checked in numpy: L0.H1
TOLERANCE = 1e-4  # relative to the row's largest score


@pytest.fixture(scope="module")
def families(patch_models, bert_folder, tmp_path_factory):
    """case -> (our model, transformers' eager model): GPT-2, Llama (GQA), Gemma 2 and
    Pythia from the intervention tests' fixture, Qwen3, OLMo (clip_qkv), BERT and T5 built
    here."""
    import transformers
    from transformers import BertModel, T5ForConditionalGeneration

    out = {name: (model, hf) for name, (model, hf, _) in patch_models.items()}
    out["pythia"] = out.pop("neox")
    for case in ("qwen3", "olmo"):
        config_class, model_class, config = FAMILIES[case]
        folder = make_decoder_checkpoint(tmp_path_factory.mktemp(f"why_{case}"), config_class,
                                         model_class, **config)
        out[case] = (load_model(folder), getattr(transformers, model_class).from_pretrained(
            folder, attn_implementation="eager").eval())
    out["bert"] = (load_model(bert_folder), BertModel.from_pretrained(
        bert_folder, attn_implementation="eager").eval())
    folder = make_seq2seq_checkpoint(tmp_path_factory.mktemp("why_t5"), "t5", n_layer=2)
    out["t5"] = (load_model(folder), T5ForConditionalGeneration.from_pretrained(
        folder, attn_implementation="eager").eval())
    return out


def input_ids(model, case) -> list[int]:
    return model.encode_source(TEXT)[0] if case == "t5" else model.encode(TEXT).input_ids


CASES = ["gpt2", "bert", "llama", "gemma2", "qwen3", "pythia", "t5"]


@pytest.mark.parametrize("case", CASES + ["olmo"])
def test_terms_sum_to_transformers_scores(families, case):
    """OLMo besides: its clamp of Q and K bites on these weights (an entry it holds at
    +-clip is the bias part's)."""
    model, hf = families[case]
    ids = input_ids(model, case)
    store = []
    with scores_read(store):
        run_reference(case, hf, ids)
    softmax_inputs, before_cap = store
    n_layer = len(hf.encoder.block) if case == "t5" else hf.config.num_hidden_layers
    capped = bool(before_cap)
    cap = getattr(hf.config, "attn_logit_softcapping", None)
    n = len(ids)
    for layer in range(n_layer):
        for head in range(Reference(case, hf).n_head):
            for query in (n // 2, n - 1):
                found = score_attribution(model, ids, layer, head, query)
                summed = found.terms.sum((0, 1))
                if capped:  # tanh reads s / cap: the scores before the cap
                    reference = before_cap[layer][0, head, query].numpy() * cap
                    seen = np.ones(n, dtype=bool)
                    np.testing.assert_allclose(found.capped_scores,
                                               cap * np.tanh(reference / cap), atol=1e-4)
                else:  # the softmax reads scores + mask: compare the keys the mask keeps
                    row = softmax_inputs[layer][0, head, query].numpy()
                    seen = row > -1e20
                    reference = row
                    np.testing.assert_array_equal(found.masked, ~seen)
                error = np.abs(summed[seen] - reference[seen]).max()
                assert error <= TOLERANCE * np.abs(reference[seen]).max(), (layer, head, query)
                assert found.terms.shape == (len(found.query_sources),
                                             len(found.key_sources), n)


# --- one term, in numpy ------------------------------------------------------------------


class SourceReference(Reference):
    """The entry query source L0.H{SOURCE_HEAD} x key source "embed", in numpy."""

    def modules_read(self):
        """name -> module whose input (or output, name ending "_out") the entry reads."""
        found = {"z": self.out_proj(0)}
        if self.pre_norm(1) is not None:
            found["norm_in"] = self.pre_norm(1)
        if self.case == "gemma2":
            found["attention_out"] = self.out_proj(0)
        if self.case == "qwen3":
            found["q_norm_in"] = self.attention(1).q_norm
            found["k_norm_in"] = self.attention(1).k_norm
        if self.case == "bert":
            found["embedding_ln_in"] = self.hf.embeddings.LayerNorm
            found["ln_1_in"] = self.layers[0].attention.output.LayerNorm
            found["ln_2_in"] = self.layers[0].output.LayerNorm
        return found

    def entry(self, ids, head, query, key) -> float:
        """The term query source L0.H{SOURCE_HEAD} x key source "embed" of layer 1's head
        `head`, from query `query` to key `key`, in numpy."""
        store = {}
        hooks = [capture_output(module, store, name) if name.endswith("_out")
                 else capture_input(module, store, name)
                 for name, module in self.modules_read().items()]
        run_reference(self.case, self.hf, ids, hooks)
        got = {name: numpy_of(value)[0] for name, value in store.items()}
        d_k = self.d_k
        z = got["z"][:, SOURCE_HEAD * d_k:(SOURCE_HEAD + 1) * d_k]
        head_part = z @ self.w_o(0, SOURCE_HEAD).T  # [T, d]: L0.H1's output, every token
        embed = self.embeddings(ids)  # [T, d]
        eps = getattr(self.config, "layer_norm_eps", None) or getattr(
            self.config, "rms_norm_eps", None) or getattr(self.config, "layer_norm_epsilon")
        if self.case == "gemma2":  # the heads' sum is normalised before it joins the stream
            weight = 1 + numpy_of(self.layers[0].post_attention_layernorm.weight)
            head_part = rms_frozen(head_part, got["attention_out"], weight, eps)
        if self.case == "bert":  # post-norm: the stream itself passes every LayerNorm
            hf = self.hf
            embed = ln_frozen(embed, got["embedding_ln_in"],
                              numpy_of(hf.embeddings.LayerNorm.weight), eps)
            for name, norm in (("ln_1_in", self.layers[0].attention.output.LayerNorm),
                               ("ln_2_in", self.layers[0].output.LayerNorm)):
                embed, head_part = (ln_frozen(x, got[name], numpy_of(norm.weight), eps)
                                    for x in (embed, head_part))
        norm = self.pre_norm(1)
        if norm is not None:
            weight = numpy_of(norm.weight) + (1.0 if self.case == "gemma2" else 0.0)
            frozen = ln_frozen if self.case in ("gpt2", "pythia") else rms_frozen
            embed, head_part = (frozen(x, got["norm_in"], weight, eps)
                                for x in (embed, head_part))
        kv = self.kv_head(head)
        q = self.w_qk(1, "q", head) @ head_part[query]
        k = self.w_qk(1, "k", kv) @ embed[key]
        if self.case == "qwen3":  # each head's query and key normalised, the scale frozen
            attention = self.attention(1)
            q = rms_frozen(q, got["q_norm_in"][query, head], numpy_of(attention.q_norm.weight),
                           eps)
            k = rms_frozen(k, got["k_norm_in"][key, kv], numpy_of(attention.k_norm.weight), eps)
        rotary = self.rotary()
        if rotary is not None:
            q, k = rotate(q, query, *rotary), rotate(k, key, *rotary)
        return float(self.scale() * q @ k)


@pytest.mark.parametrize("case", CASES)
def test_one_term_is_its_two_sources_alone(families, case):
    model, hf = families[case]
    ids = input_ids(model, case)
    reference = SourceReference(case, hf)
    head = reference.n_head - 1  # under GQA, a head reading the last key/value head
    query, key = len(ids) - 1, len(ids) // 2
    found = score_attribution(model, ids, 1, head, query)
    term = found.terms[found.query_sources.index(f"L0.H{SOURCE_HEAD}"),
                       found.key_sources.index("embed"), key]
    expected = reference.entry(ids, head, query, key)
    assert abs(term - expected) <= 1e-5 * abs(expected) + 1e-9, (term, expected)
    assert abs(expected) > 1e-5  # a term that would show a mistake


# --- what the result says ----------------------------------------------------------------


def test_sources_soft_cap_and_mask_are_named(families):
    t5 = score_attribution(families["t5"][0], TEXT, 1, 0, 2)
    assert t5.query_sources[-2:] == ["bias", "position_bias"]
    bias_cell = t5.terms[-1, -1]
    assert np.abs(t5.terms[-1, :-1]).max() == 0 and np.abs(bias_cell).max() > 0
    gpt2 = score_attribution(families["gpt2"][0], TEXT, 1, 2, 4)
    assert gpt2.query_sources[:2] == ["embed", "pos_embed"] and "L0.mlp" in gpt2.query_sources
    assert gpt2.masked.tolist() == [j > 4 for j in range(len(gpt2.keys))]
    bert = score_attribution(families["bert"][0], TEXT, 1, 0, 3)
    assert "type_embed" in bert.key_sources and not bert.masked.any()
    gemma = score_attribution(families["gemma2"][0], TEXT, 2, 0, 9)
    assert gemma.softcap == 4.0
    assert np.abs(gemma.capped_scores).max() < 4.0 < np.abs(gemma.scores).max()
    assert gemma.masked.tolist() == [not 9 - 5 < j <= 9 for j in range(len(gemma.keys))]


def test_contrast_and_strongest_sources(families):
    model = families["llama"][0]
    query = 8  # keys after it are masked: the mean contrast leaves them out
    found = score_attribution(model, TEXT, 2, 5, query, contrast=3)
    by_hand = found.terms - found.terms[:, :, 3:4]
    np.testing.assert_allclose(found.contrast_terms, by_hand, atol=1e-12)
    np.testing.assert_allclose(found.contrast_terms.sum((0, 1)),
                               found.scores - found.scores[3], atol=1e-4)
    mean = score_attribution(model, TEXT, 2, 5, query, keys=[2, 6], contrast="mean")
    visible = found.terms[:, :, ~found.masked].mean(-1)
    np.testing.assert_allclose(mean.contrast_terms[:, :, 1], found.terms[:, :, 6] - visible,
                               atol=1e-12)
    np.testing.assert_allclose(mean.terms, found.terms[:, :, [2, 6]], atol=1e-12)
    assert mean.keys.tolist() == [2, 6]
    top = found.strongest(6, k=3)
    matrix = found.terms[:, :, 6]
    largest = np.unravel_index(np.abs(matrix).argmax(), matrix.shape)
    assert top[0] == (found.query_sources[largest[0]], found.key_sources[largest[1]],
                      matrix[largest])
    assert abs(top[0][2]) >= abs(top[1][2]) >= abs(top[2][2])
    side = found.strongest_sources(6, "key", k=2, contrasted=True)
    key_side = found.contrast_terms[:, :, 6].sum(0)
    strongest = int(np.abs(key_side).argmax())
    assert side[0] == (found.key_sources[strongest], key_side[strongest])


def test_bad_requests_get_a_message(families):
    model = families["gpt2"][0]
    with pytest.raises(InputError, match="layer must be"):
        score_attribution(model, TEXT, 9, 0, 1)
    with pytest.raises(InputError, match="query must be"):
        score_attribution(model, TEXT, 1, 0, 99)
    with pytest.raises(InputError, match="contrast must be"):
        score_attribution(model, TEXT, 1, 0, 3, contrast="median")
    found = score_attribution(model, TEXT, 1, 0, 3, keys=[1, 2])
    with pytest.raises(InputError, match="not among the keys"):
        found.key_side(5)
    with pytest.raises(InputError, match="no contrast"):
        found.strongest(1, contrasted=True)


def test_a_model_that_cannot_be_split_says_why(tmp_path, families):
    """An encoder reading an image has no token embedding to split its scores into."""
    from mha_viz.analysis import composition_scores
    from mha_viz.testing import make_image_to_text_checkpoint

    model = load_model(make_image_to_text_checkpoint(tmp_path / "reader"))
    for call in (lambda: score_attribution(model, "abc", 0, 0, 0),
                 lambda: composition_scores(model, "abc", 1, 0)):
        with pytest.raises(InputError, match="reads an image.*token embedding"):
            call()
    # asked before a page offers the split: the same reason, and nothing for a text model
    from mha_viz.analysis import why_no_split

    assert "reads an image" in why_no_split(model)
    assert all(why_no_split(text_model) is None for text_model, _ in families.values())


def test_a_block_wired_otherwise_than_described_is_an_error_not_a_figure(gpt2_model,
                                                                         bert_model,
                                                                         monkeypatch):
    """The split follows each block's description of its wiring and checks, layer by layer,
    that its parts add up to the stream the engine computed: a description that says
    pre-norm for BERT's post-norm layer 0, one that says post-norm for GPT-2's layer 1, and
    a forward changed without its description (GPT-2's layer 0 adding its input twice) each
    stop with a WiringError naming the layer, instead of terms that add up to a wrong
    stream."""
    from mha_viz.engine.wiring import WiringError, block_wiring

    def wiring(pre_norm):
        return block_wiring(pre_norm=pre_norm, input_norms=True, post_norms=False,
                            parallel=False, cross_attention=False)

    for model in (gpt2_model, bert_model):  # as described: the split adds up
        score_attribution(model, TEXT, 1, 0, 3)
    with monkeypatch.context() as patch:
        patch.setattr(bert_model.network.blocks[0], "wiring", wiring(pre_norm=True))
        with pytest.raises(WiringError, match="layer 0's output"):
            score_attribution(bert_model, TEXT, 1, 0, 3)
    with monkeypatch.context() as patch:
        patch.setattr(gpt2_model.network.blocks[1], "wiring", wiring(pre_norm=False))
        with pytest.raises(WiringError, match="what layer 1's heads read"):
            score_attribution(gpt2_model, TEXT, 1, 0, 3)
    block = gpt2_model.network.blocks[0]
    forward = block.forward

    def input_twice(h, **options):
        out, weights = forward(h, **options)
        return out + h, weights

    with monkeypatch.context() as patch:
        patch.setattr(block, "forward", input_twice)
        with pytest.raises(WiringError, match="layer 0's output .* relative gap"):
            score_attribution(gpt2_model, TEXT, 1, 0, 3)
    vars(block).pop("forward", None)  # the class's own forward again
    score_attribution(gpt2_model, TEXT, 1, 0, 3)
