"""server.batching.Batches: calls that arrive while one runs run together, every caller gets
its own result, a bad item fails alone, and the turn is held around each batch."""

from __future__ import annotations

import threading
import time

import pytest

from mha_viz.server.batching import Batches

pytestmark = pytest.mark.unit


class Recorder:
    """run_many that records its batches; the first batch waits until released."""

    def __init__(self):
        self.batches, self.release, self.first_started = [], threading.Event(), threading.Event()
        self.inside, self.most_inside = 0, 0
        self.lock = threading.Lock()

    def __call__(self, items):
        with self.lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            self.batches.append(list(items))
            if len(self.batches) == 1:
                self.first_started.set()
                self.release.wait(10)
            if any(item == "bad" for item in items):
                raise ValueError("bad item")
            return [item * 2 for item in items]
        finally:
            with self.lock:
                self.inside -= 1


def call_all(batches, items, results):
    threads = []
    for item in items:
        def one(item=item):
            try:
                results[item] = batches(item)
            except ValueError as error:
                results[item] = error
        threads.append(threading.Thread(target=one))
        threads[-1].start()
    return threads


def wait_queued(batches, count):
    deadline = time.time() + 10
    while len(batches._queue) < count and time.time() < deadline:
        time.sleep(0.01)
    assert len(batches._queue) == count


def test_calls_that_arrive_while_one_runs_run_together_and_get_their_own_results():
    run = Recorder()
    batches, results = Batches(run, max_items=3), {}
    first = call_all(batches, ["a"], results)
    assert run.first_started.wait(10)  # a lone call runs at once, without waiting for others
    rest = call_all(batches, ["b", "c", "d", "e"], results)
    wait_queued(batches, 4)
    run.release.set()
    for thread in first + rest:
        thread.join(10)
    assert run.batches[0] == ["a"]
    assert sorted(map(len, run.batches[1:])) == [1, 3]  # the queue, max_items at a time
    assert sorted(x for batch in run.batches[1:] for x in batch) == ["b", "c", "d", "e"]
    assert results == {x: x * 2 for x in "abcde"}
    assert run.most_inside == 1 and not batches._running and not batches._queue


def test_a_bad_item_fails_alone_and_the_others_get_their_results():
    run = Recorder()
    batches, results = Batches(run), {}
    first = call_all(batches, ["a"], results)
    assert run.first_started.wait(10)
    rest = call_all(batches, ["b", "bad", "c"], results)
    wait_queued(batches, 3)
    run.release.set()
    for thread in first + rest:
        thread.join(10)
    assert isinstance(results.pop("bad"), ValueError)
    assert results == {"a": "aa", "b": "bb", "c": "cc"}
    assert sorted(run.batches[1]) == ["b", "bad", "c"]  # tried together, then one at a time


def test_the_turn_is_held_around_each_batch():
    turn = threading.BoundedSemaphore(1)
    seen = []

    def run_many(items):
        seen.append(turn.acquire(blocking=False))  # False: the batch holds the turn
        return list(items)

    batches = Batches(run_many, turn=turn)
    assert batches(1) == 1 and batches(2) == 2 and seen == [False, False]
    assert turn.acquire(blocking=False)  # given back after


def test_a_batch_takes_queued_items_while_their_sizes_fit():
    run = Recorder()
    batches, results = Batches(run, size=len, max_size=4), {}
    first = call_all(batches, ["a"], results)
    assert run.first_started.wait(10)
    rest = call_all(batches, ["bb", "cc", "ddddd", "e"], results)
    wait_queued(batches, 4)
    order = [call.item for call in batches._queue]  # the order they queued in
    run.release.set()
    for thread in first + rest:
        thread.join(10)
    assert results == {x: x * 2 for x in ["a", "bb", "cc", "ddddd", "e"]}
    sizes = [sum(map(len, batch)) for batch in run.batches[1:]]
    assert all(size <= 4 or len(batch) == 1 for size, batch in zip(sizes, run.batches[1:]))
    assert [x for batch in run.batches[1:] for x in batch] == order  # in order, none twice
