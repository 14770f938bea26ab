"""Traces save to .npz and load back without pickle; the command line prints a summary."""

import io
import json
import zipfile

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
