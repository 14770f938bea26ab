"""The families added beside GPT-2, BERT and the Llama family, each against transformers' own
model class on a random checkpoint built from its own config class (eager attention): maps
within 1e-5, logits within 1e-4, on the three parity texts; then what each family adds, seen
where it matters (maps rebuilt on demand, Inside one head)."""

import numpy as np
import pytest
from tests.support.family_configs import FAMILIES
from tests.support.gpt2_bert_parity import TEXTS
from tests.support.llama_parity import assert_parity, reference_model

from mha_viz import load_model
from mha_viz.testing import make_decoder_checkpoint
from mha_viz.ui.words.one_head import head_steps, layout_step, projection_text


@pytest.fixture(scope="session")
def family_factory(tmp_path_factory):
    """factory(case) -> the folder of FAMILIES[case] or ENCODERS[case], built once."""
    from mha_viz.testing import make_encoder_checkpoint

    built = {}

    def factory(case):
        if case not in built:
            make = make_encoder_checkpoint if case in ENCODERS else make_decoder_checkpoint
            config_class, model_class, config = {**FAMILIES, **ENCODERS}[case]
            built[case] = make(tmp_path_factory.mktemp(case), config_class, model_class,
                               **config)
        return built[case]

    return factory


@pytest.mark.parametrize("case", list(FAMILIES))
def test_family_parity(family_factory, case):
    folder = family_factory(case)
    model = load_model(folder)
    ref = reference_model(folder)
    config = ref.config
    assert (model.info.n_layer, model.info.n_head) == (config.num_hidden_layers,
                                                       config.num_attention_heads)
    for text in TEXTS:
        assert_parity(model, ref, text)


@pytest.mark.parametrize("case", list(FAMILIES))
def test_rebuilt_maps_and_one_head_equal_the_forward(family_factory, case):
    from mha_viz.analysis.one_head.steps import inside_one_head

    model = load_model(family_factory(case))
    text = TEXTS[1]
    trace = model.trace(text)
    lazy = model.trace(text, maps="on_demand")
    np.testing.assert_allclose(lazy.attentions, trace.attentions, atol=1e-6)
    inside = inside_one_head(model, text, 1, 1)
    np.testing.assert_allclose(inside.weights, trace.attentions[1, 1], atol=1e-6)


def test_pythia_qkv_is_read_head_by_head(family_factory):
    """query_key_value holds [q_h; k_h; v_h] for each head in turn: this head's W_Q is the
    rows transformers' own module gives it, and Inside one head says where they are."""
    from mha_viz.analysis.one_head.steps import inside_one_head

    folder = family_factory("pythia")
    model = load_model(folder)
    ref = reference_model(folder)
    dk = ref.config.hidden_size // ref.config.num_attention_heads
    fused = ref.gpt_neox.layers[1].attention.query_key_value.weight.detach().numpy()
    inside = inside_one_head(model, TEXTS[0], 1, 2)
    np.testing.assert_allclose(inside.W_Q, fused[2 * 3 * dk:2 * 3 * dk + dk].T, atol=1e-7)
    np.testing.assert_allclose(inside.W_K, fused[2 * 3 * dk + dk:2 * 3 * dk + 2 * dk].T,
                               atol=1e-7)
    text = layout_step(inside).explanation
    assert "head by head" in text and f"rows {2 * 3 * dk}–{2 * 3 * dk + dk - 1}" in text


def test_qwen3_normalizes_each_heads_query_and_key(family_factory):
    """Inside one head shows Q as X W_Q (before the QK-norm) and the normalized Q the rotation
    reads; the normalized rows are RMSNorm(Q) with the checkpoint's q_norm weight."""
    from mha_viz.analysis.one_head.steps import inside_one_head

    folder = family_factory("qwen3")
    model = load_model(folder)
    ref = reference_model(folder)
    inside = inside_one_head(model, TEXTS[0], 1, 3)
    assert inside.einsum_difference < 1e-5  # Q = X W_Q, as the page writes it
    weight = ref.model.layers[1].self_attn.q_norm.weight.detach().numpy()
    q = inside.Q.astype(np.float64)
    expected = q / np.sqrt((q ** 2).mean(-1, keepdims=True) + ref.config.rms_norm_eps) * weight
    np.testing.assert_allclose(inside.Q_normed, expected, atol=1e-5)
    assert "QK-norm" in head_steps(inside)[[s.key for s in head_steps(inside)].index("Q_rot")].explanation


