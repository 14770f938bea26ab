"""Causal interventions against an independent implementation: forward hooks (and, where
transformers offers no module to hook, its own attention functions wrapped) on transformers'
GPT2LMHeadModel, LlamaForCausalLM (grouped-query), GPTNeoXForCausalLM (parallel) and
Gemma2ForCausalLM (grouped-query, soft-capped, windowed) with the same random weights, on our own
token ids. Every number of activation, path and attribution patching is compared within
2e-3 on the metric; the laws that hold exactly are checked too."""

import numpy as np
import pytest
import torch
from tests.support.hf_reference import (TEXT, capture_input, capture_output, hf_metric, hooked,
                                        ids_of, pattern_capture, pattern_patch, replace_input,
                                        replace_output, take, target_metric)

from mha_viz import TargetMetric
from mha_viz.analysis.patching import activation_patching, attribution_patching, path_patching
from mha_viz.analysis.prompts import PromptPair, swap_token
from mha_viz.core.errors import InputError
from mha_viz.engine.interventions import run_with_hooks

TOL = 2e-3


# --- head patching, both directions ---------------------------------------------------------


@pytest.mark.parametrize("family", ["gpt2", "llama", "neox", "gemma2"])
@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_head_patching_equals_hooks(patch_models, patch_prompts, family, direction):
    model, hf, where = patch_models[family]
    where = where(hf)
    clean, corrupted, target, contrast = patch_prompts[family]
    base, source = (corrupted, clean) if direction == "denoise" else (clean, corrupted)
    base_ids, source_ids = ids_of(model, base), ids_of(model, source)
    store = {}
    with hooked([capture_input(where.out_proj(l), store, l) for l in range(where.n_layer)]):
        hf_metric(hf, source_ids, target, contrast)
    expected = np.zeros((where.n_layer, where.n_head))
    for layer in range(where.n_layer):
        for head in range(where.n_head):
            cols = slice(head * where.dk, (head + 1) * where.dk)

            swap = take(store[layer], (..., cols))
            with hooked([replace_input(where.out_proj(layer), swap)]):
                expected[layer, head] = hf_metric(hf, base_ids, target, contrast)
    result = activation_patching(model, clean, corrupted, target_metric(patch_prompts[family]),
                                 component="head", direction=direction)
    assert result.values.shape == expected.shape
    assert np.abs(result.values - expected).max() < TOL
    assert abs(result.clean - hf_metric(hf, ids_of(model, clean), target, contrast)) < TOL
    assert abs(result.corrupted - hf_metric(hf, ids_of(model, corrupted), target,
                                            contrast)) < TOL
    norm = (expected - result.corrupted) / (result.clean - result.corrupted)
    assert np.abs(result.normalized - norm).max() < TOL / abs(result.clean - result.corrupted)


# --- the residual stream, attn_out and mlp_out by position -----------------------------------


@pytest.mark.parametrize("family", ["gpt2", "llama", "neox", "gemma2"])
@pytest.mark.parametrize("component", ["resid_pre", "attn_out", "mlp_out"])
def test_stream_patching_by_position_equals_hooks(patch_models, patch_prompts, family, component):
    model, hf, where = patch_models[family]
    where = where(hf)
    clean, corrupted, target, contrast = patch_prompts[family]
    clean_ids, corrupted_ids = ids_of(model, clean), ids_of(model, corrupted)
    n = len(clean_ids)
    module_of = {"resid_pre": where.block, "attn_out": where.attn, "mlp_out": where.mlp}[component]
    capture = capture_input if component == "resid_pre" else capture_output
    replace = replace_input if component == "resid_pre" else replace_output
    store = {}
    with hooked([capture(module_of(l), store, l) for l in range(where.n_layer)]):
        hf_metric(hf, clean_ids, target, contrast)
    expected = np.zeros((where.n_layer, n))
    for layer in range(where.n_layer):
        for pos in range(n):
            swap = take(store[layer], (slice(None), pos))
            with hooked([replace(module_of(layer), swap)]):
                expected[layer, pos] = hf_metric(hf, corrupted_ids, target, contrast)
    result = activation_patching(model, clean, corrupted, target_metric(patch_prompts[family]),
                                 component=component)
    assert result.values.shape == (where.n_layer, n)
    assert np.abs(result.values - expected).max() < TOL


# --- q, k, v (per query head and per key/value head) and the pattern -------------------------


