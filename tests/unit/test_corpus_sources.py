"""Corpus inputs streamed from files (issue 23): Parquet and Arrow files, folders of shards, a
Hugging Face dataset saved to disk by `datasets` itself, CSV / JSON lines / text files; the
column rules, limit and reproducible samples; every bad input a clear error; and a large
Parquet file read in batches, with memory far under the table's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from mha_viz import InputError  # noqa: E402
from mha_viz.corpus import open_texts, read_corpus  # noqa: E402

TEXTS = [f"text number {i}: the cat sat on the mat {i % 7} times" for i in range(50)]


def table(texts=TEXTS):
    return pa.table({"id": list(range(len(texts))), "text": texts,
                     "title": [f"t{i}" for i in range(len(texts))]})


def test_parquet_arrow_and_folders_give_the_texts_in_order(tmp_path):
    pq.write_table(table(), tmp_path / "one.parquet", row_group_size=7)
    assert list(open_texts(tmp_path / "one.parquet")) == TEXTS  # "text" by default
    stream = open_texts(tmp_path / "one.parquet", column="title")
    assert stream.rows == 50 and stream.total == 50 and stream.columns == ["id", "text", "title"]
    assert list(stream)[:2] == ["t0", "t1"]

    shards = tmp_path / "shards"
    shards.mkdir()
    for i in range(3):  # a folder of Parquet shards, read in name order
        pq.write_table(table(TEXTS[i * 20:(i + 1) * 20]), shards / f"part-{i:03d}.parquet")
    stream = open_texts(shards)
    assert list(stream) == TEXTS and "3 files" in stream.source

    with pa.OSFile(str(tmp_path / "file.arrow"), "wb") as sink:  # Arrow IPC, file format
        with pa.ipc.new_file(sink, table().schema) as writer:
            writer.write_table(table(), max_chunksize=9)
    assert list(open_texts(tmp_path / "file.arrow")) == TEXTS


def test_a_dataset_saved_by_datasets_is_read_without_it(tmp_path):
    datasets = pytest.importorskip("datasets")
    data = datasets.Dataset.from_dict({"text": TEXTS, "label": list(range(50))})
    data.save_to_disk(str(tmp_path / "plain"))
    assert list(open_texts(tmp_path / "plain")) == TEXTS
    both = datasets.DatasetDict({"train": data, "test": data.select(range(5))})
    both.save_to_disk(str(tmp_path / "dict"))
    assert list(open_texts(tmp_path / "dict")) == TEXTS
    assert list(open_texts(tmp_path / "dict", split="test")) == TEXTS[:5]
    with pytest.raises(InputError, match="no split 'dev'; its splits are 'train', 'test'"):
        open_texts(tmp_path / "dict", split="dev")


def test_text_csv_and_json_lines_equal_the_whole_file_readers(tmp_path):
    lines = "\n".join(TEXTS) + "\n"
    paragraphs = "first paragraph\nstill the first\n\nsecond one\n"
    rows = "text,n\n" + "".join(f'"{t}",{i}\n' for i, t in enumerate(TEXTS))
    jsonl = "".join(json.dumps({"text": t}) + "\n" for t in TEXTS) + "not json\n{}\n"
    for name, content in (("a.txt", lines), ("b.txt", paragraphs), ("c.csv", rows),
                          ("d.jsonl", jsonl)):
        (tmp_path / name).write_text(content, encoding="utf-8")
        stream = open_texts(tmp_path / name)
        streamed = list(stream)
        whole = read_corpus(content.encode(), name)
        assert streamed == whole.texts, name
        assert stream.skipped == whole.skipped, name
    assert list(open_texts(tmp_path / "b.txt")) == ["first paragraph\nstill the first",
                                                     "second one"]


def test_limit_and_a_reproducible_sample(tmp_path):
    pq.write_table(table(), tmp_path / "t.parquet")
    path = tmp_path / "t.parquet"
    assert list(open_texts(path, limit=5)) == TEXTS[:5]
    first = list(open_texts(path, sample=10, seed=3))
    assert first == list(open_texts(path, sample=10, seed=3))  # the same seed, the same texts
    assert first != list(open_texts(path, sample=10, seed=4))
    assert len(set(first)) == 10 and first == sorted(first, key=TEXTS.index)  # corpus order
    assert open_texts(path, sample=10).total == 10
    assert list(open_texts(path, sample=500)) == TEXTS  # more than there is: all of it
    # uniform: over many seeds every text is drawn about 10/50 of the time
    counts = dict.fromkeys(TEXTS, 0)
    for seed in range(400):
        for text in open_texts(path, sample=10, seed=seed):
            counts[text] += 1
    assert min(counts.values()) > 400 * 0.2 * 0.6 and max(counts.values()) < 400 * 0.2 * 1.4
    with pytest.raises(InputError, match="--sample must be"):
        open_texts(path, sample=0)


def test_bad_inputs_get_clear_errors(tmp_path):
    pq.write_table(table(), tmp_path / "t.parquet")
    with pytest.raises(InputError, match="no column 'body'; its columns are 'id', 'text'"):
        open_texts(tmp_path / "t.parquet", column="body")
    with pytest.raises(InputError, match="'id' of 't.parquet' holds int64, not text; its "
                                         "text columns are 'text', 'title'"):
        open_texts(tmp_path / "t.parquet", column="id")
    pq.write_table(pa.table({"a": ["x"], "b": ["y"]}), tmp_path / "two.parquet")
    with pytest.raises(InputError, match="2 text columns .* say which with --column"):
        open_texts(tmp_path / "two.parquet")
    damaged = (tmp_path / "t.parquet").read_bytes()
    (tmp_path / "damaged.parquet").write_bytes(damaged[:len(damaged) // 2])
    with pytest.raises(InputError, match="'damaged.parquet' is not a readable Parquet file"):
        open_texts(tmp_path / "damaged.parquet")
    (tmp_path / "empty.parquet").write_bytes(b"")
    with pytest.raises(InputError, match="'empty.parquet' is not a readable Parquet file"):
        open_texts(tmp_path / "empty.parquet")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(InputError, match="'empty.csv' is empty"):
        open_texts(tmp_path / "empty.csv")
    (tmp_path / "x.bin").write_bytes(b"\0\1")
    with pytest.raises(InputError, match="'x.bin' is not a corpus file"):
        open_texts(tmp_path / "x.bin")
    (tmp_path / "nothing").mkdir()
    with pytest.raises(InputError, match="'nothing' holds no corpus files"):
        open_texts(tmp_path / "nothing")
    with pytest.raises(InputError, match="'gone' does not exist") as caught:
        open_texts(tmp_path / "gone")
    assert str(tmp_path) not in str(caught.value)  # a message names files, not folders


PEAK_SCRIPT = r"""
import sys, tracemalloc
import pyarrow as pa
from mha_viz.corpus import open_texts
tracemalloc.start()
n = chars = 0
for text in open_texts(sys.argv[1], column="text"):
    n += 1
    chars += len(text)