def test_gemma2_caps_windows_and_says_what_is_not_exact(family_factory):
    """The soft-caps bend (a score or logit computed without them would exceed the cap), the
    window masks every other layer, and direct logit attribution, which a soft-cap and the
    norms after each sub-layer make inexact, is refused with the reason."""
    from mha_viz import InputError
    from mha_viz.analysis import direct_logit_attribution
    from mha_viz.analysis.one_head.steps import inside_one_head

    model = load_model(family_factory("gemma2"))
    text = TEXTS[1]
    logits = model.logits(text)
    assert np.abs(logits).max() < 3.0 and np.abs(logits).max() > 2.0  # within the cap, bent
    trace = model.trace(text)
    n = trace.n_tokens
    far = np.tril(np.ones((n, n), dtype=bool), -5)
    assert (trace.attentions[0][:, far] == 0).all() and (trace.attentions[2][:, far] == 0).all()
    assert trace.attentions[1][:, far].max() > 1e-3
    inside = inside_one_head(model, text, 0, 1)
    assert np.abs(inside.scores).max() <= 4.0 and inside.softcap == 4.0 and inside.window == 5
    assert "Soft-capping" in head_steps(inside)[[s.key for s in head_steps(inside)].index(
        "scores")].explanation  # the scores before the cap: tests/unit/test_inside_families
    with pytest.raises(InputError, match="not exact for this model: each sub-layer's output"):
        direct_logit_attribution(model, text, -1, 5, 6)


def test_gemma3_local_and_global_layers(family_factory):
    """The local layers turn with their own RoPE base and mask past the window; the global
    one turns with the other base (scaled) and sees every key; Inside one head says which."""
    from mha_viz.analysis.one_head.steps import inside_one_head

    model = load_model(family_factory("gemma3"))
    config = model.network.config
    assert [config.rope_of(layer)[0] for layer in range(4)] == [100.0, 100.0, 1000.0, 100.0]
    assert config.rope_of(2)[1].kind == "linear" and config.rope_of(0)[1] is None
    text = TEXTS[1]
    trace = model.trace(text)
    n = trace.n_tokens
    far = np.tril(np.ones((n, n), dtype=bool), -5)
    for layer in (0, 1, 3):
        assert (trace.attentions[layer][:, far] == 0).all()
    assert trace.attentions[2][:, far].max() > 1e-3
    assert inside_one_head(model, text, 0, 0).rope_theta == 100.0
    assert inside_one_head(model, text, 2, 0).rope_theta == 1000.0
    assert "theta 1000; theta 100 on the sliding-window layers" in model.info.description


def test_olmo_clips_q_k_and_v(family_factory):
    """The clip bites (X W_Q leaves [-1.5, 1.5] on these weights), Inside one head's Q is the
    clamped product and its text says so."""
    from mha_viz.analysis.one_head.steps import inside_one_head

    model = load_model(family_factory("olmo"))
    inside = inside_one_head(model, TEXTS[1], 1, 0)
    unclipped = inside.X.astype(np.float64) @ inside.W_Q.astype(np.float64)
    assert np.abs(unclipped).max() > 1.6 and np.abs(inside.Q).max() <= 1.5 + 1e-6
    assert inside.einsum_difference < 1e-5
    assert "clamps every entry of Q, K and V to ±1.5" in projection_text(inside)


def test_gptj_pairs_are_read_as_halves(family_factory):
    """GPT-J's rotary rows (adjacent pairs) are reordered into halves within each head; the
    rows past rotary_dim, and W_V, stay where they are; Inside one head says so."""
    from mha_viz.analysis.one_head.steps import inside_one_head

    folder = family_factory("gptj")
    model = load_model(folder)
    ref = reference_model(folder)
    theirs = ref.transformer.h[1].attn.q_proj.weight.detach().numpy().reshape(4, 16, 64)
    ours = model.network.blocks[1].attn.qkv_weights()[0].detach().numpy()  # [H, d_k, d]
    np.testing.assert_array_equal(ours[:, :4], theirs[:, 0:8:2])
    np.testing.assert_array_equal(ours[:, 4:8], theirs[:, 1:8:2])
    np.testing.assert_array_equal(ours[:, 8:], theirs[:, 8:])
    steps = head_steps(inside_one_head(model, TEXTS[0], 1, 2))
    rope = steps[[s.key for s in steps].index("Q_rot")].explanation
    assert "rotates adjacent pairs" in rope and "row 2j + s is row 4 s + j here" in rope


def test_gpt_neo_local_layers_window_and_scores_are_unscaled(family_factory):
    model = load_model(family_factory("gpt_neo"))
    trace = model.trace(TEXTS[1])
    n = trace.n_tokens
    far = np.tril(np.ones((n, n), dtype=bool), -5)
    assert (trace.attentions[0][:, far] == 0).all() and (trace.attentions[2][:, far] == 0).all()
    assert trace.attentions[1][:, far].max() > 1e-3
    assert [block.attn.scale for block in model.network.blocks] == [1.0, 1.0, 1.0]


