"""A page link clicked right after typing: the switch is carried out, and what was typed kept.

Typing in the sidebar's text box and then clicking (or tapping) a page link makes the browser
send two requests a few milliseconds apart: first the page switch (it carries no widget
values), then the text box's commit, sent when the click took its focus away, which still
names the page the user is leaving. Streamlit folds the two into one run of the old page, or
runs the old page again after the new one started: the click is lost, and when the new page
had started, the old page's widget callback reads the new page's box (one key, two widgets)
and the typed text is lost too. Seen in chromium with Streamlit 1.67, on a desk and a phone.

So each session's last page switch is remembered for a moment. A commit that names another
page within that moment is sent on to the page the user clicked, and the values typed into
its text and number boxes (the only widgets that commit on blur) are carried over by name:
``state.take_incoming_params`` hands them to the widgets as the new page draws them.

The two can also arrive the other way round, the blur's commit first: when the server has not
yet started the commit's run as the switch arrives, Streamlit folds the two into one request
that keeps the newer one's widget values (the switch's: none; script_requests'
_coalesce_widget_states keeps only the older one's triggers), and the typed text is lost (seen
in clean-clone runs of the browser tests, two workers on two cores). So a switch that finds a
commit of another page still waiting carries that commit's typed values over the same way.
"""

from __future__ import annotations

import threading
import time

from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.runtime.app_session import AppSession
from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequestType

# a commit later than this after a page switch is a new action, not the click's own blur
OVERTAKING_SECONDS = 1.0
_TYPED_KINDS = ("string_value", "int_value", "double_value")

_lock = threading.Lock()
_last_switch: dict[str, tuple[float, str]] = {}  # session id -> (when, page hash)
_carried: dict[str, dict[str, object]] = {}  # session id -> {widget key: value typed}


def install() -> None:
    """Watch every session's rerun requests (once per process)."""
    if getattr(AppSession, "_mv_watches_switches", False):
        return
    original = AppSession._handle_rerun_script_request

    def handle(session, client_state=None):
        if client_state is not None and not client_state.fragment_id:
            client_state = _onto_the_clicked_page(session, client_state)
        original(session, client_state)

    AppSession._handle_rerun_script_request = handle
    AppSession._mv_watches_switches = True


def _onto_the_clicked_page(session: AppSession, request: ClientState) -> ClientState:
    session_id = session.id
    now = time.monotonic()
    with _lock:
        for stale in [k for k, (when, _) in _last_switch.items()
                      if now - when > OVERTAKING_SECONDS]:
            del _last_switch[stale]
        if not request.widget_states.widgets:  # a page link's request
            if request.page_script_hash:
                _last_switch[session_id] = (now, request.page_script_hash)
                waiting = waiting_typed_values(session, request.page_script_hash)
                if waiting:
                    _carried[session_id] = waiting
            return request
        switch = _last_switch.pop(session_id, None)
        if switch is None or switch[1] == request.page_script_hash:
            return request
        _carried[session_id] = typed_values(request)
    moved = ClientState()
    moved.CopyFrom(request)
    moved.page_script_hash = switch[1]
    moved.page_name = ""
    moved.ClearField("widget_states")  # the old page's widgets: none is on the new page
    return moved


def typed_values(request) -> dict[str, object]:
    """{user key: value} of the request's (a ClientState or a RerunData) text and number
    widgets that have a user key (an element id ends in "-<user key>")."""
    values = {}
    for widget in request.widget_states.widgets:
        kind = widget.WhichOneof("value")
        parts = widget.id.split("-", 2)
        if kind in _TYPED_KINDS and len(parts) == 3 and parts[2] != "None":
            values[parts[2]] = getattr(widget, kind)
    return values


def waiting_typed_values(session: AppSession, page_hash: str) -> dict[str, object]:
    """The typed values of a rerun request of another page than ``page_hash`` that the
    session's script runner has not started yet ({} if none): the request a page switch
    arriving now would be folded into."""
    runner = getattr(session, "_scriptrunner", None)
    requests = getattr(runner, "_requests", None)
    if requests is None:
        return {}
    with requests._lock:
        if requests._state != ScriptRequestType.RERUN:
            return {}
        pending = requests._rerun_data
    if pending.page_script_hash == page_hash or pending.widget_states is None:
        return {}
    return typed_values(pending)


def take_carried(session_id: str) -> dict[str, object]:
    """What a moved commit carried for this session ({} if nothing): taken once."""
    with _lock:
        return _carried.pop(session_id, {})
