"""Traces save to .npz and load back without pickle; the command line prints a summary."""

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from mha_viz import AttentionTrace, TraceFileError
from mha_viz.__main__ import main


def test_roundtrip_file_and_bytes(tmp_path, bert_model):
    trace = bert_model.trace("Where is it?", text_pair="It is here.")
    trace.save(tmp_path / "t.npz")
    for loaded in (AttentionTrace.load(tmp_path / "t.npz"), AttentionTrace.load(trace.to_bytes())):
        assert np.array_equal(loaded.attentions, trace.attentions)
        assert loaded.tokens == trace.tokens and loaded.token_ids == trace.token_ids
        assert loaded.display_tokens == trace.display_tokens
        assert np.array_equal(loaded.segment_ids, trace.segment_ids)
        assert loaded.special_positions == trace.special_positions
        assert loaded.text_pair == "It is here." and loaded.causal is False
    # numpy alone, with pickling refused, can read it
    with np.load(tmp_path / "t.npz", allow_pickle=False) as data:
        assert data["attentions"].shape == trace.attentions.shape


def _without_special_tokens(data: bytes) -> bytes:
    """A trace file as mha_viz wrote it before traces recorded their special tokens."""
    with np.load(io.BytesIO(data), allow_pickle=False) as saved:
        arrays = {name: saved[name] for name in saved.files}
    metadata = json.loads(str(arrays["metadata"]))
    del metadata["special_tokens"]
    arrays["metadata"] = np.asarray(json.dumps(metadata))
    out = io.BytesIO()
    np.savez_compressed(out, **arrays)
    return out.getvalue()


def test_a_trace_keeps_its_tokenizers_special_tokens(bert_model, gpt2_model):
    """A trace records the special tokens its tokenizer names (BERT's cls and sep; GPT-2's
    tokenizer names neither) and its file keeps them; a file saved before they were recorded
    reads BERT's from where its special tokens stand, so its token classes are unchanged."""
    from mha_viz.analysis import token_class_mass

    tokenizer = bert_model.tokenizer
    bert = bert_model.trace("Where is it?", text_pair="It is here.")
    assert bert.special_tokens["cls"] == tokenizer.cls_token == bert.tokens[0]
    assert bert.special_tokens["sep"] == tokenizer.sep_token == bert.tokens[-1]
    gpt2 = gpt2_model.trace("The cat sat.")
    assert gpt2.special_tokens["eos"] == gpt2_model.tokenizer.eos_token
    assert "cls" not in gpt2.special_tokens and "sep" not in gpt2.special_tokens
    for trace in (bert, gpt2):
        assert AttentionTrace.load(trace.to_bytes()).special_tokens == trace.special_tokens
    old = AttentionTrace.load(_without_special_tokens(bert.to_bytes()))
    assert old.special_tokens == {"cls": tokenizer.cls_token, "sep": tokenizer.sep_token}
    for name, value in token_class_mass(bert).items():
        np.testing.assert_array_equal(token_class_mass(old)[name], value, err_msg=name)
    assert AttentionTrace.load(_without_special_tokens(gpt2.to_bytes())).special_tokens == {}


# Trace files written by mha-viz before a trace said what made its maps in typed fields
# (format version 1: one "extra" dict), by the code of commit 2f699d7: a random GPT-2 (2
# layers x 4 heads, make_gpt2_checkpoint(seed=3)) traced with heads 0.2 and 1.0 switched off
# and weights="value", held and on demand; a continuation written by it (4 tokens after a
# 5-token prompt); its trace with positions 0 and 3 hidden (shown_trace); and the bundled
# T5 toy's decoder maps of "12 + 7" -> "19" (EncoderDecoderTrace.as_trace).
OLD_TRACES = Path(__file__).resolve().parents[1] / "data"
OLD_MASK = [[1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0]]


def _metadata(data: bytes) -> dict:
    with np.load(io.BytesIO(data), allow_pickle=False) as saved:
        return json.loads(str(saved["metadata"]))


