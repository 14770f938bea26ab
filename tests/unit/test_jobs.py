"""The job runner: jobs outlive whoever started them, report progress, queue behind the
concurrency limit in order, stop when cancelled, and hand errors to whoever waits."""

from __future__ import annotations

import threading

import pytest

from mha_viz.server import jobs


def stepper(steps: int, gate: threading.Event | None = None, progress=None):
    """A computation of `steps` steps; each step waits for `gate` (when given) to be set."""
    for i in range(steps):
        if gate is not None:
            assert gate.wait(10), "the test never opened the gate"
        progress(i + 1, steps)
    return steps * 10


def test_a_job_runs_reports_progress_and_returns_its_result():
    runner = jobs.JobRunner(max_running=1)
    gate = threading.Event()
    job = runner.submit("a", stepper, 4, gate, label="four steps")
    assert job.reports_progress and job.state in (jobs.QUEUED, jobs.RUNNING)
    assert runner.submit("a", stepper, 4, gate) is job  # one job per key
    gate.set()
    assert job.wait(10)
    assert job.state == jobs.DONE and job.result == 40
    assert (job.done, job.total, job.fraction) == (4, 4, 1.0)
    assert job.seconds_left == 0


def test_jobs_queue_in_order_behind_the_limit():
    runner = jobs.JobRunner(max_running=1)
    gate = threading.Event()
    first = runner.submit("first", stepper, 2, gate)
    second = runner.submit("second", stepper, 2, gate)
    third = runner.submit("third", stepper, 2, gate)
    for _ in range(100):  # the first takes the only slot
        if first.state == jobs.RUNNING:
            break
        first.wait(0.02)
    assert first.state == jobs.RUNNING
    assert (second.state, third.state) == (jobs.QUEUED, jobs.QUEUED)
    assert runner.queue_position(second) == 1 and runner.queue_position(third) == 2
    gate.set()
    assert all(j.wait(10) for j in (first, second, third))
    assert [j.result for j in (first, second, third)] == [20, 20, 20]
    assert second.started >= first.finished and third.started >= second.finished


def test_cancel_stops_a_running_job_at_its_next_step_and_a_queued_one_at_once():
    runner = jobs.JobRunner(max_running=1)
    gate = threading.Event()
    running = runner.submit("running", stepper, 1000, gate)
    queued = runner.submit("queued", stepper, 2, gate)
    queued.cancel()
    assert queued.state == jobs.CANCELLED
    runner.cancel("running")
    assert running.cancelling
    gate.set()
    assert running.wait(10)
    assert running.state == jobs.CANCELLED and running.done < 1000 and running.result is None
    # asking again after a cancel starts a new job
    again = runner.submit("running", stepper, 3, None)
    assert again is not running and again.wait(10) and again.result == 30


def test_an_error_reaches_whoever_waits_and_the_slot_is_freed():
    runner = jobs.JobRunner(max_running=1)

    def broken(progress=None):
        progress(1, 3)
        raise ValueError("bad input")

    failed = runner.submit("broken", broken)
    assert failed.wait(10) and failed.state == jobs.FAILED
    assert isinstance(failed.error, ValueError)
    after = runner.submit("after", stepper, 2, None)  # the slot came back
    assert after.wait(10) and after.state == jobs.DONE


def test_a_job_without_steps_just_runs():
    runner = jobs.JobRunner()
    job = runner.submit("plain", lambda x: x + 1, 41)
    assert not job.reports_progress
    assert job.wait(10) and job.result == 42 and job.seconds_left is None


def test_max_running_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_MAX_JOBS", "3")
    assert jobs.default_max_running() == 3
    monkeypatch.setenv("MHA_VIZ_MAX_JOBS", "lots")
    assert jobs.default_max_running() == 2
    with pytest.raises(ValueError):
        jobs.JobRunner(0)
