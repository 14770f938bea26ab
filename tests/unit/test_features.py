"""Features at the head against someone else: random dictionaries built and written by SAELens
itself, on random GPT-2, Llama (grouped-query) and Gemma 2 checkpoints run by transformers
(eager attention, read with forward hooks written here).

- feature_heads: each feature's decoder-norm share per head, from SAELens's own W_dec.
- feature_sources: terms[h, j] = alpha_ij^h v_j^h . W_enc[h-block, f] from transformers'
  attention weights and values (and the frame SAELens applies), summing with the bias to the
  pre-activation SAELens computes from transformers' z (1e-4).
- feature_score_attribution: the terms sum to transformers' own pre-softmax scores (1e-4 of
  the row's largest), and one feature x feature term equals the product recomputed in numpy
  from the two decoder rows (times SAELens's activations of transformers' residual stream)
  through the frozen norm, W_Q, W_K and RoPE.
"""

import numpy as np
import pytest
import torch
from tests.support.hf_reference import capture_input, capture_output, hooked
from tests.support.score_reference import (Reference, ln_frozen, numpy_of, rms_frozen, rotate,
                                           run_reference, scores_read)

from mha_viz import DictionaryFileError, InputError, load_sae
from mha_viz.analysis.features import (feature_heads, feature_score_attribution,
                                       feature_sources)

pytestmark = pytest.mark.unit
sae_lens = pytest.importorskip("sae_lens")

TEXT = "the cat sat on the mat and the dog ran to the tree"
TOLERANCE = 1e-4
CASES = ["gpt2", "llama", "gemma2"]


def saelens_dictionary(architecture, hook_name, d_in, d_sae, seed, **settings):
    from sae_lens.saes.sae import SAEMetadata

    classes = {"standard": (sae_lens.StandardSAE, sae_lens.StandardSAEConfig),
               "topk": (sae_lens.TopKSAE, sae_lens.TopKSAEConfig)}
    sae_class, cfg_class = classes[architecture]
    sae = sae_class(cfg_class(d_in=d_in, d_sae=d_sae, metadata=SAEMetadata(
        hook_name=hook_name, model_name="random"), **settings))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in sae.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    return sae


@pytest.fixture(scope="module")
def cases(patch_models, tmp_path_factory):
    """case -> (our model, transformers' model, {name: (SAELens's dictionary, ours)}): a
    hook_z dictionary at layer 1 (plain, and one that layer-norms its input) and a residual
    one at layer 1's input, written by SAELens and read by load_sae."""
    out = {}
    for case in CASES:
        model, hf, _ = patch_models[case]
        info = model.info
        built = {
            "hook_z": saelens_dictionary("standard", "blocks.1.attn.hook_z",
                                         info.n_head * info.d_head, 48, 1,
                                         reshape_activations="hook_z"),
            "hook_z_ln": saelens_dictionary("standard", "blocks.1.attn.hook_z",
                                            info.n_head * info.d_head, 48, 2,
                                            reshape_activations="hook_z",
                                            normalize_activations="layer_norm"),
            "resid": saelens_dictionary("topk", "blocks.1.hook_resid_pre", info.d_model, 64,
                                        3, k=6),
        }
        dictionaries = {}
        for name, reference in built.items():
            folder = tmp_path_factory.mktemp(f"{case}_{name}")
            reference.save_model(folder)
            dictionaries[name] = (reference, load_sae(folder, model=model))
        out[case] = (model, hf, dictionaries)
    return out


def hf_reads(case, hf, ids):
    """transformers' attention weights [L][H, T, T], every head's z at layer 1 [T, H*d_k],
    the values of layer 1 [T, H_kv * d_k] and the residual stream entering layer 1 [T, d]."""
    reference = Reference(case, hf)
    store = {}
    attention = reference.attention(1)
    values = (attention.c_attn if case == "gpt2" else attention.v_proj)
    hooks = [capture_input(reference.out_proj(1), store, "z"),
             capture_output(values, store, "v"),
             capture_input(reference.pre_norm(1), store, "resid")]
    with torch.no_grad(), hooked(hooks):
        out = hf(torch.tensor([ids]), output_attentions=True)
    v = store["v"][0]
    if case == "gpt2":
        v = v[:, 2 * hf.config.n_embd:]
    return ([a[0].double() for a in out.attentions], store["z"][0].double(), v.double(),
            store["resid"][0])