@pytest.mark.parametrize("family,component", [("gpt2", "q"), ("gpt2", "k"), ("gpt2", "v"),
                                              ("llama", "q"), ("llama", "shared_k"),
                                              ("llama", "shared_v")])
def test_qkv_patching_equals_hooks(patch_models, patch_prompts, family, component):
    model, hf, where = patch_models[family]
    where = where(hf)
    clean, corrupted, target, contrast = patch_prompts[family]
    clean_ids, corrupted_ids = ids_of(model, clean), ids_of(model, corrupted)
    part = component[-1]
    store = {}
    with hooked([capture_output(where.qkv_module(part, l), store, l)
                 for l in range(where.n_layer)]):
        hf_metric(hf, clean_ids, target, contrast)
    n_units = where.n_head if part == "q" or family == "gpt2" else where.n_kv_head
    expected = np.zeros((where.n_layer, n_units))
    for layer in range(where.n_layer):
        for unit in range(n_units):
            cols = where.qkv_slice(part, unit)

            swap = take(store[layer], (..., cols))
            with hooked([replace_output(where.qkv_module(part, layer), swap)]):
                expected[layer, unit] = hf_metric(hf, corrupted_ids, target, contrast)
    result = activation_patching(model, clean, corrupted, target_metric(patch_prompts[family]),
                                 component=component)
    assert np.abs(result.values - expected).max() < TOL


@pytest.mark.parametrize("part", ["k", "v"])
def test_grouped_query_key_value_of_one_query_head(patch_models, patch_prompts, monkeypatch, part):
    """On a grouped-query model, patching head h's k (or v) changes only what head h reads:
    transformers shares one key/value head by repeat_kv, wrapped here to patch one copy."""
    from transformers.models.llama import modeling_llama

    model, hf, where = patch_models["llama"]
    where = where(hf)
    clean, corrupted, target, contrast = patch_prompts["llama"]
    original = modeling_llama.repeat_kv
    calls = []

    def recording(x, n_rep):
        out = original(x, n_rep)
        calls.append(out.detach().clone())
        return out
    monkeypatch.setattr(modeling_llama, "repeat_kv", recording)
    hf_metric(hf, ids_of(model, clean), target, contrast)
    clean_kv = list(calls)  # per layer: keys, then values
    which = 0 if part == "k" else 1
    expected = np.zeros((where.n_layer, where.n_head))
    for layer in range(where.n_layer):
        for head in range(where.n_head):
            count = {"n": 0}

            def patched(x, n_rep, layer=layer, head=head):
                out = original(x, n_rep)
                index = count["n"]
                count["n"] += 1
                if index == 2 * layer + which:
                    out = out.clone()
                    out[:, head] = clean_kv[index][:, head]
                return out
            monkeypatch.setattr(modeling_llama, "repeat_kv", patched)
            expected[layer, head] = hf_metric(hf, ids_of(model, corrupted), target, contrast)
    monkeypatch.setattr(modeling_llama, "repeat_kv", original)
    result = activation_patching(model, clean, corrupted, target_metric(patch_prompts["llama"]),
                                 component=part)
    assert result.values.shape == (where.n_layer, where.n_head)
    assert np.abs(result.values - expected).max() < TOL
    # the group's shared key is another intervention: the two must differ somewhere
    shared = activation_patching(model, clean, corrupted, target_metric(patch_prompts["llama"]),
                                 component=f"shared_{part}")
    assert shared.values.shape == (where.n_layer, where.n_kv_head)
    assert not np.allclose(shared.values[:, 0], result.values[:, 0], atol=1e-4)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_pattern_patching_equals_hooks(patch_models, patch_prompts, family, monkeypatch):
    model, hf, where = patch_models[family]
    where = where(hf)
    clean, corrupted, target, contrast = patch_prompts[family]
    patterns = []
    original = pattern_capture(monkeypatch, patterns)
    hf_metric(hf, ids_of(model, clean), target, contrast)
    monkeypatch.setattr(torch.nn.functional, "dropout", original)
    expected = np.zeros((where.n_layer, where.n_head))
    for layer in range(where.n_layer):
        for head in range(where.n_head):
            with pattern_patch(monkeypatch, layer, head, patterns):
                expected[layer, head] = hf_metric(hf, ids_of(model, corrupted), target, contrast)
    result = activation_patching(model, clean, corrupted, target_metric(patch_prompts[family]),
                                 component="pattern")
    assert np.abs(result.values - expected).max() < TOL


