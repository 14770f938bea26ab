"""What the server's start puts off (mha_viz.server.startup): the garbage collector settled
once, and pandas imported only when no page run is in flight."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from streamlit.runtime.scriptrunner_utils.exceptions import RerunException

from mha_viz.server.startup import PageRuns, settle_heap
from mha_viz.ui import runs, warm

ROOT = Path(__file__).resolve().parents[2]


def wait_for(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_work_waits_for_the_runs_in_flight_and_runs_started_meanwhile_wait_for_it():
    page_runs = PageRuns()
    events = []
    first_in, first_may_end = threading.Event(), threading.Event()

    def first_run():
        with page_runs.running():
            first_in.set()
            first_may_end.wait(5)
            events.append("first run ends")

    def work():
        events.append("work starts")
        time.sleep(0.2)
        events.append("work ends")

    def second_run():
        with page_runs.running():
            events.append("second run")

    run = threading.Thread(target=first_run)
    run.start()
    first_in.wait(5)
    worker = threading.Thread(target=lambda: events.append(page_runs.between_runs(work, 5)))
    worker.start()
    time.sleep(0.1)
    assert events == []  # a run is in flight: the work waits
    late = threading.Thread(target=second_run)  # and a run starting now is not held up
    late.start()
    late.join(5)
    assert events == ["second run"]
    first_may_end.set()
    wait_for(lambda: "work starts" in events)
    held = threading.Thread(target=second_run)  # a run starting during the work waits for it
    held.start()
    worker.join(5)
    held.join(5)
    assert events == ["second run", "first run ends", "work starts", "work ends", True,
                      "second run"]
    assert page_runs.in_flight == 0


def run_held(page_run, page_runs) -> tuple[threading.Thread, threading.Event]:
    """A page run (page_run(): a context) in a thread of its own, in flight until the event
    is set."""
    leave = threading.Event()

    def visitor():
        with page_run():
            leave.wait(5)

    run = threading.Thread(target=visitor)
    run.start()
    wait_for(lambda: page_runs.in_flight == 1)
    return run, leave


def test_work_that_finds_no_quiet_moment_does_not_run():
    page_runs = PageRuns()
    run, leave = run_held(page_runs.running, page_runs)
    done = []
    assert page_runs.between_runs(lambda: done.append(1), patience=0.1) is False
    assert done == []
    leave.set()
    run.join(5)


def test_failing_work_releases_the_runs():
    page_runs = PageRuns()

    def failing():
        raise OSError("disk gone")

    with pytest.raises(OSError):
        page_runs.between_runs(failing, 1)
    with page_runs.running():  # would wait forever if the work had kept the runs out
        assert page_runs.in_flight == 1


def test_the_heap_is_settled_only_after_a_start_that_held_collections():
    frozen = gc.get_freeze_count()
    settle_heap()  # collections on, as in a notebook or a test: nothing happens
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    code = ("import gc; from mha_viz.server.startup import settle_heap; gc.disable(); "
            "junk = [[i] for i in range(1000)]; settle_heap(); "
            "print(gc.isenabled(), gc.get_freeze_count() > len(junk))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.split() == ["True", "True"], done.stderr[-2000:]


def test_plotly_reads_a_half_imported_pandas():
    """Why pandas is imported between runs: while another thread imports it, sys.modules holds
    it half built, and plotly (reading it without importing it) fails on it, even for the
    early chart's empty figure. If this stops failing, plotly no longer reads it."""
    import types

    import plotly.graph_objects as go

    half = types.ModuleType("pandas")  # pandas/__init__ before its first names are bound
    real = sys.modules.get("pandas")
    sys.modules["pandas"] = half
    try:
        with pytest.raises(AttributeError, match="Series"):
            go.Figure(layout=dict(height=10, template="none"))
    finally:
        if real is None:
            del sys.modules["pandas"]
        else:
            sys.modules["pandas"] = real


def test_the_first_page_does_not_import_pandas():
    """The library's pages import nothing of pandas (plotly only reads it when imported):
    0.3-0.45 s more before a start's first figure."""
    code = ("import sys; import streamlit, plotly.graph_objects; from mha_viz import ui; "
            "from mha_viz.ui.views import home, attention_maps; print('pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.stdout.split()[-1:] == ["False"], done.stderr[-2000:]


@pytest.fixture
def fresh_start(monkeypatch):
    monkeypatch.setattr(warm, "_start_is_over", False)
    monkeypatch.setattr(warm, "PAGE_RUNS", PageRuns())
    imported = []
    monkeypatch.setattr(warm, "_import_pandas", lambda: imported.append(
        warm.PAGE_RUNS.in_flight))
    return imported


def test_the_start_imports_pandas_once_between_page_runs(fresh_start, monkeypatch):
    monkeypatch.setenv("MHA_VIZ_WARM_START", "0")
    run, leave = run_held(warm.PAGE_RUNS.running, warm.PAGE_RUNS)  # as app.py holds a run
    start = threading.Thread(target=warm.prepare_default)
    start.start()
    time.sleep(0.1)
    assert fresh_start == []  # a page run is in flight
    leave.set()
    run.join(5)
    start.join(5)
    assert fresh_start == [0]
    warm.prepare_default()
    assert fresh_start == [0]  # once


def test_a_page_run_tells_the_warm_start_unless_a_rerun_cut_it_short(monkeypatch):
    told = []
    monkeypatch.setattr(runs, "page_run_over", lambda: told.append(1))
    with pytest.raises(RerunException), runs.page_run():
        raise RerunException(None)
    assert told == []
    with runs.page_run():
        pass
    assert told == [1]
    with pytest.raises(ValueError), runs.page_run():  # st.stop() and errors end a drawn run
        raise ValueError
    assert told == [1, 1]


def test_a_fragments_rerun_is_a_page_run():
    seen = []
    rerun = runs.as_page_run(lambda x: seen.append((x, runs.PAGE_RUNS.in_flight)))
    rerun(3)
    assert seen == [(3, 1)] and runs.PAGE_RUNS.in_flight == 0


def test_a_components_data_travels_in_a_list_so_streamlit_imports_no_pandas(monkeypatch):
    """Streamlit looks for dataframes among the values of a dict a component is given, which
    imports pandas and pyarrow (in a visitor's first page run, before its figures): our
    components send their data in a list, and their js gets it back as component.data."""
    import streamlit.components.v2 as components

    from mha_viz.ui import state

    mounted = {}
    monkeypatch.setattr(components, "component", lambda name, js: (
        mounted.update(js=js) or (lambda **kwargs: mounted.update(kwargs))))
    state.browser_component.cache_clear()
    try:
        state.browser_component("mv_test", "export default function(component) {}")(
            key="k", data={"width": 3})
        with pytest.raises(ValueError):
            state.browser_component("mv_bad", "export function other() {}")
    finally:
        state.browser_component.cache_clear()
    assert mounted["data"] == [{"width": 3}] and mounted["key"] == "k"
    assert mounted["js"].count("export default function(component)") == 1
    assert "component.data[0]" in mounted["js"]
    code = ("import sys; from streamlit.components.v2.bidi_component.serialization import "
            "serialize_mixed_data as send; from streamlit.proto.BidiComponent_pb2 import "
            "BidiComponent as P; send([{'known': {'width': 3}}], P()); "
            "print('pandas' in sys.modules); "
            "send({'known': {'width': 3}}, P()); print('pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.stdout.split() == ["False", "True"], done.stderr[-2000:]