def test_mixtral_routes_as_transformers_and_reads_fused_experts(family_factory, tmp_path):
    """Each token's experts and their weights are transformers' router's; a checkpoint saved
    with transformers 5's fused expert tensors (mlp.experts.gate_up_proj) gives the same
    logits as the per-expert names Mixtral's releases use."""
    import shutil

    import torch
    from tests.support.hf_reference import capture_input
    from safetensors.torch import save_file

    folder = family_factory("mixtral")
    model = load_model(folder)
    ref = reference_model(folder)
    ids = model.encode(TEXTS[1]).input_ids
    seen = {}
    handle = capture_input(ref.model.layers[1].mlp.gate, seen, "x")
    with torch.no_grad():
        ref(torch.tensor([ids]))
    handle.remove()
    with torch.no_grad():
        _, their_weights, their_experts = ref.model.layers[1].mlp.gate(seen["x"])
        weights, experts = model.network.blocks[1].experts.routing(seen["x"])
    assert (experts == their_experts).all() and len(set(experts[:, 0].tolist())) > 1
    assert "mixture of 4 gated MLP experts (silu), 2 per token" in model.info.description
    np.testing.assert_allclose(weights.numpy(), their_weights.numpy(), atol=1e-6)

    fused = tmp_path / "fused"
    shutil.copytree(folder, fused)
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()},
              str(fused / "model.safetensors"))
    assert "model.layers.0.mlp.experts.gate_up_proj" in ref.state_dict()
    np.testing.assert_allclose(load_model(fused).logits(TEXTS[0]), model.logits(TEXTS[0]),
                               atol=1e-6)


# masked-LM encoders: id -> (config class, model class, config), with BERT's tokenizer
ENCODERS = {
    # RoBERTa: positions from padding_idx + 1 (pad 1: position p reads row p + 2)
    "roberta": ("RobertaConfig", "RobertaForMaskedLM", dict(
        num_hidden_layers=2, num_attention_heads=4, hidden_size=64, intermediate_size=128,
        max_position_embeddings=130, type_vocab_size=1, pad_token_id=1)),
    "distilbert": ("DistilBertConfig", "DistilBertForMaskedLM", dict(
        n_layers=2, n_heads=4, dim=64, hidden_dim=128, max_position_embeddings=128,
        pad_token_id=0)),
}


@pytest.mark.parametrize("case", list(ENCODERS))
def test_masked_lm_family_parity(family_factory, case):
    """Maps within 1e-5 and the last hidden state within 1e-4 (test_engine_parity's check),
    and the masked-LM logits within 1e-4, against transformers' own masked LM."""
    import torch
    from tests.support.gpt2_bert_parity import assert_parity as assert_encoder_parity
    from tests.support.gpt2_bert_parity import reference_model as encoder_reference

    folder = family_factory(case)
    model = load_model(folder)
    assert model.info.score_kind == "mlm_loss" and not model.info.causal
    ref = encoder_reference(folder, "bert", True)
    for text in TEXTS:
        assert_encoder_parity(model, ref, text)
        encoded = model.tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            theirs = ref(input_ids=encoded["input_ids"]).logits[0].numpy()
        assert np.abs(model.logits(text) - theirs).max() < 1e-4


# (family case, config.json change, error, message): what a family does not hold, or a
# config whose sizes contradict each other, is refused naming it, never read as something
REFUSED = [
    ("phi3", {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4, "factor": 2.0}},
     "UnsupportedModelError", "rotary scaling 'longrope' is not supported"),
    ("gemma3", {"rope_parameters": {"full_attention": {"rope_type": "longrope", "factor": 2.0,
                                                       "rope_theta": 1e4},
                                    "sliding_attention": {"rope_type": "default",
                                                          "rope_theta": 1e4}}},
     "UnsupportedModelError", "rotary scaling 'longrope' is not supported"),
    ("gemma3", {"layer_types": ["sliding_attention", "chunked_attention", "full_attention",
                                "sliding_attention"]},
     "UnsupportedModelError", "do not name full or sliding attention for each of the 4"),
    ("gemma3", {"use_bidirectional_attention": True},
     "UnsupportedModelError", "Gemma 3 with bidirectional attention"),
    ("phi", {"qk_layernorm": True}, "UnsupportedModelError", "Phi's qk_layernorm"),
    ("stablelm", {"qk_layernorm": True}, "UnsupportedModelError", "StableLM's qk_layernorm"),
    ("opt", {"word_embed_proj_dim": 32}, "UnsupportedModelError",
     "projected from 32 to 64 dimensions"),
    ("gptj", {"rotary_dim": None}, "UnsupportedModelError", "GPT-J without rotary_dim"),
    ("gpt_neo", {"attention_layers": ["local", "global"]}, "UnsupportedModelError",
     "do not name global or local attention for each of the 3 layers"),
    ("mixtral", {"num_experts_per_tok": 5}, "CorruptCheckpointError",
     "5 experts per token cannot be picked from 4 experts"),
    ("gemma3", {"num_key_value_heads": 3}, "CorruptCheckpointError",
     "4 query heads cannot share 3 key/value heads"),
    ("gptj", {"n_embd": 66}, "CorruptCheckpointError", "d_model 66 is not divisible by 4 heads"),
    ("gemma3", {"sliding_window": -5}, "CorruptCheckpointError", "the sliding window"),
    ("gemma3", {"sliding_window": None}, "UnsupportedModelError",
     "sliding-window layers are listed without a sliding_window size"),
    ("gpt_neo", {"window_size": 0}, "UnsupportedModelError",
     "local attention layers are listed without a positive window_size"),
]


