"""Corpus statistics (issue 11): every aggregate equals a plain loop over the segments one at
a time, batched or not, in one process or two, however the corpus is split into shards;
bad corpora get clear messages; the .npz and the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.support.hf_reference import gpt2_head_importance, gpt2_loss_with_gates

from mha_viz import corpus, load_model
from mha_viz.core.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
TEXTS = [
    "The cat sat on the mat. It was warm, and the dog slept by the door all day long.",
    "When Mary and John went to the store, John gave a drink to Mary; she thanked him.",
    "Attention heads read from other tokens: some look back one step, others at the start.",
    "Short one.",
    "A longer text about the weather: rain in the morning, sun at noon, wind in the evening, "
    "and a clear, cold night with stars over the quiet harbour where the boats rest.",
]


@pytest.fixture(scope="module")
def llama_model(tmp_path_factory):
    from mha_viz.testing import make_llama_checkpoint

    return load_model(make_llama_checkpoint(tmp_path_factory.mktemp("llama"), n_layer=2,
                                            n_head=4, n_kv_head=2, d_model=64))


def loop_reference(model, segments, stats=corpus.STATS, **trace_options):
    """Each segment traced alone (model.trace_ids), its statistics by the analysis
    functions, then plain numpy means and standard deviations over segments."""
    values = [corpus.segment_statistics(model.trace_ids(ids, **trace_options), stats)
              for ids in segments.ids]
    return {name: (np.nanmean([v[name] for v in values], axis=0),
                   np.nanstd([v[name] for v in values], axis=0)) for name in values[0]}


def assert_matches(result, reference):
    assert set(result.names) == set(reference)
    for name, (mean, std) in reference.items():
        np.testing.assert_allclose(result.mean(name), mean, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(result.std(name), std, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("family", ["gpt2", "bert", "llama"])
def test_batched_and_unbatched_runs_equal_a_loop_over_segments(family, gpt2_model, bert_model,
                                                               llama_model):
    model = {"gpt2": gpt2_model, "bert": bert_model, "llama": llama_model}[family]
    segments = corpus.segment(model, TEXTS, seg_len=12, min_len=4)
    assert len({len(s) for s in segments.ids}) > 1  # some padding in the batches
    reference = loop_reference(model, segments)
    assert_matches(corpus.run(model, segments, batch_size=1), reference)
    assert_matches(corpus.run(model, segments, batch_size=5), reference)
    # a batch's segments are measured on as many threads as torch's: one, or three (the
    # batch's rows shared unevenly), the same numbers
    threads = torch.get_num_threads()
    try:
        for count in (1, 3):
            torch.set_num_threads(count)
            assert_matches(corpus.run(model, segments, batch_size=5), reference)
    finally:
        torch.set_num_threads(threads)
    # the statistics themselves: the aggregates are not all zero
    assert np.nanmax(reference["entropy"][1]) > 0 and np.nanmax(reference["js_divergence"][0]) > 0


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_a_run_reads_the_value_weighted_maps_with_one_argument(family, bert_model, llama_model):
    """weights="value": every statistic of maps over the corpus equals the loop over
    segments traced alone with weights="value" (value-weighted traces, checked against
    transformers in test_value_weighted.py), in padded batches too; and differs from the
    weights' statistics."""
    model = {"bert": bert_model, "llama": llama_model}[family]
    segments = corpus.segment(model, TEXTS, seg_len=12, min_len=4)
    reference = loop_reference(model, segments, weights="value")
    for batch_size in (1, 5):
        result = corpus.run(model, segments, batch_size=batch_size, weights="value")
        assert_matches(result, reference)
        assert result.info["weights"] == "value"
    weights = corpus.run(model, segments, batch_size=5)
    assert np.nanmax(np.abs(weights.mean("entropy") - reference["entropy"][0])) > 0.01
    with pytest.raises(InputError, match="weights must be"):
        corpus.run(model, segments, weights="values")


