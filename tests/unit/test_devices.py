"""Every analysis on every device this machine has: the same numbers on a GPU (CUDA or MPS)
as on the CPU, and nothing created on PyTorch's default device behind the model's back.

The CUDA and MPS cases are skipped on a machine without one and run wherever there is one.
The last test runs everywhere: it makes "meta" (a device that holds no data) the default
device, so any tensor an analysis creates without saying where fails at once, which is the
bug that would put a tensor on the CPU beside a model on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_viz import TargetMetric, corpus, load_model
from mha_viz.analysis import (ablation_effects, activation_patching, attribution_patching,
                              circuit_test, composition_scores, context_mixing,
                              direct_logit_attribution, gradient_importance, path_patching,
                              pruning_curve, run_with_interventions, score_attribution,
                              train_sae, value_weighted_maps)
from mha_viz.analysis.features import (feature_firing, feature_output_tokens,
                                       feature_score_attribution, feature_sources)
from mha_viz.analysis.long_range import sink_scores, window_costs, window_losses
from mha_viz.analysis.patching import heads_replaced
from mha_viz.analysis.one_head.steps import inside_one_head

MPS = getattr(torch.backends, "mps", None)
DEVICES = [
    pytest.param("cpu"),
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="no CUDA GPU on this machine")),
    pytest.param("mps", marks=pytest.mark.skipif(MPS is None or not MPS.is_available(),
                                                 reason="no Apple GPU on this machine")),
]
TEXT = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from mha_viz.testing import make_gpt2_checkpoint, make_llama_checkpoint

    return {"gpt2": make_gpt2_checkpoint(tmp_path_factory.mktemp("gpt2")),
            "llama": make_llama_checkpoint(tmp_path_factory.mktemp("llama"), n_layer=2,
                                           n_head=4, n_kv_head=2, d_model=64)}


@pytest.fixture(scope="module")
def dictionaries(folders):
    """Per family, a hook_z and a resid_pre dictionary of layer 1, trained on the CPU: the
    pages open a dictionary file on the CPU whatever device the model is on."""
    found = {}
    for family, folder in folders.items():
        model = load_model(folder)
        settings = dict(d_sae=16, k=4, seed=0, seg_len=16, batch_tokens=64, buffer_tokens=256)
        found[family] = {site: train_sae(model, site, 1, [TEXT, CORRUPTED] * 10,
                                         **settings).sae for site in ("hook_z", "resid_pre")}
    return found


def analyses(model, saes=None) -> dict[str, np.ndarray]:
    """Each analysis of the library on one model, as arrays (what the pages read); with
    saes ({site: dictionary}) the features' analyses too."""
    ids = model.encode(TEXT).input_ids
    target, contrast = ids[-4], ids[2]  # any two tokens: random weights
    metric = TargetMetric(len(ids) - 1, target, contrast)
    trace = model.trace(TEXT)
    on_demand = model.trace(TEXT, maps="on_demand")
    _, cache = model.run_with_cache(TEXT)
    head = inside_one_head(model, TEXT, 1, 1)
    mask = np.ones((model.info.n_layer, model.info.n_head), np.float32)
    mask[0, 1] = 0
    found = {
        "maps": trace.attentions,
        "on_demand": on_demand.layer_maps(1),
        "logits": model.logits(TEXT),
        "predict": model.predict(TEXT, k=3).top_probs,
        "score_masked": np.array([model.score(TEXT, head_mask=mask)]),
        "z": cache["z", 1].float().cpu().numpy(),  # the cache keeps the model's device
        "patching": activation_patching(model, TEXT, CORRUPTED, metric).values,
        "path": path_patching(model, TEXT, CORRUPTED, metric).values,
        "attribution_patching": attribution_patching(model, TEXT, CORRUPTED, metric).values,
        "dla": direct_logit_attribution(model, TEXT, len(ids) - 1, target, contrast).heads,
        "ablation": np.asarray(ablation_effects(model, TEXT)),
        "gradient": np.asarray(gradient_importance(model, TEXT)),
        "curve": np.asarray(pruning_curve(model, TEXT, step=0.5).scores),
        "inside_scores": head.scores, "inside_weights": head.weights,
        "mean_ablation": run_with_interventions(
            model, [(TEXT, CORRUPTED)], heads_replaced([(0, 1), (1, 0)], "mean"), metric,
            reference=[CORRUPTED, TEXT]).values,
        "circuit_test": np.array([circuit_test(model, [(TEXT, CORRUPTED)], [(1, 1)], metric,
                                               ablation="resample").faithfulness]),
    }
    # what issues 48 and 49 added: the score split by source and composition (float64 sums,
    # refused on MPS by name), what heads move, and the cached generation's greedy ids
    if model.network.device.type != "mps":
        on_text = composition_scores(model, TEXT, 1, 1)
        in_weights = composition_scores(model, layer=1, head=1)
        found |= {
            "score_terms": score_attribution(model, TEXT, 1, 1, len(ids) - 1).terms,
            "composition_text": np.stack([on_text.q, on_text.k, on_text.v]),
            "composition_weights": np.stack([in_weights.q, in_weights.k, in_weights.v]),
        }
    mixing = context_mixing(model, TEXT)
    found |= {
        "value_weighted": value_weighted_maps(model, TEXT),
        "value_trace": model.trace(TEXT, weights="value").attentions,
        "context_mixing": np.stack([mixing.attention, mixing.residual]),
        "generate": np.array(model.generate(TEXT, max_new_tokens=6, trace=False).new_ids),
    }
    # what issues 58-60 added: heads at long range (the sink + window costs run the later
    # rows again after a past of keys and values), corpus statistics (entropies from the
    # engine's scores) and a head in a dictionary's features
    sinks = sink_scores(model, TEXT)
    losses = window_losses(model, TEXT, sink=1, window=4)
    segments = corpus.segment(model, [TEXT * 3, CORRUPTED * 2], seg_len=16)
    stats = corpus.run(model, segments)
    found |= {
        "sinks": np.stack([sinks.natural.first_attention, sinks.repeated.first_attention,
                           sinks.natural.first_key_norm, sinks.natural.first_cosine]),
        "window_costs": window_costs(model, TEXT, sink=1, window=4, batch_size=3).costs,
        "window_losses": np.array([losses.full, losses.sink_window, losses.window_only]),
        "corpus": np.concatenate([stats.mean(name).ravel() for name in stats.names]),
    }
    if saes is not None:
        query = len(ids) - 1
        firing = feature_firing(model, saes["hook_z"], TEXT)
        feature = firing.strongest_features(1)[0][0]
        sources = feature_sources(model, saes["hook_z"], TEXT, query, feature)
        outputs = feature_output_tokens(model, saes["hook_z"], feature, k=3)
        found |= {
            "feature_firing": firing.acts,
            "feature_sources": np.append(sources.terms.ravel(), sources.pre_activation),
            "feature_outputs": np.array([logit for _, logit in outputs.top + outputs.bottom]),
        }
        if model.network.device.type != "mps":
            found["feature_score_terms"] = feature_score_attribution(
                model, TEXT, 1, 1, query, sae=saes["resid_pre"]).terms
    return {name: np.asarray(value, dtype=np.float64) for name, value in found.items()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_every_analysis_gives_the_cpu_numbers_on_each_device(folders, dictionaries, family,
                                                            device):
    on_cpu = analyses(load_model(folders[family]), dictionaries[family])
    model = load_model(folders[family], device=device)
    assert model.info.device.startswith(device)
    assert {p.device.type for p in model.network.parameters()} == {device}
    on_device = analyses(model, dictionaries[family])
    for name, expected in on_cpu.items():
        # float32 on both: kernels differ in order of summation only
        np.testing.assert_allclose(on_device[name], expected, rtol=1e-4, atol=1e-4,
                                   err_msg=name)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_no_analysis_creates_a_tensor_on_the_default_device(folders, dictionaries, family):
    model = load_model(folders[family])
    expected = analyses(model, dictionaries[family])
    torch.set_default_device("meta")
    try:
        found = analyses(model, dictionaries[family])
    finally:
        torch.set_default_device(None)
    for name, values in expected.items():
        np.testing.assert_allclose(found[name], values, rtol=1e-6, atol=1e-6, err_msg=name)


def test_a_device_this_machine_lacks_is_refused_by_name(folders):
    from mha_viz import InputError
    from mha_viz.engine.placement import available_devices

    for device in ("cuda", "cuda:7", "mps"):
        if device.split(":")[0] in {d.split(":")[0] for d in available_devices()}:
            continue
        with pytest.raises(InputError, match="this machine has no"):
            load_model(folders["gpt2"], device=device)
    for bad in ("tpu", "gpu please", ""):
        if bad:
            with pytest.raises(InputError, match="device"):
                load_model(folders["gpt2"], device=bad)
    with pytest.raises(InputError, match="dtype"):
        load_model(folders["gpt2"], dtype="int8")


def test_the_command_line_takes_a_dtype_and_a_device(folders, capsys):
    from mha_viz.__main__ import main

    text = "The command line runs in bfloat16 too."
    assert main(["trace", "--model", str(folders["llama"]), "--dtype", "bfloat16",
                 "--text", text]) == 0
    printed = capsys.readouterr().out
    exact = load_model(folders["llama"]).trace(text)
    assert exact.display_tokens[0] in printed  # the same text ran
    assert main(["trace", "--model", str(folders["llama"]), "--device", "tpu",
                 "--text", text]) == 2
    assert "device" in capsys.readouterr().err
