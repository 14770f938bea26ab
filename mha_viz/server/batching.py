"""Calls that arrive while one is running run together, as one: the server's way to trace the
texts of a class that presses Run at once in one forward (mha_viz.models.batched). No call
waits for a batch to fill: the first runs at once; those that come while it runs queue, and
the next batch takes every queued call (up to max_items). Each batch is run by the thread of
its first caller, so no thread of the server's own is needed, and a failing batch is run again
one call at a time, so that one bad text fails alone."""

from __future__ import annotations

import threading
from contextlib import nullcontext
from typing import Callable, Sequence


class _Call:
    __slots__ = ("item", "done", "leads", "result", "error")

    def __init__(self, item):
        self.item, self.done, self.leads = item, threading.Event(), False
        self.result, self.error = None, None

    def outcome(self):
        if self.error is not None:
            raise self.error
        return self.result


class Batches:
    """batches(item) -> run_many([item, ...])'s result for item, run with the items queued
    beside it. run_many(items) -> results, in order; turn: a context manager held around each
    batch (the server's limit on forwards at once), or None; size(item) and max_size: a batch
    takes queued items while their sizes add up to at most max_size (always one)."""

    def __init__(self, run_many: Callable[[Sequence], list], max_items: int = 16, turn=None,
                 size: Callable | None = None, max_size: float = float("inf")):
        self.run_many, self.max_items, self.turn = run_many, max(1, int(max_items)), turn
        self.size, self.max_size = size, max_size
        self._lock = threading.Lock()
        self._queue: list[_Call] = []
        self._running = False

    def __call__(self, item):
        call = _Call(item)
        with self._lock:
            self._queue.append(call)
            leads = call.leads = not self._running
            self._running = True
        if not leads:
            call.done.wait()  # set when its batch ran, or when it is to run the next one
        if call.leads:
            self._run_next()
        return call.outcome()

    def _run_next(self) -> None:
        """Runs the queue's first calls (this thread's the first of them; max_items, within
        max_size), then hands the next batch to the first call still queued, or marks that
        nothing runs."""
        with self._lock:
            taken, total = 1, 0 if self.size is None else self.size(self._queue[0].item)
            while taken < min(self.max_items, len(self._queue)):
                more = 0 if self.size is None else self.size(self._queue[taken].item)
                if total + more > self.max_size:
                    break
                taken, total = taken + 1, total + more
            batch, self._queue = self._queue[:taken], self._queue[taken:]
        try:
            self._run(batch)
        finally:
            with self._lock:
                following = self._queue[0] if self._queue else None
                self._running = following is not None
            for call in batch:
                if call.result is None and call.error is None:  # the batch was cut short
                    call.error = RuntimeError("the batch this call was in did not finish")
                call.leads = False
                call.done.set()
            if following is not None:
                following.leads = True
                following.done.set()

    def _run(self, batch: list[_Call]) -> None:
        try:
            with self.turn if self.turn is not None else nullcontext():
                results = self.run_many([call.item for call in batch])
            for call, result in zip(batch, results, strict=True):
                call.result = result
        except Exception as error:  # noqa: BLE001 - each call gets its own outcome
            if len(batch) == 1:
                batch[0].error = error
                return
            for call in batch:
                self._run([call])
