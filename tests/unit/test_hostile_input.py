"""Input made to hurt the server (issue 14): absurd checkpoint configs, uploaded traces that
are not attention maps or claim huge arrays, paths that break the file system's calls, huge
texts, and characters that reorder labels. Each case fails fast with our own error.

The cases that would allocate without the checks run in a subprocess with a memory limit
(RLIMIT_AS), so a regression fails the test instead of exhausting the machine.
"""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from mha_viz import AttentionTrace, load_model
from mha_viz.core.errors import CheckpointNotFoundError, CorruptCheckpointError, TraceFileError
from mha_viz.core.text import visible

ROOT = Path(__file__).resolve().parents[2]
MEMORY_LIMIT = 3 << 30  # address space: torch and a model need ~1.1 GB of it


def run_bounded(code: str, seconds: float = 120) -> subprocess.CompletedProcess:
    """Python code in a subprocess with at most MEMORY_LIMIT of address space."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=seconds, preexec_fn=limit,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def trace_file(**arrays) -> bytes:
    """A trace .npz like AttentionTrace.save writes, with some of its arrays replaced."""
    n = 3
    maps = np.full((2, 2, n, n), 1.0 / n, dtype=np.float32)
    content = dict(attentions=maps, token_ids=np.arange(n), tokens=np.array(["a", "b", "c"]),
                   display_tokens=np.array(["a", "b", "c"]),
                   special_mask=np.zeros(n, dtype=bool), segment_ids=np.zeros(n, dtype=int),
                   metadata=np.asarray(json.dumps({
                       "format": "mha_viz.trace", "version": 1, "causal": False,
                       "truncated": False, "n_tokens_before_truncation": n})))
    content.update(arrays)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **content)
    return buffer.getvalue()


def test_a_well_formed_trace_file_loads():
    assert AttentionTrace.load(trace_file()).attentions.shape == (2, 2, 3, 3)


@pytest.mark.parametrize("arrays, message", [
    (dict(attentions=np.full((2, 2, 3, 3), np.nan, dtype=np.float32)), "NaN"),
    (dict(attentions=np.full((2, 2, 3, 3), np.inf, dtype=np.float32)), "NaN or infinite"),
    (dict(attentions=np.tile(np.array([-1.0, 1.0, 1.0], np.float32), (2, 2, 3, 1))),
     "negative"),
    (dict(attentions=np.full((2, 2, 3, 3), 7.0, dtype=np.float32)), "not 1"),
    (dict(attentions=np.zeros((0, 2, 3, 3), np.float32)), "empty"),
    (dict(attentions=np.zeros((2, 0, 3, 3), np.float32)), "empty"),
    (dict(attentions=np.zeros((2, 2, 0, 0), np.float32), token_ids=np.arange(0),
          tokens=np.array([], dtype=str), display_tokens=np.array([], dtype=str),
          special_mask=np.zeros(0, bool), segment_ids=np.zeros(0, int)), "empty"),
    (dict(attentions=np.full((64, 64, 4, 4), 0.25, np.float32), token_ids=np.arange(4),
          tokens=np.array(list("abcd")), display_tokens=np.array(list("abcd")),
          special_mask=np.zeros(4, bool), segment_ids=np.zeros(4, int)), "4,096 heads"),
    (dict(attentions=np.full((2, 2, 3, 3), 1 / 3, np.float64)[..., None]), "shape"),
    (dict(attentions=np.array([["x"]])), "floating point"),
    (dict(token_ids=np.arange(6).reshape(2, 3)), "token_ids must be a flat list"),
    (dict(tokens=np.arange(3)), "tokens must be a flat list of strings"),
    (dict(token_ids=np.arange(4)), "attentions must have shape"),
])
def test_uploaded_maps_that_are_not_attention_are_refused(arrays, message):
    with pytest.raises(TraceFileError, match=message):
        AttentionTrace.load(trace_file(**arrays))


def npy_claiming(shape) -> bytes:
    """An .npy member whose header claims `shape` float32 values and holds a few bytes."""
    header = {"descr": "<f4", "fortran_order": False, "shape": tuple(shape)}
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + b"\0" * 64


def test_an_array_header_claiming_149_gib_is_refused_without_allocating(tmp_path):
    path = tmp_path / "huge.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("attentions.npy", npy_claiming((1, 1, 100_000, 400_000)))
        archive.writestr("metadata.npy", npy_claiming((1,)))
    started = time.monotonic()
    result = run_bounded(f"""
        from mha_viz import AttentionTrace
        from mha_viz.core.errors import TraceFileError
        try:
            AttentionTrace.load({str(path)!r})
        except TraceFileError as error:
            print("refused:", error)
        """)
    assert result.returncode == 0 and "refused:" in result.stdout, result.stderr[-2000:]
    assert "over the limit" in result.stdout
    assert time.monotonic() - started < 60


def load_with_config(tmp_path, gpt2_folder, **changes) -> str:
    """Load a copy of the GPT-2 checkpoint whose config.json has ``changes``, in a bounded
    subprocess, within 60 s; -> what it printed (the refusal)."""
    folder = tmp_path / "changed"
    folder.mkdir()
    for item in gpt2_folder.iterdir():
        (folder / item.name).write_bytes(item.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    started = time.monotonic()
    result = run_bounded(f"""
        from mha_viz import load_model
        from mha_viz.core.errors import CorruptCheckpointError
        try:
            load_model({str(folder)!r})
        except CorruptCheckpointError as error:
            print("refused:", error)
        """)
    assert result.returncode == 0 and "refused:" in result.stdout, result.stderr[-2000:]
    assert time.monotonic() - started < 60
    return result.stdout


def test_a_config_with_a_billion_layers_fails_at_once(tmp_path, gpt2_folder):
    printed = load_with_config(tmp_path, gpt2_folder, n_layer=1_000_000_000)
    assert "n_layer is 1,000,000,000" in printed


def test_a_config_larger_than_its_weights_fails_before_allocating(tmp_path, gpt2_folder):
    """A config within every limit but far larger than the tensors the file holds."""
    load_with_config(tmp_path, gpt2_folder, n_layer=400, n_embd=16384, n_head=128)


def test_a_malformed_config_does_not_quote_the_parser(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2", "n_layer": ')
    with pytest.raises(CorruptCheckpointError) as caught:
        load_model(tmp_path)
    message = str(caught.value)
    assert "not valid JSON" in message
    assert "line 1" not in message and "Expecting" not in message and str(tmp_path) not in message


@pytest.mark.parametrize("make_path", [
    lambda tmp: str(tmp / ("a" * 300)),
    lambda tmp: "x" * 5000,
    lambda tmp: str(tmp / "loop"),
    lambda tmp: str(tmp / "loop" / "inside"),
])
def test_paths_that_break_file_system_calls_give_our_error(tmp_path, make_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop")
    with pytest.raises(CheckpointNotFoundError):
        load_model(make_path(tmp_path))


def test_a_huge_text_reports_the_length_that_was_sent(bert_model):
    text = "word " * 2_000_000  # 10 MB
    trace = bert_model.trace(text)
    assert trace.truncated and trace.extra["n_chars_given"] == len(text)
    assert len(trace.text) == 200_000  # the trace keeps what was read, not the 10 MB


@pytest.mark.parametrize("raw, shown", [
    ("\u202egnp.exe", "\\u202egnp.exe"), ("a\x00b", "a\\x00b"), ("bell\x07", "bell\\x07"),
    ("\u2067x\u2069", "\\u2067x\\u2069"), ("plain ␣text", "plain ␣text"),
    ("emoji 👨\u200d👩\u200d👧", "emoji 👨\u200d👩\u200d👧"), ("שלום", "שלום")])
def test_control_and_direction_characters_are_shown_as_escapes(raw, shown):
    assert visible(raw) == shown


def test_uploaded_token_labels_show_direction_overrides():
    loaded = AttentionTrace.load(trace_file(display_tokens=np.array(["a", "\u202egnp.exe", "c"]),
                                            tokens=np.array(["a", "\u202eb", "c"])))
    assert loaded.display_tokens[1] == "\\u202egnp.exe" and loaded.tokens[1] == "\\u202eb"


@pytest.mark.slow
def test_similarity_work_is_bounded_for_many_heads():
    """A saved trace may hold up to 2,048 heads: the pairwise comparison gets fewer rows and
    the 2-D map fewer iterations, so both end in seconds."""
    from mha_viz.analysis import head_distances, mds_2d, rows_within_work

    assert rows_within_work(270, 512, 128) == 128  # SmolLM2 at 512 tokens: unchanged
    assert rows_within_work(144, 512, None) is None  # GPT-2 small, 512 tokens, every row
    assert rows_within_work(144, 1024, None) < 1024  # 1,024 tokens: fewer rows
    bounded = rows_within_work(2048, 64, None)
    assert bounded is not None and 2048 ** 2 * bounded * 64 <= 6e9
    rng = np.random.default_rng(0)
    maps = rng.random((32, 64, 8, 8)).astype(np.float32)
    maps /= maps.sum(-1, keepdims=True)
    started = time.monotonic()
    distances = head_distances(maps, max_rows=rows_within_work(2048, 8, None))
    coords = mds_2d(distances)
    assert coords.shape == (2048, 2) and np.isfinite(coords).all()
    assert time.monotonic() - started < 60