# --- path patching ---------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["gpt2", "llama", "neox"])
def test_path_patching_to_logits_equals_hooks(patch_models, patch_prompts, family):
    """Noising (Wang et al.): the clean run, one sender's z from the corrupted run, every
    attention layer above it frozen at its clean output, MLPs recomputed."""
    model, hf, where = patch_models[family]
    where = where(hf)
    clean, corrupted, target, contrast = patch_prompts[family]
    clean_ids, corrupted_ids = ids_of(model, clean), ids_of(model, corrupted)
    z_corr, attn_clean = {}, {}
    with hooked([capture_input(where.out_proj(l), z_corr, l) for l in range(where.n_layer)]):
        hf_metric(hf, corrupted_ids, target, contrast)
    with hooked([capture_output(where.attn(l), attn_clean, l) for l in range(where.n_layer)]):
        hf_metric(hf, clean_ids, target, contrast)
    expected = np.zeros((where.n_layer, where.n_head))
    for layer in range(where.n_layer):
        for head in range(where.n_head):
            cols = slice(head * where.dk, (head + 1) * where.dk)

            swap = take(z_corr[layer], (..., cols))
            handles = [replace_input(where.out_proj(layer), swap)]
            handles += [replace_output(where.attn(later), lambda x, later=later: attn_clean[later])
                        for later in range(layer + 1, where.n_layer)]
            with hooked(handles):
                expected[layer, head] = hf_metric(hf, clean_ids, target, contrast)
    result = path_patching(model, clean, corrupted, target_metric(patch_prompts[family]))
    assert result.receivers == "logits"
    assert np.abs(result.values - expected).max() < TOL


@pytest.mark.parametrize("family,part", [("gpt2", "q"), ("gpt2", "k"), ("llama", "q"),
                                         ("llama", "v")])
def test_path_patching_to_a_receiver_equals_hooks(patch_models, patch_prompts, family, part,
                                                  monkeypatch):
    """Receiver L2.H1 (GPT-2: L1.H1) reading q, k or v: the sender's path recorded at the
    receiver's input with every other head frozen, then patched into a clean run."""
    from transformers.models.llama import modeling_llama

    model, hf, where = patch_models[family]
    where = where(hf)
    clean, corrupted, target, contrast = patch_prompts[family]
    clean_ids, corrupted_ids = ids_of(model, clean), ids_of(model, corrupted)
    receiver = (where.n_layer - 1, 1, part)
    z_corr, attn_clean = {}, {}
    with hooked([capture_input(where.out_proj(l), z_corr, l) for l in range(where.n_layer)]):
        hf_metric(hf, corrupted_ids, target, contrast)
    with hooked([capture_output(where.attn(l), attn_clean, l) for l in range(where.n_layer)]):
        hf_metric(hf, clean_ids, target, contrast)
    r_layer, r_head, _ = receiver
    grouped = family == "llama" and part in ("k", "v")
    original = modeling_llama.repeat_kv
    expected = np.zeros((where.n_layer, where.n_head))
    m_clean = hf_metric(hf, clean_ids, target, contrast)
    for layer in range(where.n_layer):
        for head in range(where.n_head):
            if layer >= r_layer:
                expected[layer, head] = m_clean
                continue
            cols = slice(head * where.dk, (head + 1) * where.dk)

            swap = take(z_corr[layer], (..., cols))
            handles = [replace_input(where.out_proj(layer), swap)]
            handles += [replace_output(where.attn(later), lambda x, later=later: attn_clean[later])
                        for later in range(layer + 1, where.n_layer)]
            got = {}
            if grouped:  # what the receiver reads is its copy of the key/value head
                calls = []

                def recording(x, n_rep, calls=calls):
                    out = original(x, n_rep)
                    calls.append(out.detach().clone())
                    return out
                monkeypatch.setattr(modeling_llama, "repeat_kv", recording)
                with hooked(handles):
                    hf_metric(hf, clean_ids, target, contrast)
                monkeypatch.setattr(modeling_llama, "repeat_kv", original)
                which = 2 * r_layer + (0 if part == "k" else 1)
                seen = {"n": 0}

                def patched(x, n_rep, value=calls[which][:, r_head]):
                    out = original(x, n_rep)
                    if seen["n"] == which:
                        out = out.clone()
                        out[:, r_head] = value
                    seen["n"] += 1
                    return out
                monkeypatch.setattr(modeling_llama, "repeat_kv", patched)
                expected[layer, head] = hf_metric(hf, clean_ids, target, contrast)
                monkeypatch.setattr(modeling_llama, "repeat_kv", original)
                continue
            module = where.qkv_module(part, r_layer)
            with hooked(handles + [capture_output(module, got, "x")]):
                hf_metric(hf, clean_ids, target, contrast)
            r_cols = where.qkv_slice(part, r_head)

            put = take(got["x"], (..., r_cols))
            with hooked([replace_output(module, put)]):
                expected[layer, head] = hf_metric(hf, clean_ids, target, contrast)
    result = path_patching(model, clean, corrupted, target_metric(patch_prompts[family]),
                           receivers=[receiver])
    assert np.abs(result.values - expected).max() < TOL