def test_trace_files_of_the_first_format_open_with_what_made_their_maps():
    from mha_viz.analysis import kept_positions

    def old(name):
        data = (OLD_TRACES / f"trace_v1_{name}.npz").read_bytes()
        assert _metadata(data)["version"] == 1
        return AttentionTrace.load(data), _metadata(data)["extra"]

    held, said = old("value_masked")
    lazy, _ = old("value_masked_on_demand")
    assert said == {"weights": "value", "head_mask": OLD_MASK, "ablation": "zero"}
    for trace in (held, lazy):
        assert trace.weights == "value" and trace.value_weighted and trace.ablation == "zero"
        np.testing.assert_array_equal(trace.head_mask, OLD_MASK)
        assert trace.extra == said and trace.prompt_length is None
    assert lazy.on_demand and not held.on_demand
    # the long form's maps, rebuilt from its queries, keys and value norms with no model,
    # are the maps the old code held for the same text
    np.testing.assert_allclose(lazy.attentions, held.attentions, atol=1e-5)
    written, said = old("written")
    assert said == {"prompt_length": 5} and written.prompt_length == 5
    assert written.weights == "attention" and written.head_mask is None
    shown, said = old("shown")
    assert shown.kept_positions == said["kept_positions"] == [1, 2, *range(4, 15)]
    np.testing.assert_array_equal(kept_positions(shown), said["kept_positions"])
    decoder, said = old("decoder")
    assert decoder.attention_kind == said["attention_kind"] == "decoder"
    # saved again, each keeps its meaning, now in typed keys (and the old dict beside them)
    for trace in (held, lazy, written, shown, decoder):
        again = AttentionTrace.load(trace.to_bytes())
        assert again.meaning() == trace.meaning() == _metadata(trace.to_bytes())["extra"]
        assert _metadata(trace.to_bytes())["version"] == 2


@pytest.mark.parametrize("key, value", [
    ("weights", "banana"), ("head_mask", [[1.0, 2.0]]), ("head_mask", [[1.0, 0.0]]),
    ("prompt_length", -1), ("kept_positions", [0, "a"]), ("kept_positions", [0]),
    ("attention_kind", ["encoder"])])
def test_a_garbled_meaning_is_refused(gpt2_model, key, value):
    """What made the maps, read from anyone's file: a value its name does not hold is refused
    (in a file of either format), never taken."""
    data = gpt2_model.trace("The cat sat.").to_bytes()
    for version in (1, 2):
        with np.load(io.BytesIO(data), allow_pickle=False) as saved:
            arrays = {name: saved[name] for name in saved.files}
        metadata = json.loads(str(arrays["metadata"]))
        metadata["version"] = version
        (metadata["extra"] if version == 1 else metadata)[key] = value
        arrays["metadata"] = np.asarray(json.dumps(metadata))
        out = io.BytesIO()
        np.savez_compressed(out, **arrays)
        with pytest.raises(TraceFileError, match=key):
            AttentionTrace.load(out.getvalue())


def test_truncation_flag_survives(tmp_path, gpt2_model):
    trace = gpt2_model.trace("word " * 500)
    loaded = AttentionTrace.load(trace.to_bytes())
    assert loaded.truncated and loaded.n_tokens_before_truncation > loaded.n_tokens
    assert loaded.causal


def test_refuses_pickles_foreign_files_and_oversized(tmp_path, bert_model):
    evil = tmp_path / "evil.npz"
    np.savez(evil, attentions=np.array([object()], dtype=object))
    with pytest.raises(TraceFileError):
        AttentionTrace.load(evil)
    with pytest.raises(TraceFileError):
        AttentionTrace.load(b"not a zip at all")
    other = io.BytesIO()
    np.savez(other, x=np.zeros(3))
    with pytest.raises(TraceFileError, match="not written by mha_viz"):
        AttentionTrace.load(other.getvalue())
    data = bert_model.trace("hello there").to_bytes()
    with pytest.raises(TraceFileError, match="over the limit"):
        AttentionTrace.load(data, max_bytes=1000)
    # a zip bomb-like header: declared size far over the limit, refused before unpacking
    with zipfile.ZipFile(tmp_path / "big.npz", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("attentions.npy", b"\0" * 5_000_000)
    with pytest.raises(TraceFileError, match="unpacks"):
        AttentionTrace.load(tmp_path / "big.npz", max_bytes=1_000_000)


def test_inconsistent_trace_is_refused():
    with pytest.raises(TraceFileError):
        AttentionTrace(tokens=["a"], token_ids=[1, 2], attentions=np.zeros((1, 1, 2, 2)),
                       display_tokens=["a", "b"], special_mask=[0, 0], segment_ids=[0, 0],
                       causal=False)


def test_cli_trace_prints_summary_and_saves(tmp_path, capsys, gpt2_folder):
    out = tmp_path / "cli.npz"
    code = main(["trace", "--model", str(gpt2_folder), "--text", "The cat sat on the mat.",
                 "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert "L0 " in printed and "L1 " in printed and "mean entropy" in printed
    assert AttentionTrace.load(out).n_layer == 2


def test_cli_reports_errors_without_traceback(tmp_path, capsys):
    code = main(["trace", "--model", str(tmp_path), "--text", "hi"])
    assert code == 2
    assert "no config.json" in capsys.readouterr().err
    code = main(["trace", "--model", "minilm", "--text", "   "])
    assert code == 2 and "empty" in capsys.readouterr().err