@pytest.mark.parametrize("case, change, error, message", REFUSED,
                         ids=[f"{case}-{next(iter(change))}" for case, change, *_ in REFUSED])
def test_what_a_family_does_not_hold_is_named(family_factory, tmp_path, case, change, error,
                                              message):
    import json
    import shutil

    import mha_viz

    folder = tmp_path / case
    shutil.copytree(family_factory(case), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(getattr(mha_viz, error), match=message):
        load_model(folder)


@pytest.mark.parametrize("case", ["phi", "gptj", "mixtral", "olmo", "opt"])
def test_direct_logit_attribution_sums_to_the_logit_difference(family_factory, case):
    """Heads, MLPs (experts), biases, the embeddings and the LM head's bias add up to the
    logit difference the model gives, where the logits are a sum of terms."""
    from mha_viz.analysis import direct_logit_attribution

    model = load_model(family_factory(case))
    found = direct_logit_attribution(model, TEXTS[0], -1, 5, 6)
    logits = model.logits(TEXTS[0])[-1]
    assert abs(found.total - (logits[5] - logits[6])) < 1e-4
    assert abs(found.heads.sum() + sum(found.rest.values()) - found.total) < 1e-3
    assert ("logits bias" in found.rest) == (case in ("phi", "gptj"))


def _by_its_wiring(block, stack, h, layer: int):
    """Block `layer` on h computed from its wiring alone: each step's own module (a norm,
    the attention with the stack's bias and rotary positions, the MLP) on the values the
    step names, in order; adds left to right."""
    n = h.shape[1]
    values = {"resid_pre": h}
    for step in block.wiring:
        read = [values[name] for name in step.reads]
        if step.kind == "add":
            out = read[0]
            for value in read[1:]:
                out = out + value
        elif step.kind == "attention":
            out = getattr(block, step.module)(read[0], bias=stack.attention_bias(n),
                                              rotary=stack.rotary(n, layer))[0]
        else:  # a norm or the MLP
            out = getattr(block, step.module)(read[0])
        values[step.writes] = out
    return values["resid_post"]


@pytest.mark.parametrize("case", [*FAMILIES, *ENCODERS])
def test_every_block_does_what_its_wiring_says(family_factory, case):
    """Each block's output computed from its wiring alone (engine.wiring: the steps in
    order, on the values they name) is the engine's forward of the block; and the split of
    the last layer's input by source (score attribution's, which reads that description and
    checks each layer's sum against the engine's as it goes) adds up to it."""
    import torch

    from mha_viz.analysis.why.stream import stream_parts

    model = load_model(family_factory(case))
    net = model.network
    enc = model.encode(TEXTS[1])
    ids, types = torch.tensor([enc.input_ids]), torch.tensor([enc.token_type_ids])
    inputs = []
    with torch.inference_mode():
        h = net.embed(ids, types if net.config.type_vocab_size else None)
        out, _ = net.run_layers(h, 0, None, net.attention_bias(ids.shape[1]),
                                layer_inputs=inputs)
        for layer, block in enumerate(net.blocks):
            after = (inputs[1:] + [out])[layer]
            found = _by_its_wiring(block, net, inputs[layer], layer)
            np.testing.assert_allclose(found, after, rtol=0, atol=1e-6 * float(
                after.abs().max()), err_msg=f"layer {layer}")
    split = stream_parts(model, enc.input_ids, enc.token_type_ids, net.config.n_layer - 1)
    np.testing.assert_allclose(split.parts.sum(0), split.x, rtol=0,
                               atol=1e-5 * float(split.x.abs().max()))