# --- attribution patching ----------------------------------------------------------------------


@pytest.mark.parametrize("family", ["gpt2", "llama", "neox"])
def test_attribution_patching_equals_first_order_estimate_from_hooks(patch_models, patch_prompts,
                                                                      family):
    model, hf, where = patch_models[family]
    where = where(hf)
    clean, corrupted, target, contrast = patch_prompts[family]
    clean_ids, corrupted_ids = ids_of(model, clean), ids_of(model, corrupted)
    z_clean = {}
    with hooked([capture_input(where.out_proj(l), z_clean, l) for l in range(where.n_layer)]):
        hf_metric(hf, clean_ids, target, contrast)
    kept = {}

    def keep(mod, args, layer):
        args[0].retain_grad()
        kept[layer] = args[0]
    handles = [where.out_proj(l).register_forward_pre_hook(
        lambda mod, args, l=l: keep(mod, args, l)) for l in range(where.n_layer)]
    with hooked(handles):
        logits = hf(torch.tensor([corrupted_ids])).logits[0, -1]
        m_corr = logits[target] - logits[contrast]
        m_corr.backward()
    expected = np.zeros((where.n_layer, where.n_head))
    for layer in range(where.n_layer):
        delta = (z_clean[layer] - kept[layer].detach()) * kept[layer].grad
        per_head = delta[0].view(delta.shape[1], where.n_head, where.dk).sum((0, 2))
        expected[layer] = float(m_corr.detach()) + per_head.double().numpy()
    result = attribution_patching(model, clean, corrupted, target_metric(patch_prompts[family]),
                                  component="head", compare_exact=True)
    assert np.abs(result.values - expected).max() < TOL
    assert result.method == "attribution" and result.exact.method == "exact"
    assert -1 <= result.error["r"] <= 1 and len(result.error["worst"]) == 5


# --- laws that hold exactly --------------------------------------------------------------------


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_patching_laws(patch_models, patch_prompts, family):
    model, _, _ = patch_models[family]
    clean, corrupted, target, contrast = patch_prompts[family]
    metric = target_metric(patch_prompts[family])
    first_diff = next(i for i, (a, b) in enumerate(zip(ids_of(model, clean),
                                                      ids_of(model, corrupted))) if a != b)
    stream = activation_patching(model, clean, corrupted, metric, component="resid_pre")
    # the stream at layer 0 differs only where the tokens do: patching that restores all
    assert abs(stream.normalized[0, first_diff] - 1) < 1e-4
    # a causal model: positions before the first difference change nothing
    assert np.all(stream.values[:, :first_diff] == stream.corrupted)
    heads = activation_patching(model, clean, corrupted, metric, component="head_position")
    assert np.all(heads.normalized[:, :, :first_diff] == 0)
    # noising: the one differing position of the stream entering layer 0 corrupts it all
    noised = activation_patching(model, clean, corrupted, metric, component="resid_pre",
                                 direction="noise")
    assert abs(noised.normalized[0, first_diff]) < 1e-4
    assert np.all(noised.normalized[:, :first_diff] == 1)


