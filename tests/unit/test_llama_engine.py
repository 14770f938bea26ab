"""The Llama family beyond parity: Inside one head with RoPE and shared key/value heads, the
analyses on a grouped-query model, saved traces, and bad GGUF files."""

import numpy as np
import pytest

from mha_viz import (CheckpointNotFoundError, CorruptCheckpointError, LoadError,
                     UnsupportedModelError, load_model)
from mha_viz.maps.trace import AttentionTrace
from mha_viz.ui.words.one_head import head_steps

TEXT = "Mary and John went to the store. John gave a drink to Mary."


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    from mha_viz.testing import make_llama_checkpoint
    return make_llama_checkpoint(tmp_path_factory.mktemp("llama_gqa"), n_layer=2, n_head=6,
                                 n_kv_head=2, d_model=48, rope_theta=100.0)


@pytest.fixture(scope="module")
def llama(llama_folder):
    return load_model(llama_folder)


@pytest.fixture(scope="module")
def llama_gguf(llama_folder, tmp_path_factory):
    from mha_viz.testing import write_llama_gguf
    return write_llama_gguf(llama_folder, tmp_path_factory.mktemp("gguf") / "tiny.gguf", "Q8_0")


def test_info_and_trace_record_which_heads_share_keys_and_values(llama):
    info = llama.info
    assert (info.n_head, info.n_kv_head, info.attention_kind) == (6, 2, "grouped-query")
    assert info.kv_heads == (0, 0, 0, 1, 1, 1)
    assert "rotary" in info.description and "RMSNorm" in info.description
    assert info.attention_params_per_layer == 48 * (2 * 48 + 2 * 16)  # W_K, W_V are narrower
    trace = llama.trace(TEXT)
    assert trace.kv_heads == [0, 0, 0, 1, 1, 1]
    assert trace.heads_sharing_kv(4) == [3, 4, 5]
    assert trace.attentions.shape[:2] == (2, 6)
    # query heads that share K differ in their queries: their maps are their own
    assert not np.allclose(trace.attentions[1, 0], trace.attentions[1, 1], atol=1e-3)
    again = AttentionTrace.load(trace.to_bytes())
    assert again.kv_heads == trace.kv_heads


def test_inside_one_head_shows_rope_as_its_own_step(llama):
    from mha_viz.analysis.one_head.steps import inside_one_head

    trace = llama.trace(TEXT)
    inside = inside_one_head(llama, TEXT, layer=1, head=4)
    assert inside.rotary and inside.rope_theta == 100.0 and inside.kv_head == 1
    assert inside.sharing == [3, 4, 5]
    assert "Q_rot" in [step.key for step in head_steps(inside)]
    assert np.abs(inside.weights - trace.attentions[1, 4]).max() < 1e-6
    # the scores come from the rotated Q and K, not the raw ones
    assert np.allclose(inside.scores, inside.Q_rot @ inside.K_rot.T * inside.scale, atol=1e-5)
    assert not np.allclose(inside.scores, inside.Q @ inside.K.T * inside.scale, atol=1e-3)
    # rotation keeps each vector's length; position 0 does not turn
    assert np.allclose(np.linalg.norm(inside.Q_rot, axis=1), np.linalg.norm(inside.Q, axis=1),
                       atol=1e-5)
    assert np.allclose(inside.Q_rot[0], inside.Q[0], atol=1e-6)
    # heads that share a key/value head see the same K and V
    neighbour = inside_one_head(llama, TEXT, layer=1, head=3)
    assert np.array_equal(neighbour.K, inside.K) and np.array_equal(neighbour.V, inside.V)
    assert not np.allclose(neighbour.Q, inside.Q)
    # every head's contribution adds up to the layer's output (no output bias in Llama)
    total = sum(inside_one_head(llama, TEXT, layer=1, head=h).contribution for h in range(6))
    assert inside.output_bias is None
    assert np.abs(total - inside.layer_output).max() < 1e-4