def test_head_shares_are_the_decoder_row_norms(cases):
    model, _, dictionaries = cases["llama"]
    reference, ours = dictionaries["hook_z"]
    shares = feature_heads(ours, model)
    n_head = model.info.n_head
    blocks = numpy_of(reference.W_dec).reshape(reference.cfg.d_sae, n_head, -1)
    norms = np.linalg.norm(blocks, axis=-1)
    np.testing.assert_allclose(shares, norms / norms.sum(-1, keepdims=True), atol=1e-6)
    assert shares.shape == (48, n_head)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", ["hook_z", "hook_z_ln"])
def test_sources_are_alpha_v_dot_w_enc_from_transformers(cases, case, name):
    model, hf, dictionaries = cases[case]
    reference, ours = dictionaries[name]
    ids = model.encode(TEXT).input_ids
    attentions, z, v, _ = hf_reads(case, hf, ids)
    n_head, d_k = model.info.n_head, model.info.d_head
    kv = [Reference(case, hf).kv_head(h) for h in range(n_head)]
    pre_store = {}
    with torch.no_grad(), hooked([capture_output(reference.hook_sae_acts_pre, pre_store,
                                                 "pre")]):
        acts = reference.encode(z.float().view(len(ids), n_head, d_k))
    w_enc, b_dec = numpy_of(reference.W_enc), numpy_of(reference.b_dec)
    query = len(ids) - 2
    for feature in (int(acts[query].argmax()), 7):
        found = feature_sources(model, ours, TEXT, query, feature)
        # what head h carries from key j, placed in its block of the dictionary's input
        carried = np.zeros((n_head, len(ids), n_head * d_k))
        for h in range(n_head):
            alpha = attentions[1][h, query].numpy()
            carried[h, :, h * d_k:(h + 1) * d_k] = (
                alpha[:, None] * v[:, kv[h] * d_k:(kv[h] + 1) * d_k].numpy())
        z_query = z[query].numpy()
        if name == "hook_z_ln":  # SAELens: (z - mean) / (std + 1e-5), std unbiased
            carried = carried - carried.mean(-1, keepdims=True)
            carried /= z_query.std(ddof=1) + 1e-5
        expected = carried @ w_enc[:, feature]
        np.testing.assert_allclose(found.terms, expected, atol=TOLERANCE)
        want_pre = float(pre_store["pre"][query, feature])  # SAELens's own pre-activation
        assert abs(found.terms.sum() + found.bias - want_pre) <= TOLERANCE * max(
            1.0, abs(want_pre))
        assert abs(found.pre_activation - want_pre) <= TOLERANCE * max(1.0, abs(want_pre))
        assert found.activation == pytest.approx(float(acts[query, feature]), abs=1e-5)
        assert np.abs(expected).max() > 1e-3  # terms that would show a mistake
        if name == "hook_z":
            np.testing.assert_allclose(found.bias, (numpy_of(reference.b_enc)
                                                    - b_dec @ w_enc)[feature], atol=1e-6)


def resid_and_scores(cases, case):
    """(our model, the residual dictionary, TEXT's ids, [transformers' softmax inputs, its
    scores before the soft-cap])."""
    model, hf, dictionaries = cases[case]
    ids = model.encode(TEXT).input_ids
    store = []
    with scores_read(store):
        run_reference(case, hf, ids)
    return model, dictionaries["resid"][1], ids, store