def test_every_head_and_mlp_patched_gives_the_clean_metric(patch_models, patch_prompts):
    """Every head's z and every MLP's output from the clean run, in the corrupted run, or the
    whole residual stream entering any one layer: the clean metric (through the engine's
    named points, as patching uses them)."""
    from mha_viz.analysis.patching import metric_of, prepare_pairs
    from mha_viz.engine.interventions import Interventions

    model, _, _ = patch_models["llama"]
    clean, corrupted, _, _ = patch_prompts["llama"]
    prepared = prepare_pairs(model, clean, corrupted, target_metric(patch_prompts["llama"]))
    batch = next(prepared.batches(1))
    with torch.inference_mode():
        source = Interventions(capture=["z", "mlp_out"])
        net = model.network
        m_clean = metric_of(model, run_with_hooks(net, batch.clean, source), batch, "logit_diff")
        patch = Interventions()
        for layer in range(model.info.n_layer):
            patch.replace("z", layer, source.captured[("z", layer)])
            patch.replace("mlp_out", layer, source.captured[("mlp_out", layer)])
        m_patched = metric_of(model, run_with_hooks(net, batch.corrupted, patch), batch,
                              "logit_diff")
        m_corr = metric_of(model, run_with_hooks(net, batch.corrupted), batch, "logit_diff")
        # the residual stream at every position of any one layer: the clean run from there on
        streams = Interventions(capture=["resid_pre"])
        run_with_hooks(net, batch.clean, streams)
        whole_layer = []
        for layer in range(model.info.n_layer):
            one = Interventions().replace("resid_pre", layer,
                                          streams.captured[("resid_pre", layer)])
            whole_layer.append(float(metric_of(model, run_with_hooks(net, batch.corrupted, one),
                                               batch, "logit_diff")))
    # the embeddings differ only at the swapped position, which the last position reads
    # only through the heads patched above
    assert abs(float(m_patched - m_clean)) < 1e-4
    assert abs(float(m_corr - m_clean)) > 1e-2
    assert np.abs(np.array(whole_layer) - float(m_clean)).max() < 1e-4


def test_batches_of_pairs_equal_one_pair_at_a_time(patch_models, patch_prompts):
    model, _, _ = patch_models["gpt2"]
    text = TEXT
    ids = model.encode(text).input_ids
    pairs = [PromptPair(text, swap_token(model, text, pos, ids[1]), ids[4], ids[1])
             for pos in (2, 3, 5)]
    short = model.encode("the dog ran").input_ids
    other = next(i for i in ids if i != short[1])
    pairs.append(PromptPair("the dog ran", swap_token(model, "the dog ran", 1, other),
                            ids[4], ids[1]))  # another length: its own batch
    together = activation_patching(model, pairs, metric="logit_diff")
    assert together.n_pairs == 4 and together.per_pair.shape == (4, 2, 4)
    for index, pair in enumerate(pairs):
        alone = activation_patching(model, [pair], metric="logit_diff")
        assert np.abs(together.per_pair[index] - alone.values).max() < 1e-4
    assert np.allclose(together.values, together.per_pair.mean(0))
    finite = together.per_pair_normalized
    assert np.allclose(together.normalized, finite.mean(0))
    assert np.allclose(together.std, finite.std(0, ddof=1))
    assert np.all(together.ci95_low <= together.normalized)
    assert np.all(together.normalized <= together.ci95_high)


def test_bert_patches_at_a_masked_position(bert_model):
    text = "the cat sat on the mat"
    ids = bert_model.encode(text).input_ids
    corrupted = swap_token(bert_model, text, 2, ids[3])
    result = activation_patching(bert_model, text, corrupted,
                                 TargetMetric(4, ids[4], ids[2], "logit_diff"),
                                 component="resid_pre")
    assert result.values.shape == (2, len(ids))
    assert np.isfinite(result.values).all()
    assert abs(result.normalized[0, 2] - 1) < 1e-4  # the stream's only difference, restored


# --- bad input ---------------------------------------------------------------------------------


def test_bad_pairs_get_clear_messages(patch_models, patch_prompts, minilm):
    model, _, _ = patch_models["gpt2"]
    clean, corrupted, target, contrast = patch_prompts["gpt2"]
    metric = target_metric(patch_prompts["gpt2"])
    with pytest.raises(InputError, match="same number of tokens"):
        activation_patching(model, clean, "the cat", metric)
    with pytest.raises(InputError, match="same tokens"):
        activation_patching(model, clean, clean, metric)
    with pytest.raises(InputError, match="empty"):
        activation_patching(model, [], metric="logit_diff")
    with pytest.raises(InputError, match="more than one run takes"):
        activation_patching(model, [PromptPair(clean, corrupted, target, contrast)] * 10_000,
                            metric="logit_diff")
    with pytest.raises(InputError, match="single token"):
        activation_patching(model, clean, corrupted, TargetMetric(-1, "the cat sat", contrast))
    with pytest.raises(InputError, match="no language-model head"):
        activation_patching(minilm, "a b c", "a b d", TargetMetric(-1, 5, 6))
    with pytest.raises(InputError, match="component must be"):
        activation_patching(model, clean, corrupted, metric, component="heads")
    with pytest.raises(InputError, match="direction"):
        activation_patching(model, clean, corrupted, metric, direction="sideways")
    with pytest.raises(InputError, match="receiver"):
        path_patching(model, clean, corrupted, metric, receivers=[(0, 99, "q")])
    short = model.encode("the dog ran").input_ids
    other = next(i for i in model.encode(clean).input_ids if i != short[1])
    lengths = [PromptPair(clean, corrupted, target, contrast),
               PromptPair("the dog ran", swap_token(model, "the dog ran", 1, other), target,
                          contrast)]
    with pytest.raises(InputError, match="one length"):
        activation_patching(model, lengths, metric="logit_diff", component="resid_pre")