def test_shards_merge_to_the_same_answer_however_split(bert_model):
    segments = corpus.segment(bert_model, TEXTS, seg_len=10, min_len=4)
    whole = corpus.run(bert_model, segments)
    ids = segments.ids
    halves = corpus.run_shard(bert_model, ids[:3]).merge(corpus.run_shard(bert_model, ids[3:]))
    singles = [corpus.run_shard(bert_model, [s]) for s in ids]
    tree = singles[0]
    for part in singles[1:]:
        tree = part.merge(tree)  # another order and grouping
    for other in (halves, tree):
        assert other.n_segments == whole.n_segments == len(ids)
        for name in whole.names:
            # different batches round differently in float32: equal to 1e-5, not bit for bit
            np.testing.assert_allclose(other.mean(name), whole.mean(name), atol=1e-5)
            np.testing.assert_allclose(other.std(name), whole.std(name), atol=1e-5)


def test_a_real_model_on_the_demo_corpus(minilm):
    segments = corpus.segment(minilm, corpus.demo_texts(limit=6), seg_len=32,
                              max_segments=6)
    assert all(s[0] == minilm.tokenizer.cls_token_id and s[-1] == minilm.tokenizer.sep_token_id
               for s in segments.ids)
    result = corpus.run(minilm, segments, batch_size=4)
    assert_matches(result, loop_reference(minilm, segments))
    entropy = result.mean("entropy")  # nats: between one key and uniform over 32
    assert (entropy > 0).all() and (entropy < np.log(32)).all()