print(n, chars, tracemalloc.get_traced_memory()[1], pa.default_memory_pool().max_memory())
"""


@pytest.mark.slow
def test_a_large_parquet_file_is_read_in_batches(tmp_path):
    """200,000 rows: the Python objects alive at once and Arrow's buffers (a fresh process,
    so the peaks are of the reading alone) stay far under the table's own in-memory size,
    and far under the texts as a Python list."""
    n = 200_000
    texts = [f"row {i}: a short line of text about item {i % 997}, and a few more words of "
             f"it" for i in range(n)]
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"text": texts, "n": list(range(n))}), path, row_group_size=20_000)
    in_memory = pq.read_table(path).nbytes
    as_list = sum(sys.getsizeof(t) for t in texts)
    out = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(path)], capture_output=True,
                         text=True, check=True, cwd=str(tmp_path),
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    rows, chars, python_peak, arrow_peak = map(int, out.stdout.split())
    assert rows == n and chars == sum(len(t) for t in texts)
    print(f"table {in_memory / 2**20:.1f} MB, list {as_list / 2**20:.1f} MB; read with "
          f"Python peak {python_peak / 2**20:.2f} MB, Arrow peak {arrow_peak / 2**20:.2f} MB")
    assert python_peak + arrow_peak < in_memory / 3
    assert python_peak < as_list / 10


def test_an_uploaded_parquet_file_is_read_like_a_csv():
    from mha_viz.corpus import columns_of

    buffer = pa.BufferOutputStream()
    pq.write_table(pa.table({"n": [1, 2, 3], "body": ["one text", None, "another"],
                             "note": ["a", "b", "c"]}), buffer)
    data = buffer.getvalue().to_pybytes()
    assert columns_of(data, "up.parquet") == ["body", "note"]  # the text columns
    read = read_corpus(data, "up.parquet", "body")
    assert read.texts == ["one text", "another"] and read.skipped == 1
    assert read.source == "'up.parquet', column 'body'"
    with pytest.raises(InputError, match="2 text columns"):
        read_corpus(data, "up.parquet")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        read_corpus(b"PAR1 this is not parquet", "up.parquet")
    with pytest.raises(InputError, match="holds int64, not text"):
        read_corpus(data, "up.parquet", "n")


NO_RAY_SCRIPT = r"""
import sys
sys.modules["ray"] = None  # as if Ray were not installed: importing it raises ImportError
from mha_viz import ClusterError, corpus, load_model
model = load_model(sys.argv[1])
texts = ["the cat sat on the mat and looked at the door for a while"] * 3
result = corpus.run_stream(model, texts, 12, ("entropy",))
print("local", result.n_segments)
try:
    corpus.run_stream(model, texts, 12, ("entropy",), engine="ray", workers=2)
except ClusterError as error:
    print("ray:", error)
"""


def test_the_library_runs_without_ray_and_says_how_to_get_it(gpt2_folder):
    out = subprocess.run([sys.executable, "-c", NO_RAY_SCRIPT, str(gpt2_folder)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("local ") and int(lines[0].split()[1]) >= 3
    assert "pip install -r requirements-cluster.txt" in lines[1]