@pytest.mark.slow
def test_leading_space_rule(minilm):
    """A label without the space a new word takes after the text: refused, with the spelling."""
    from mha_viz.analysis.prompts import metric_token

    smol = pytest.importorskip("mha_viz").load_model  # the bundled GPT-2-style BPE model
    try:
        model = smol("smollm2")
    except Exception:  # pragma: no cover - the bundled model is a requirement
        pytest.skip("smollm2 not installed")
    text = "When Mary and John went to the store, John gave a drink to"
    with pytest.raises(InputError, match="use ' Mary'"):
        metric_token(model, "Mary", text)
    assert metric_token(model, " Mary", text) == model.token_id(" Mary")
    # WordPiece writes no leading space: "mary" is the word itself
    assert metric_token(minilm, "mary", "john gave a drink to") == minilm.token_id("mary")


def test_command_line_patch(patch_models, patch_prompts, tmp_path, capsys):
    import json

    from mha_viz.__main__ import main
    from mha_viz.analysis.prompts import pairs_to_jsonl, read_pairs

    model, _, _ = patch_models["gpt2"]
    clean, corrupted, target, contrast = patch_prompts["gpt2"]
    pairs = [PromptPair(clean, corrupted, target, contrast)]
    path = tmp_path / "pairs.jsonl"
    path.write_text(pairs_to_jsonl(pairs))
    assert read_pairs(path.read_bytes(), "pairs.jsonl") == pairs
    out = tmp_path / "patch.npz"
    code = main(["patch", "--model", model.info.name, "--pairs", str(path), "--out", str(out)])
    assert code == 0
    saved = np.load(out)
    expected = activation_patching(model, pairs, metric="logit_diff")
    assert np.allclose(saved["values"], expected.values)
    assert str(saved["component"]) == "head"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"clean": clean, "corrupted": corrupted}) + "\n")
    assert main(["patch", "--model", model.info.name, "--pairs", str(bad), "--out",
                 str(out)]) == 2
    assert "has no target" in capsys.readouterr().err


@pytest.mark.parametrize("family", ["gpt2", "llama", "neox"])
@pytest.mark.parametrize("ungroup", [False, True])
def test_a_run_after_a_kept_prefix_equals_the_whole_run(patch_models, family, ungroup):
    """The engine's prefix reuse (what patching builds on): positions s.. run with the keys
    and values of positions 0..s-1 from a whole run give that run's streams exactly, with
    learned (GPT-2) and rotary (Llama) positions, keys and values shared or per query head."""
    from mha_viz.engine.attention import causal_rows_bias
    from mha_viz.engine.interventions import Interventions

    model, _, _ = patch_models[family]
    net = model.network
    ids = torch.tensor([ids_of(model, TEXT)])
    n, prefix = ids.shape[1], 5
    with torch.inference_mode():
        whole = Interventions(capture=["resid_pre", "rot_k", "v"], ungroup_kv=ungroup)
        final = run_with_hooks(net, ids, whole)
        past = {layer: (whole.captured[("rot_k", layer)][:, :, :prefix],
                        whole.captured[("v", layer)][:, :, :prefix])
                for layer in range(model.info.n_layer)}
        for start in range(model.info.n_layer):
            stream = whole.captured[("resid_pre", start)][:, prefix:]
            after, _ = net.run_layers(stream, start, None, causal_rows_bias(prefix, n),
                                      offset=prefix, past_kv=past)
            # float32 sums of another blocking (the streams reach |x| ~ 30, where 1e-4 is a
            # few ulps summed over layers; seen at 1.0e-4 with another thread count)
            assert torch.allclose(after, final[:, prefix:], rtol=1e-5, atol=1e-4)
