"""A page link clicked while the text box's commit still waits to run: Streamlit's own request
queue folds the two and drops the typed text; navigation.py carries it over to the new page."""

from types import SimpleNamespace

import pytest

pytest.importorskip("streamlit")

from streamlit.proto.ClientState_pb2 import ClientState  # noqa: E402
from streamlit.proto.WidgetStates_pb2 import WidgetStates  # noqa: E402
from streamlit.runtime.scriptrunner_utils.script_requests import (  # noqa: E402
    RerunData, ScriptRequests)

from mha_viz.ui import navigation  # noqa: E402

HOME, ENTROPY = "home-page-hash", "entropy-page-hash"
TYPED = "The dog chased the ball."


def _commit_states(text: str) -> WidgetStates:
    """What the browser sends when the sidebar's box loses focus: every widget's value, the
    text box (user key _mv_w_text) with what was typed, a toggle beside it."""
    states = WidgetStates()
    box = states.widgets.add()
    box.id, box.string_value = "$$ID-3f2a9c-_mv_w_text", text
    toggle = states.widgets.add()
    toggle.id, toggle.bool_value = "$$ID-77b1e0-_mv_w_present", False
    return states


def _session(session_id: str) -> SimpleNamespace:
    """An AppSession as navigation reads it: its id and its script runner's request queue."""
    return SimpleNamespace(id=session_id,
                           _scriptrunner=SimpleNamespace(_requests=ScriptRequests()))


def _switch_to(page_hash: str) -> ClientState:
    switch = ClientState()
    switch.page_script_hash = page_hash
    return switch


def test_streamlit_drops_a_waiting_commit_s_text_when_a_switch_arrives():
    """The loss itself, in Streamlit's queue: why navigation has to carry the text."""
    requests = ScriptRequests()
    requests.request_rerun(RerunData(widget_states=_commit_states(TYPED),
                                     page_script_hash=HOME))
    requests.request_rerun(RerunData(widget_states=_switch_to(ENTROPY).widget_states,
                                     page_script_hash=ENTROPY))
    folded = requests.on_scriptrunner_yield().rerun_data
    assert folded.page_script_hash == ENTROPY
    assert [w.string_value for w in folded.widget_states.widgets] == []


def test_a_switch_carries_the_waiting_commit_s_typed_values():
    session = _session("waiting-commit")
    session._scriptrunner._requests.request_rerun(
        RerunData(widget_states=_commit_states(TYPED), page_script_hash=HOME))
    sent_on = navigation._onto_the_clicked_page(session, _switch_to(ENTROPY))
    assert sent_on.page_script_hash == ENTROPY
    assert navigation.take_carried(session.id) == {"_mv_w_text": TYPED}
    assert navigation.take_carried(session.id) == {}  # taken once


@pytest.mark.parametrize("case", ["nothing waiting", "commit already running", "same page"])
def test_a_switch_carries_nothing_when_no_commit_of_another_page_waits(case):
    session = _session(f"no-carry-{case}")
    requests = session._scriptrunner._requests
    if case != "nothing waiting":
        requests.request_rerun(RerunData(widget_states=_commit_states(TYPED),
                                         page_script_hash=ENTROPY if case == "same page"
                                         else HOME))
    if case == "commit already running":
        requests.on_scriptrunner_yield()  # the runner took it: its callbacks keep the text
    navigation._onto_the_clicked_page(session, _switch_to(ENTROPY))
    assert navigation.take_carried(session.id) == {}


def test_a_session_without_a_script_runner_yet_is_left_alone():
    session = SimpleNamespace(id="no-runner", _scriptrunner=None)
    sent_on = navigation._onto_the_clicked_page(session, _switch_to(ENTROPY))
    assert sent_on.page_script_hash == ENTROPY
    assert navigation.take_carried(session.id) == {}