@pytest.mark.parametrize("case", CASES)
def test_score_terms_sum_to_transformers_scores(cases, case):
    model, ours, ids, (softmax_inputs, before_cap) = resid_and_scores(cases, case)
    hf = cases[case][1]
    cap = getattr(hf.config, "attn_logit_softcapping", None)
    n = len(ids)
    for head in range(model.info.n_head):
        for query in (n // 2, n - 1):
            found = feature_score_attribution(model, ids, 1, head, query, sae=ours)
            summed = found.terms.sum((0, 1))
            if before_cap:
                reference = before_cap[1][0, head, query].numpy() * cap
                seen = np.ones(n, dtype=bool)
            else:
                row = softmax_inputs[1][0, head, query].numpy()
                seen, reference = row > -1e20, row
                np.testing.assert_array_equal(found.masked, ~seen)
            error = np.abs(summed[seen] - reference[seen]).max()
            assert error <= TOLERANCE * np.abs(reference[seen]).max(), (head, query)
            assert found.query_sources[-3:] == ["b_dec", "error", "bias"]
            assert all(s.startswith("f") for s in found.query_sources[:-3])
            assert len(found.query_sources) - 3 == len(found.activations[query]) <= 6


@pytest.mark.parametrize("case", CASES)
def test_one_feature_pair_is_its_two_decoder_rows_alone(cases, case):
    model, hf, dictionaries = cases[case]
    reference_sae, ours = dictionaries["resid"]
    ids = model.encode(TEXT).input_ids
    reference = Reference(case, hf)
    head = reference.n_head - 1
    query, key = len(ids) - 1, len(ids) // 2
    *_, resid = hf_reads(case, hf, ids)
    with torch.no_grad():
        acts = reference_sae.encode(resid).double().numpy()  # SAELens on transformers' stream
    f, g = int(np.abs(acts[query]).argmax()), int(np.abs(acts[key]).argmax())
    found = feature_score_attribution(model, ids, 1, head, query, sae=ours, keys=[key, 2])
    term = found.terms[found.query_sources.index(f"f{f}"), found.key_sources.index(f"f{g}"), 0]
    w_dec, x = numpy_of(reference_sae.W_dec), numpy_of(resid)
    norm = reference.pre_norm(1)
    eps = getattr(hf.config, "layer_norm_epsilon", None) or hf.config.rms_norm_eps
    weight = numpy_of(norm.weight) + (1.0 if case == "gemma2" else 0.0)
    frozen = ln_frozen if case == "gpt2" else rms_frozen
    q_part = frozen(acts[query, f] * w_dec[f], x[query], weight, eps)
    k_part = frozen(acts[key, g] * w_dec[g], x[key], weight, eps)
    q = reference.w_qk(1, "q", head) @ q_part
    k = reference.w_qk(1, "k", reference.kv_head(head)) @ k_part
    rotary = reference.rotary()
    if rotary is not None:
        q, k = rotate(q, query, *rotary), rotate(k, key, *rotary)
    expected = float(reference.scale() * q @ k)
    assert abs(term - expected) <= 1e-5 * abs(expected) + 1e-9, (term, expected)
    assert abs(expected) > 1e-5
    assert found.keys.tolist() == [key, 2]
    assert found.activations[key][g] == pytest.approx(acts[key, g], abs=1e-5)


def test_bad_requests_get_a_message(cases, gpt2_model):
    model, _, dictionaries = cases["gpt2"]
    _, hook_z = dictionaries["hook_z"]
    _, resid = dictionaries["resid"]
    with pytest.raises(InputError, match="stream entering it"):
        feature_score_attribution(model, TEXT, 1, 0, 3, sae=hook_z)
    with pytest.raises(InputError, match="stream entering it"):
        feature_score_attribution(model, TEXT, 0, 0, 3, sae=resid)
    with pytest.raises(InputError, match="query must be"):
        feature_score_attribution(model, TEXT, 1, 0, 99, sae=resid)
    with pytest.raises(InputError, match="hook_z dictionary"):
        feature_sources(model, resid, TEXT, 3, 0)
    with pytest.raises(InputError, match="feature must be"):
        feature_sources(model, hook_z, TEXT, 3, 48)
    llama = cases["llama"][0]
    with pytest.raises(DictionaryFileError, match="dictionary of another model"):
        feature_sources(llama, hook_z, TEXT, 3, 0)


def test_an_image_encoder_is_refused(tmp_path, cases):
    from mha_viz import load_model
    from mha_viz.testing import make_image_to_text_checkpoint

    model = load_model(make_image_to_text_checkpoint(tmp_path / "reader"))
    _, resid = cases["gpt2"][2]["resid"]
    with pytest.raises((InputError, DictionaryFileError)):
        feature_score_attribution(model, "abc", 1, 0, 0, sae=resid)


# --- a feature's dashboard ---------------------------------------------------------------

SNIPPET_TEXTS = [TEXT, "a dog and a cat ran home", "the tree by the river was old and tall",
                 "birds sang on the mat while the cat slept", "the old dog sat by the tree"]


def hf_z(hf, ids):
    store = {}
    with torch.no_grad(), hooked([capture_input(hf.transformer.h[1].attn.c_proj, store, "z")]):
        hf(torch.tensor([ids]))
    return store["z"][0]


def test_firing_and_output_tokens_from_transformers(cases):
    from mha_viz.analysis import feature_firing, feature_output_tokens

    model, hf, dictionaries = cases["gpt2"]
    reference, ours = dictionaries["hook_z"]
    ids = model.encode(TEXT).input_ids
    with torch.no_grad():
        want = reference.encode(hf_z(hf, ids).view(len(ids), 4, 16)).numpy()
    firing = feature_firing(model, ours, TEXT)
    np.testing.assert_allclose(firing.acts, want, atol=1e-5)
    feature, peak = firing.strongest_features(1)[0]
    assert peak == pytest.approx(want.max())
    # the decoder row through c_proj (Conv1D: z @ W), ln_f's weight and the tied embedding
    row = numpy_of(reference.W_dec)[feature] @ numpy_of(hf.transformer.h[1].attn.c_proj.weight)
    logits = numpy_of(hf.transformer.wte.weight) @ (row * numpy_of(hf.transformer.ln_f.weight))
    tokens = feature_output_tokens(model, ours, feature, k=5)
    assert [t for t, _ in tokens.top] == model.display_tokens(np.argsort(-logits)[:5].tolist())
    np.testing.assert_allclose([v for _, v in tokens.bottom], np.sort(logits)[:5], rtol=1e-4)


def test_snippets_are_the_strongest_activations_over_the_texts(cases):
    from mha_viz.corpus import feature_snippets

    model, hf, dictionaries = cases["gpt2"]
    reference, ours = dictionaries["hook_z"]
    found = []  # (activation, text, position) of every token, from transformers and SAELens
    for t, text in enumerate(SNIPPET_TEXTS):
        ids = model.tokenizer(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            acts = reference.encode(hf_z(hf, ids).view(len(ids), 4, 16)).numpy()
        found += [(acts[p], t, p, ids) for p in range(len(ids))]
    features = [3, 17, 40]
    whole = feature_snippets(model, ours, SNIPPET_TEXTS, features=features, k=4, seg_len=32)
    halves = feature_snippets(model, ours, SNIPPET_TEXTS[:2], features=features, k=4,
                              seg_len=32).merge(feature_snippets(
        model, ours, SNIPPET_TEXTS[2:], features=features, k=4, seg_len=32))
    for row, feature in enumerate(features):
        ranked = sorted(found, key=lambda item: -item[0][feature])[:4]
        want = [a[feature] if a[feature] > 0 else -np.inf for a, *_ in ranked]
        np.testing.assert_allclose(whole.values[row], want, atol=1e-5)
        np.testing.assert_allclose(halves.values[row], whole.values[row], atol=0)
        tokens, position, value = whole.snippet(model, feature, 0)
        _, _, p, ids = ranked[0]
        assert tokens[position] == model.display_tokens([ids[p]])[0]
        assert value == pytest.approx(want[0], abs=1e-5)
    assert whole.n_segments == len(SNIPPET_TEXTS)


# --- what the Features page and the why panel read ------------------------------------------


def test_a_heads_features_are_ranked_by_activation_times_share(cases):
    """head_features against SAELens's activations of transformers' z (position 0 left out,
    as training leaves it out) and the decoder-norm shares of SAELens's W_dec, both written
    here; each feature's peak and a window of the text around it."""
    from mha_viz.analysis import feature_firing, head_features

    model, hf, dictionaries = cases["gpt2"]
    reference, ours = dictionaries["hook_z"]
    ids = model.encode(TEXT).input_ids
    with torch.no_grad():
        acts = reference.encode(hf_z(hf, ids).view(len(ids), 4, 16)).double().numpy()
    norms = np.linalg.norm(numpy_of(reference.W_dec).reshape(48, 4, 16), axis=-1)
    shares = norms / norms.sum(-1, keepdims=True)
    firing = feature_firing(model, ours, TEXT)
    for head in range(4):
        weight = acts[1:].sum(0) * shares[:, head]
        want = [f for f in np.argsort(-weight, kind="stable")[:5] if weight[f] > 0]
        found = head_features(firing, feature_heads(ours, model), head, k=5)
        assert found.features == [int(f) for f in want] and len(want) >= 3
        np.testing.assert_allclose(found.summed, acts[1:].sum(0)[want], rtol=1e-5)
        np.testing.assert_allclose(found.share, shares[want, head], atol=1e-6)
        assert found.peak == [int(np.argmax(acts[1:, f])) + 1 for f in want]
    tokens, at = firing.window(found.peak[0], before=3, after=1)
    assert tokens[at] == model.display_tokens([ids[found.peak[0]]])[0]
    assert len(tokens) <= 5 and firing.window(0)[1] == 0
    with pytest.raises(InputError, match="head must be"):
        head_features(firing, feature_heads(ours, model), 4)


@pytest.mark.parametrize("case", ["gpt2", "llama"])
def test_a_score_as_feature_pairs_sums_to_transformers_score(cases, case):
    """FeatureScoreAttribution.pairs: the named pairs, the error, b_dec and bias terms and
    the other pairs add up to transformers' pre-softmax score; the pairs named are the
    largest feature x feature terms; parts() names, on each side, the sources of largest
    share (a dictionary's query and key sides hold different features)."""
    model, ours, ids, store = resid_and_scores(cases, case)
    query, key, head = len(ids) - 1, len(ids) // 2, 1
    score = store[0][1][0, head, query, key].item()
    found = feature_score_attribution(model, ids, 1, head, query, sae=ours)
    pairs = found.pairs(key, k=4)
    assert abs(pairs.named + sum(pairs.parts.values()) + pairs.others - score) <= \
        TOLERANCE * max(1.0, abs(score))
    assert pairs.total == pytest.approx(score, abs=TOLERANCE * max(1.0, abs(score)))
    assert set(pairs.parts) == {"error", "b_dec", "bias"}
    matrix = found.terms[:, :, found.column(key)]
    features_q = [i for i, s in enumerate(found.query_sources) if s.startswith("f")]
    features_k = [j for j, s in enumerate(found.key_sources) if s.startswith("f")]
    between = np.abs(matrix[np.ix_(features_q, features_k)])
    assert [abs(t) for _, _, t in pairs.pairs] == pytest.approx(
        np.sort(between.ravel())[::-1][:4].tolist())
    assert pairs.n_others == between.size - 4
    parts = found.parts(key, 3)
    key_side = matrix.sum(0)
    assert parts.cols[:3] == [found.key_sources[j] for j in
                              np.argsort(-np.abs(key_side), kind="stable")[:3]]
    assert parts.cells.sum() == pytest.approx(score, abs=TOLERANCE * max(1.0, abs(score)))
    q_name, k_name, _ = pairs.pairs[0]
    assert found.activation(query, q_name) == found.activations[query][int(q_name[1:])]
    assert found.activation(query, "error") == 0.0


def test_snippets_as_a_job_count_their_segments(cases):
    from mha_viz.corpus import feature_snippets, feature_snippets_job

    model, _, dictionaries = cases["gpt2"]
    _, ours = dictionaries["hook_z"]
    told = []
    found = feature_snippets_job(model, ours, SNIPPET_TEXTS, features=[3, 17], k=2, seg_len=32,
                                 progress=lambda done, total: told.append((done, total)))
    plain = feature_snippets(model, ours, SNIPPET_TEXTS, features=[3, 17], k=2, seg_len=32)
    np.testing.assert_array_equal(found.values, plain.values)
    assert told[-1] == (len(SNIPPET_TEXTS), len(SNIPPET_TEXTS))
    assert all(total == len(SNIPPET_TEXTS) for _, total in told)


def test_a_visitor_opens_only_folders_the_server_allows(cases, tmp_path):
    from mha_viz.core.errors import NotAllowedError
    from mha_viz.dictionaries import bundled_saes

    model, _, dictionaries = cases["gpt2"]
    reference, _ = dictionaries["hook_z"]
    allowed, elsewhere = tmp_path / "allowed", tmp_path / "elsewhere"
    reference.save_model(allowed / "mine")
    reference.save_model(elsewhere / "theirs")
    (allowed / "a-file").write_text("x")
    sae = load_sae(str(allowed / "mine"), model=model, local_dirs=[allowed])
    assert sae.site == "hook_z" and "mine" in sae.source and str(tmp_path) not in sae.source
    messages = set()
    for asked in (elsewhere / "theirs", allowed / "missing", allowed / "a-file", "",
                  allowed / ".." / "elsewhere" / "theirs", "gpt2-small:blocks.1.hook_z"):
        with pytest.raises(NotAllowedError) as refused:
            load_sae(str(asked), local_dirs=[allowed])
        messages.add(str(refused.value))
    assert len(messages) == 1 and str(tmp_path) not in messages.pop()
    assert load_sae("induction-toy/L1.hook_z", local_dirs=[allowed]).layer == 1
    assert set(bundled_saes("induction-toy")) == {"induction-toy/L0.hook_z",
                                                  "induction-toy/L1.hook_z",
                                                  "induction-toy/L1.resid_pre"}
    assert bundled_saes("no-such-model") == {}