def test_progress_and_cancellation(bert_model):
    segments = corpus.segment(bert_model, TEXTS, seg_len=10, min_len=4)
    seen = []
    corpus.run(bert_model, segments, batch_size=2, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (len(segments.ids), len(segments.ids)) and len(seen) > 1

    class Stop(Exception):
        pass

    def cancel(done, total):
        raise Stop

    with pytest.raises(Stop):
        corpus.run(bert_model, segments, batch_size=2, progress=cancel)


def test_segments_are_cut_and_counted(bert_model):
    segments = corpus.segment(bert_model, ["word " * 50, "tiny"], seg_len=16, min_len=8)
    assert all(len(s) <= 16 for s in segments.ids)
    assert segments.n_texts == 1 and segments.n_dropped >= 1  # "tiny" is too short
    assert segments.n_tokens == sum(len(s) for s in segments.ids)
    with pytest.raises(InputError, match="shorter than"):
        corpus.segment(bert_model, ["a", "b c"], seg_len=16, min_len=8)
    with pytest.raises(InputError, match="context"):
        corpus.segment(bert_model, TEXTS, seg_len=100_000)


@pytest.mark.parametrize("data, name, column, message", [
    (b"", "empty.txt", None, "is empty"),
    (b"\x89PNG\r\n\x1a\n\0\0\0IHDR", "image.txt", None, "binary"),
    (b"\xff\xfe\xfa bad", "latin.txt", None, "not UTF-8"),
    (b"title,body\nA,hello there\n", "notes.csv", "text", "no column 'text'"),
    (b"\n\n  \n", "blank.txt", None, "holds no text"),
    (b'{"text": 1}\nnot json\n', "bad.jsonl", None, "holds no text"),
    (b'{"body": "x"}\n', "other.jsonl", "text", "no field 'text'"),
])
def test_bad_corpora_get_clear_messages(data, name, column, message):
    with pytest.raises(InputError, match=message):
        corpus.read_corpus(data, name, column)


def test_reading_each_kind_of_file():
    assert corpus.read_corpus(b"one\ntwo\n\n", "a.txt").texts == ["one", "two"]
    assert corpus.read_corpus(b"first para\nstill\n\nsecond", "b.txt").texts == [
        "first para\nstill", "second"]
    csv_text = corpus.read_corpus(b"id,text\n1,hello\n2,\n3,world\n", "c.csv", "text")
    assert csv_text.texts == ["hello", "world"] and csv_text.skipped == 1
    assert csv_text.columns == ["id", "text"]
    lines = b'{"text": "a b c"}\nnot json\n{"text": "d e"}\n[1, 2]\n'
    jsonl = corpus.read_corpus(lines, "d.jsonl")
    assert jsonl.texts == ["a b c", "d e"] and jsonl.skipped == 2


def test_results_round_trip_without_pickle(tmp_path, bert_model):
    segments = corpus.segment(bert_model, TEXTS, seg_len=10, min_len=4)
    result = corpus.run(bert_model, segments)
    result.save(tmp_path / "r.npz")
    with np.load(tmp_path / "r.npz", allow_pickle=False) as data:
        assert {"entropy_mean", "entropy_std", "n_segments", "js_divergence_mean",
                "mass_first_token_mean", "role_previous_token_std"} <= set(data.files)
        assert data["entropy_mean"].shape == (2, 4) and int(data["n_segments"]) == len(
            segments.ids)
    loaded = corpus.CorpusResult.load(tmp_path / "r.npz")
    for name in result.names:
        np.testing.assert_allclose(loaded.mean(name), result.mean(name))
        np.testing.assert_allclose(loaded.std(name), result.std(name))
    assert result.table_csv("entropy").decode().startswith("layer,head,mean,std,segments\n0,0,")


def test_command_line(tmp_path, gpt2_folder):
    source = tmp_path / "texts.jsonl"
    source.write_text("\n".join(json.dumps({"text": t}) for t in TEXTS) + "\nbroken\n")
    out = tmp_path / "results.npz"
    done = subprocess.run(
        [sys.executable, "-m", "mha_viz", "corpus", "--model", str(gpt2_folder), "--input",
         str(source), "--seg-len", "12", "--stats", "entropy,mass", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "1 row(s) that were not text skipped" in done.stdout and "segments" in done.stderr
    with np.load(out, allow_pickle=False) as data:
        assert data["entropy_mean"].shape == (2, 4) and int(data["n_segments"]) > 0
        entropy = data["entropy_mean"]
    # the same statistics as one long Parquet table: layer, head, statistic, mean, std, n
    pq = pytest.importorskip("pyarrow.parquet")
    rows = pq.read_table(tmp_path / "results.parquet").to_pylist()
    assert set(rows[0]) == {"layer", "head", "statistic", "mean", "std", "n"}
    shown = {(r["layer"], r["head"]): r["mean"] for r in rows if r["statistic"] == "entropy"}
    np.testing.assert_allclose([[shown[(l, h)] for h in range(4)] for l in range(2)], entropy)

    # a Parquet input, sampled, with a checkpoint: the second run reads every shard back
    pa = pytest.importorskip("pyarrow")
    pq.write_table(pa.table({"id": list(range(len(TEXTS))), "body": TEXTS}),
                   tmp_path / "texts.parquet")
    command = [sys.executable, "-m", "mha_viz", "corpus", "--model", str(gpt2_folder),
               "--input", str(tmp_path / "texts.parquet"), "--column", "body", "--sample",
               "5", "--seed", "1", "--seg-len", "12", "--stats", "entropy,similarity",
               "--checkpoint", str(tmp_path / "kept"), "--out", str(tmp_path / "s.npz")]
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "texts 5/5" in first.stderr and (tmp_path / "s_pairs.parquet").is_file()
    second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "read back from the checkpoint" in second.stdout, second.stdout
    with np.load(tmp_path / "s.npz") as data:
        pairs = pq.read_table(tmp_path / "s_pairs.parquet").to_pylist()
        assert len(pairs) == 8 * 8 and data["js_divergence_mean"].shape == (8, 8)
        assert pairs[9]["mean"] == pytest.approx(float(data["js_divergence_mean"][1, 1]))
        assert (pairs[9]["layer"], pairs[9]["head"], pairs[9]["other_layer"],
                pairs[9]["other_head"]) == (0, 1, 0, 1)
    wrong = subprocess.run(command[:-6] + ["--column", "id"] + command[-4:], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert wrong.returncode == 2
    assert "error: the column 'id' of 'texts.parquet' holds int64, not text" in wrong.stderr
    bad = subprocess.run([sys.executable, "-m", "mha_viz", "corpus", "--model", "minilm",
                          "--input", str(tmp_path / "missing.txt"), "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.startswith("error:")


def test_head_importance_over_the_corpus(gpt2_folder, gpt2_model):
    """Ablation effects and gradient importance per segment, averaged, and Michel et al.'s
    pruning curve over the segments (the least important remaining head removed at each
    step, importance the mean |d loss / d gate| at the current mask, the mean loss
    recorded), against transformers' GPT-2 with a gate on each head (hf_reference)."""
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(gpt2_folder, attn_implementation="eager").eval()
    segments = corpus.segment(gpt2_model, TEXTS, seg_len=12, min_len=4)
    result = corpus.run(gpt2_model, segments, stats=("ablation", "gradient", "pruning"),
                        batch_size=3)
    each = [gpt2_head_importance(hf, ids) for ids in segments.ids]
    np.testing.assert_allclose(result.mean("ablation_effect"),
                               np.mean([a for a, _ in each], axis=0), atol=1e-5)
    np.testing.assert_allclose(result.mean("gradient_importance"),
                               np.mean([g for _, g in each], axis=0), atol=1e-5)
    assert result.std("ablation_effect").max() > 0  # segments differ

    sample = segments.ids[:corpus.PRUNING_SEGMENTS]
    mask = torch.ones(hf.config.n_layer, hf.config.n_head)

    def mean_loss():
        with torch.no_grad():
            return np.mean([float(gpt2_loss_with_gates(hf, ids, mask)) for ids in sample])
    scores = [mean_loss()]
    while mask.sum() > 0:
        importance = np.mean([gpt2_head_importance(hf, ids, mask)[1] for ids in sample],
                             axis=0)
        remaining = [tuple(lh) for lh in mask.nonzero().tolist()]
        least = min(remaining, key=lambda lh: importance[lh])
        mask[least] = 0.0
        scores.append(mean_loss())
    n_heads = mask.numel()
    np.testing.assert_allclose(result.curves["pruning_curve_fraction"],
                               np.arange(n_heads + 1) / n_heads, atol=1e-9)
    np.testing.assert_allclose(result.curves["pruning_curve_score"], scores, atol=1e-4)
    # a segment scored from its ids is the same as its text scored
    text = "The cat sat on the mat."
    enc = gpt2_model.encode(text)
    assert abs(gpt2_model.score(gpt2_model.encoding_of_ids(enc.input_ids))
               - gpt2_model.score(text)) < 1e-6


def test_an_encoder_decoders_corpus_is_read_through_its_encoder(tmp_path):
    """On an encoder-decoder the texts are sources: every statistic is of the encoder's
    self-attention (T5: with its relative position bias and the padding of a batch), equal
    to a loop over the segments traced alone; statistics that score the whole model, and an
    encoder that reads images, are refused with a message."""
    from mha_viz.testing import make_seq2seq_checkpoint

    model = load_model(str(make_seq2seq_checkpoint(tmp_path / "t5", family="t5")))
    segments = corpus.segment(model, TEXTS, seg_len=24, min_len=4)
    assert len({len(s) for s in segments.ids}) > 1 and segments.ids[0][-1] == 1  # </s>
    encoder = model.stack("encoder")
    reference = loop_reference(encoder, segments)
    result = corpus.run(model, segments, batch_size=3)
    assert_matches(result, reference)
    assert result.mean("entropy").shape == (encoder.info.n_layer, encoder.info.n_head)
    with pytest.raises(InputError, match="encoder-decoder's corpus is read through its encoder"):
        corpus.run(model, segments, stats=["ablation"])
    with pytest.raises(InputError, match="reads an image of digits, not text"):
        corpus.segment(load_model("reader-toy"), ["40721"], seg_len=8, min_len=2)


def test_results_saved_under_older_names_still_open(tmp_path):
    # the layout of a file saved before "normalized" settled and before the JS divergence was
    # named as what it is ("js_distance"), written out here by hand
    mean = np.arange(8, dtype=np.float32).reshape(2, 4)
    pairs = np.arange(64, dtype=np.float32).reshape(8, 8)
    np.savez(tmp_path / "old.npz", n_segments=np.asarray(3), n_tokens=np.asarray(30),
             entropy_normalised_count=np.full((2, 4), 3.0), entropy_normalised_mean=mean,
             entropy_normalised_std=np.zeros((2, 4)), js_distance_count=np.full((8, 8), 3.0),
             js_distance_mean=pairs, js_distance_std=np.zeros((8, 8)),
             info=np.asarray(json.dumps({"statistics": ["entropy_normalised", "js_distance"]})))
    loaded = corpus.CorpusResult.load(tmp_path / "old.npz")
    assert loaded.names == ["entropy_normalized", "js_divergence"]
    np.testing.assert_allclose(loaded.mean("entropy_normalized"), mean)
    np.testing.assert_allclose(loaded.mean("js_divergence"), pairs)
