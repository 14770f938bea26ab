"""Long computations as background jobs: they run in their own thread, so they outlive the
request (a Streamlit script run, a notebook cell) that started them, report progress, wait
their turn behind a small concurrency limit, and stop only when cancelled.

No Streamlit here: the app draws a Job's state (mha_viz.ui.computed); a notebook or a command
line can use the same runner.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

log = logging.getLogger(__name__)

QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"


class JobCancelled(Exception):
    """Raised inside a job's progress callback once the job is cancelled."""


def accepts_progress(fn: Callable) -> bool:
    """Whether fn takes a ``progress`` keyword (a callback(done, total))."""
    try:
        return "progress" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins
        return False


@dataclass
class Job:
    key: Hashable
    label: str
    reports_progress: bool  # fn takes progress=: it has steps to show, and can be cancelled
    submitted: float = field(default_factory=time.monotonic)
    started: float | None = None
    finished: float | None = None
    state: str = QUEUED
    done: int = 0
    total: int = 0
    result: Any = None
    error: BaseException | None = None
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    _finished: threading.Event = field(default_factory=threading.Event, repr=False)

    def progress(self, done: int, total: int) -> None:
        """The callback handed to the computation: records the step, stops a cancelled job."""
        self.done, self.total = int(done), int(total)
        if self._cancel.is_set():
            raise JobCancelled(self.label)

    def cancel(self) -> None:
        self._cancel.set()
        if self.state == QUEUED:  # never started: nothing to interrupt
            self._finish(CANCELLED)

    @property
    def cancelling(self) -> bool:
        return self._cancel.is_set() and self.state in (QUEUED, RUNNING)

    @property
    def finished_state(self) -> bool:
        return self.state in (DONE, FAILED, CANCELLED)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job ends (or timeout seconds pass); True when it has ended."""
        return self._finished.wait(timeout)

    @property
    def elapsed(self) -> float:
        """Seconds spent running (0 while queued)."""
        if self.started is None:
            return 0.0
        return (self.finished or time.monotonic()) - self.started

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 0.0

    @property
    def seconds_left(self) -> float | None:
        """Time left at the rate so far (None before the first step is done)."""
        if not self.done or not self.total or self.started is None:
            return None
        return self.elapsed / self.done * max(0, self.total - self.done)

    def _finish(self, state: str, result: Any = None, error: BaseException | None = None):
        if self.finished_state:
            return
        self.state, self.result, self.error = state, result, error
        self.finished = time.monotonic()
        self._finished.set()


class JobRunner:
    """Runs jobs in daemon threads, at most ``max_running`` at once (the rest queue in order
    of submission). One job per key: submitting a key that has a job returns that job."""

    def __init__(self, max_running: int = 2):
        if max_running < 1:
            raise ValueError("max_running must be at least 1")
        self.max_running = max_running
        self._jobs: dict[Hashable, Job] = {}
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(max_running)
        self._queue: list[Job] = []  # waiting for a slot, in order

    def submit(self, key: Hashable, fn: Callable, *args, label: str = "", **kwargs) -> Job:
        with self._lock:
            job = self._jobs.get(key)
            # a job that is (being) cancelled or failed is not reused: asking again restarts
            if job is not None and not job.cancelling and job.state not in (CANCELLED, FAILED):
                return job
            job = Job(key, label, accepts_progress(fn))
            self._jobs[key] = job
            self._queue.append(job)
        thread = threading.Thread(target=self._run, args=(job, fn, args, kwargs), daemon=True,
                                  name=f"mha-viz job {label[:40]}")
        thread.start()
        return job

    def get(self, key: Hashable) -> Job | None:
        with self._lock:
            return self._jobs.get(key)

    def forget(self, key: Hashable, job: Job | None = None) -> None:
        """Drop an ended job (its result has been taken). With ``job``, only if it is still
        the one under ``key``."""
        with self._lock:
            if key in self._jobs and (job is None or self._jobs[key] is job):
                del self._jobs[key]

    def cancel(self, key: Hashable) -> None:
        job = self.get(key)
        if job is not None:
            job.cancel()

    def cancel_all(self) -> None:
        """Cancel and forget every job (a fresh start)."""
        with self._lock:
            every = list(self._jobs.values())
            self._jobs.clear()
        for job in every:
            job.cancel()

    def queue_position(self, job: Job) -> int:
        """1 for the next job to start, 0 when it is not waiting."""
        with self._lock:
            waiting = [j for j in self._queue if j.state == QUEUED]
            return waiting.index(job) + 1 if job in waiting else 0

    def running(self) -> list[Job]:
        with self._lock:
            return [j for j in self._jobs.values() if j.state == RUNNING]

    def _run(self, job: Job, fn: Callable, args, kwargs) -> None:
        # queue in submission order: a job takes a slot only when it is first in line
        while True:
            if job.finished_state:  # cancelled while queued
                self._leave_queue(job)
                return
            with self._lock:
                first = next((j for j in self._queue if j.state == QUEUED), None)
            if first is job and self._slots.acquire(timeout=0.1):
                break
            time.sleep(0.05)
        self._leave_queue(job)
        try:
            if job.finished_state:
                return
            job.state, job.started = RUNNING, time.monotonic()
            try:
                if job.reports_progress:
                    result = fn(*args, progress=job.progress, **kwargs)
                else:
                    result = fn(*args, **kwargs)
            except JobCancelled:
                job._finish(CANCELLED)
            except BaseException as error:  # noqa: BLE001 - handed to whoever waits
                if not isinstance(error, Exception):
                    raise
                job._finish(FAILED, error=error)
            else:
                job._finish(DONE, result=result)
        finally:
            self._slots.release()

    def _leave_queue(self, job: Job) -> None:
        with self._lock:
            if job in self._queue:
                self._queue.remove(job)


def default_max_running() -> int:
    """Heavy computations at once on one server (MHA_VIZ_MAX_JOBS, default 2: this runs on
    machines with 2 cores, and each computation uses one)."""
    try:
        return max(1, int(os.environ.get("MHA_VIZ_MAX_JOBS", "2")))
    except ValueError:
        return 2


__all__ = ["Job", "JobRunner", "JobCancelled", "accepts_progress", "default_max_running",
           "QUEUED", "RUNNING", "DONE", "FAILED", "CANCELLED"]
