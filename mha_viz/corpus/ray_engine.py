"""Shards on Ray: one actor per worker loads the model once and runs shard after shard.

A worker that dies (its process killed, its node lost) is restarted by Ray, which loads the
model again and runs the shard it held once more (max_restarts and max_task_retries are
unbounded), so a lost worker costs its shard, never the run. Ray is imported only here: the
library without it runs on one process.

The actors import mha_viz: on a local instance they find it where this process did; on a
cluster, install mha-viz (and the same model files, or a bundled model's name) on every node.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Callable, Iterator

from ..core.errors import ClusterError, MhaVizError
from .results import CorpusResult
from ..models.segments import corpus_model
from .shards import Shard

IN_FLIGHT = 2  # shards queued per worker: one running, one ready
CONNECT_SECONDS = 10.0  # how long a cluster address may take to answer
_ACTORS: list = []  # the running run's workers (tests kill one by its pid)


class ShardWorker:
    """A Ray actor's state: the model, loaded once, and the settings of every shard."""

    def __init__(self, model_name: str, settings: dict, threads: int,
                 placement: tuple[str, str] = ("float32", "cpu")):
        import torch

        from ..models.model import load_model

        torch.set_num_threads(max(1, int(threads)))
        dtype, device = placement  # the driver's model's, so every worker computes alike
        self.model = corpus_model(load_model(model_name, dtype=dtype, device=device))
        self.settings = settings

    def run(self, ids: list[list[int]]) -> CorpusResult:
        from .measuring import run_shard

        return run_shard(self.model, ids, **self.settings)

    def run_rows(self, group, seg_len: int, min_len: int) -> CorpusResult:
        """A Parquet row group read, cut and measured here (sources.RowGroup)."""
        return measure_row_group(self.model, group, seg_len, min_len, self.settings)

    def pid(self) -> int:
        return os.getpid()


def import_ray():
    try:
        import ray
    except ImportError:
        raise ClusterError("the Ray engine needs Ray: pip install -r requirements-cluster.txt "
                         "(or run with one worker, which needs nothing more)") from None
    return ray


def connect(ray, address: str | None, workers: int) -> bool:
    """Join the cluster at address ("auto": the one this machine belongs to; HOST:PORT),
    or start a local instance of ``workers`` CPUs; -> whether a local one was started (and
    so must be shut down after). An address that does not answer is a ClusterError within
    CONNECT_SECONDS."""
    if address not in (None, "auto"):  # refused or unanswered before Ray waits on it
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ClusterError(f"--address must be auto or HOST:PORT, got {address!r}")
        try:
            socket.create_connection((host.strip("[]"), int(port)), CONNECT_SECONDS).close()
        except OSError:
            raise ClusterError(f"no Ray cluster answers at {address} (waited up to "
                             f"{CONNECT_SECONDS:.0f} s)") from None
    if ray.is_initialized():
        return False
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    if address is None:
        package_home = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (package_home, os.environ.get("PYTHONPATH")) if p)
        ray.init(num_cpus=workers, runtime_env={"env_vars": {"PYTHONPATH": path}}, **quiet)
        return True
    try:
        ray.init(address=address, **{k: v for k, v in quiet.items() if k != "include_dashboard"})
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise ClusterError(f"could not join the Ray cluster at {address}: "
                         f"{str(error).splitlines()[0][:200]}") from None
    return False


def measure_row_group(model, group, seg_len: int, min_len: int, settings: dict
                      ) -> CorpusResult:
    """A row group's statistics, with what cutting it did in result.info (texts_read,
    n_texts, n_dropped, skipped): the counts a run adds up."""
    from .measuring import run_shard
    from ..models.segments import SegmentCounts, iter_segments

    texts, skipped = group.texts()
    counts = SegmentCounts()
    ids = list(iter_segments(model, texts, seg_len, min_len, None, counts))
    result = run_shard(model, ids, **settings) if ids else CorpusResult({}, 0, 0)
    result.info.update(texts_read=counts.texts_read, n_texts=counts.n_texts,
                       n_dropped=counts.n_dropped, skipped=skipped)
    return result


def run_on_ray(model_name: str, shards: Iterator, settings: dict, workers: int,
               address: str | None, threads: int | None,
               finished: Callable[[Shard, CorpusResult], None],
               row_groups: tuple[int, int] | None = None,
               placement: tuple[str, str] = ("float32", "cpu")) -> None:
    """Run every shard on ``workers`` actors; finished(shard, result) as each comes back
    (in the order they finish). row_groups=(seg_len, min_len): the shards are Parquet row
    groups (sources.RowGroup) that each worker reads and cuts itself."""
    ray = import_ray()
    started_here = connect(ray, address, workers)
    if threads is None:
        threads = default_threads(ray, workers)
    worker = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=-1)(ShardWorker)
    # Ray sets OMP_NUM_THREADS to an actor's CPUs (1), which numpy's BLAS and OpenMP read at
    # start: the statistics would then run on one thread whatever torch is told.
    threaded = worker.options(runtime_env={"env_vars": {"OMP_NUM_THREADS": str(threads)}})
    actors = [threaded.remote(model_name, settings, threads, placement) for _ in range(workers)]
    _ACTORS[:] = actors
    pending: dict = {}

    def give(actor) -> None:
        shard = next(shards, None)
        if shard is None:
            return
        if row_groups is None:
            pending[actor.run.remote(shard.ids)] = (shard, actor)
        else:
            pending[actor.run_rows.remote(shard, *row_groups)] = (shard, actor)

    try:
        for _ in range(IN_FLIGHT):
            for actor in actors:
                give(actor)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            shard, actor = pending.pop(ready[0])
            try:
                result = ray.get(ready[0])
            except ray.exceptions.RayTaskError as error:  # raised in the worker: say it
                cause = getattr(error, "cause", None)
                if isinstance(cause, MhaVizError):  # bad input met by a worker
                    raise cause from None
                raise ClusterError(f"a Ray worker failed on shard {shard.index}: "
                                   f"{str(error).splitlines()[0][:300]}") from None
            except ray.exceptions.RayError as error:
                raise ClusterError(f"a Ray worker failed on shard {shard.index}: "
                                 f"{str(error).splitlines()[0][:300]}") from None
            finished(shard, result)
            give(actor)
    finally:
        _ACTORS.clear()
        for actor in actors:
            ray.kill(actor)
        if started_here:
            ray.shutdown()


def default_threads(ray, workers: int) -> int:
    """torch threads per actor: the cluster's CPUs shared among the workers, at most one
    node's (an actor runs on one node); 2 for one worker on a 2-CPU local instance."""
    cpus = [node.get("Resources", {}).get("CPU", 0) for node in ray.nodes() if node.get("Alive")]
    total = sum(cpus) or (os.cpu_count() or 1)
    return int(max(1, min(max(cpus, default=total), total // max(workers, 1))))


def worker_pids() -> list[int]:
    """The process ids of the running run's workers (for a test that kills one)."""
    ray = import_ray()
    return ray.get([actor.pid.remote() for actor in _ACTORS])
