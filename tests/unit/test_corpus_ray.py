"""Corpus runs on Ray (issue 23), on a real local Ray instance: 1, 2 and 3 workers and the
single process give the same arrays; a worker killed mid-run (by its pid) costs only its
shard; a run interrupted and started again on the same checkpoint equals an uninterrupted
one, and a checkpoint of another run is refused."""

from __future__ import annotations

import os
import signal
import socket
import time

import numpy as np
import pytest

from mha_viz import corpus
from mha_viz.core.errors import ClusterError, InputError

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

STATS = ("entropy", "mass", "roles", "similarity")
SEG_LEN, SHARD = 32, 6


@pytest.fixture(scope="module")
def ray_instance():
    """One local instance for the module (each run would otherwise start its own: ~3 s)."""
    from mha_viz.corpus.ray_engine import connect

    assert connect(ray, None, 3)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def texts():
    return corpus.demo_texts(limit=24)


def run(model, texts, **options):
    return corpus.run_stream(model, texts, SEG_LEN, STATS, shard_segments=SHARD, **options)


def assert_same(found, expected):
    assert found.n_segments == expected.n_segments and found.n_tokens == expected.n_tokens
    a, b = found.arrays(), expected.arrays()
    assert set(a) == set(b)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], atol=1e-6, rtol=0, err_msg=key)


@pytest.fixture(scope="module")
def single(gpt2_model, texts):
    return run(gpt2_model, texts)


def test_one_two_and_three_workers_equal_one_process(gpt2_model, texts, single, ray_instance):
    assert single.info["shards"] >= 6 and single.info["engine"] == "local"
    assert single.n_segments > 30
    # and the whole-list run of the library's first corpus API
    assert_same(single, corpus.run(gpt2_model, corpus.segment(gpt2_model, texts, SEG_LEN),
                                   STATS))
    for workers in (1, 2, 3):
        found = run(gpt2_model, texts, engine="ray", workers=workers)
        assert found.info["workers"] == workers and found.info["engine"] == "ray"
        assert_same(found, single)


def test_the_list_api_on_two_workers_gives_the_one_process_answer(gpt2_model, texts,
                                                                 ray_instance):
    """corpus.run(model, segments, workers=2): the library's first corpus API on Ray (its
    test in test_corpus.py started Ray and its workers for itself: 95 s of CI)."""
    segments = corpus.segment(gpt2_model, texts[:6], seg_len=12, min_len=4)
    one = corpus.run(gpt2_model, segments, stats=("entropy", "roles"))
    two = corpus.run(gpt2_model, segments, stats=("entropy", "roles"), workers=2)
    assert two.n_segments == one.n_segments
    for name in one.names:
        np.testing.assert_allclose(two.mean(name), one.mean(name), atol=1e-5)
        np.testing.assert_allclose(two.std(name), one.std(name), atol=1e-5)


def test_a_worker_killed_mid_run_costs_only_its_shard(gpt2_model, texts, single, ray_instance):
    from mha_viz.corpus.ray_engine import worker_pids

    killed = []

    def kill_one(progress):
        if not killed:
            pid = worker_pids()[0]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    found = run(gpt2_model, texts, engine="ray", workers=2, progress=kill_one)
    assert killed
    with pytest.raises(ProcessLookupError):
        os.kill(killed[0], 0)  # it is gone, and the run still finished
    assert_same(found, single)


def test_an_interrupted_run_resumes_from_its_checkpoint(gpt2_model, texts, single, tmp_path):
    seen = []

    def stop_after_three(progress):
        seen.append(progress)
        if progress.shards == 3:
            raise KeyboardInterrupt  # Ctrl-C

    with pytest.raises(KeyboardInterrupt):
        run(gpt2_model, texts, checkpoint=tmp_path, progress=stop_after_three)
    assert len(list(tmp_path.glob("shard-*.npz"))) == 3
    assert seen[-1].tokens_per_second > 0
    resumed = run(gpt2_model, texts, checkpoint=tmp_path)
    assert resumed.info["resumed_shards"] == 3
    assert_same(resumed, single)
    again = run(gpt2_model, texts, checkpoint=tmp_path)  # all of it kept: nothing runs
    assert again.info["resumed_shards"] == again.info["shards"]
    assert_same(again, single)

    with pytest.raises(InputError, match="belongs to another run .*seg_len: 32 there, 24 now"):
        corpus.run_stream(gpt2_model, texts, 24, STATS, shard_segments=SHARD,
                          checkpoint=tmp_path)
    with pytest.raises(InputError, match="holds another input's shard 0"):
        run(gpt2_model, list(reversed(texts)), checkpoint=tmp_path)


def test_a_cluster_address_that_does_not_answer_is_a_clear_error(gpt2_model, texts):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ClusterError, match=f"no Ray cluster answers at 127.0.0.1:{port}"):
        run(gpt2_model, texts, engine="ray", workers=1, address=f"127.0.0.1:{port}")
    assert time.monotonic() - started < 15
    with pytest.raises(ClusterError, match="must be auto or HOST:PORT"):
        run(gpt2_model, texts, engine="ray", address="nowhere")


def test_parquet_row_groups_are_read_by_the_workers(gpt2_model, texts, single, tmp_path,
                                                    ray_instance):
    """A Parquet input on Ray: each worker reads, cuts and measures its own row groups; the
    numbers and the counts equal this process reading the same file, and a checkpoint of
    row groups resumes (and is refused to a run that cuts segments here)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")

    rows = [t if i % 5 else None for i, t in enumerate(texts)]  # some rows hold no text
    pq.write_table(pa.table({"text": rows}), tmp_path / "c.parquet", row_group_size=5)
    path = tmp_path / "c.parquet"
    here_stream = corpus.open_texts(path)
    here = run(gpt2_model, here_stream)
    stream = corpus.open_texts(path)
    assert len(stream.row_groups()) == 5
    seen = []
    found = run(gpt2_model, stream, engine="ray", workers=2, checkpoint=tmp_path / "kept",
                progress=seen.append)
    assert found.info["shards"] == 5 and seen[-1].texts_read == here.info["texts_read"]
    for key in ("n_texts", "n_dropped", "texts_read"):
        assert found.info[key] == here.info[key], key
    assert stream.skipped == here_stream.skipped == 5
    assert_same(found, here)
    again = run(gpt2_model, corpus.open_texts(path), engine="ray", workers=1,
                checkpoint=tmp_path / "kept")
    assert again.info["resumed_shards"] == 5
    assert_same(again, here)
    with pytest.raises(InputError, match="units: 'row groups' there, 'segments' now"):
        run(gpt2_model, corpus.open_texts(path), checkpoint=tmp_path / "kept")