def test_pruning_analyses_run_on_a_grouped_query_model(llama):
    from mha_viz.analysis.pruning import ablation_effects, gradient_importance

    effects = ablation_effects(llama, TEXT)
    base = llama.score(TEXT)
    mask = np.ones((2, 6), dtype=np.float32)
    mask[1, 2] = 0
    assert abs(effects[1, 2] - (llama.score(TEXT, head_mask=mask) - base)) < 1e-5
    importance = gradient_importance(llama, TEXT)
    assert importance.shape == (2, 6) and np.isfinite(importance).all() and importance.max() > 0
    # the gradient is the derivative of the same score: check one head by finite differences
    step = 1e-3
    mask = np.ones((2, 6), dtype=np.float32)
    mask[0, 5] = 1 - step
    slope = (base - llama.score(TEXT, head_mask=mask)) / step
    assert abs(abs(slope) - importance[0, 5]) < 2e-2 * max(1.0, importance[0, 5])


def test_gguf_loads_with_its_tokenizer(llama, llama_gguf):
    from_gguf = load_model(llama_gguf)
    assert from_gguf.info.source.startswith("GGUF file")
    assert from_gguf.info.kv_heads == llama.info.kv_heads
    assert from_gguf.trace(TEXT).token_ids == llama.trace(TEXT).token_ids


def test_gguf_with_an_architecture_we_do_not_run(tmp_path):
    import gguf

    writer = gguf.GGUFWriter(str(tmp_path / "falcon.gguf"), "falcon")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedModelError, match="falcon"):
        load_model(tmp_path / "falcon.gguf")


@pytest.mark.parametrize("cut", [0.5, 0.97, 0.001])
def test_truncated_gguf_is_a_load_error(tmp_path, llama_gguf, cut):
    data = llama_gguf.read_bytes()
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(CorruptCheckpointError, match="truncated|damaged"):
        load_model(broken)


def test_garbage_with_a_gguf_name_and_a_file_that_is_no_checkpoint(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"GGUF" + b"\xff" * 64)
    with pytest.raises(CorruptCheckpointError):
        load_model(tmp_path / "x.gguf")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CheckpointNotFoundError, match="neither a checkpoint folder nor a .gguf"):
        load_model(tmp_path / "notes.txt")


def test_gguf_with_a_quantisation_we_do_not_dequantize(tmp_path):
    """A copy of a valid file whose one tensor claims a type gguf does not dequantize (Q8_1)."""
    import gguf

    from mha_viz.testing import make_llama_checkpoint, write_llama_gguf

    folder = make_llama_checkpoint(tmp_path / "m", n_layer=1, n_head=4, n_kv_head=2, d_model=64)
    path = write_llama_gguf(folder, tmp_path / "ok.gguf", "F32")
    reader = gguf.GGUFReader(str(path))
    writer = gguf.GGUFWriter(str(tmp_path / "q81.gguf"), "llama")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        value = field.contents()
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_array(field.name, value)
        else:
            writer.add_key_value(field.name, value, field.types[0])
    block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_1]
    for tensor in reader.tensors:
        shape = tuple(int(n) for n in reversed(tensor.shape))
        if tensor.name == "blk.0.ffn_up.weight" and shape[-1] % block == 0:
            raw = np.zeros((shape[0], shape[-1] // block * type_size), dtype=np.uint8)
            writer.add_tensor(tensor.name, raw, raw_shape=raw.shape,
                              raw_dtype=gguf.GGMLQuantizationType.Q8_1)
        else:
            writer.add_tensor(tensor.name, np.array(tensor.data).reshape(shape))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedModelError, match="Q8_1") as info:
        load_model(tmp_path / "q81.gguf")
    assert isinstance(info.value, LoadError)


def test_absurd_config_is_refused_before_anything_is_allocated(tmp_path, llama_folder):
    import json
    import shutil

    folder = tmp_path / "huge"
    shutil.copytree(llama_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    config["num_hidden_layers"] = 1_000_000_000
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CorruptCheckpointError, match="n_layer"):
        load_model(folder)
    config["num_hidden_layers"], config["num_key_value_heads"] = 2, 4  # 6 heads, 4 kv
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CorruptCheckpointError, match="cannot share"):
        load_model(folder)


def test_a_rope_scaling_without_its_settings_is_refused_with_a_message(tmp_path, llama_folder):
    """llama3 scaling is computed (tests/unit/test_llama_parity.py), but not without the
    original context it is defined by: the message names it."""
    import json
    import shutil

    folder = tmp_path / "scaled"
    shutil.copytree(llama_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="llama3.*original context"):
        load_model(folder)


def test_induction_probe_uses_bos_for_causal_models(llama):
    from mha_viz.analysis import induction_scores

    scores = induction_scores(llama, seq_len=8, n_seqs=2)
    assert scores.shape == (2, 6) and np.isfinite(scores).all()
