"""What a session keeps: widget values that survive page switches and live in the URL's query
parameters (synced), presentation mode, the figure download format, and the tag that marks
which input a run's figures show."""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Sequence

import streamlit as st
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from . import link_notes, navigation
from .settings import (IMAGE_FORMATS, URL_READ_MAX_CHARS, clean_str, fits_in_link, md_escape,
                       readable_from_link)

log = logging.getLogger("mha_viz.ui")

_STATE = "_mv_state_"  # persisted values (plain session_state keys, survive page switches)
_WIDGET = "_mv_w_"  # widget keys (Streamlit forgets these when the page changes)
_INCOMING = "_mv_incoming"  # query parameters from a URL not written by us, not yet used
_SEEN = "_mv_seen"  # the query parameters as we last wrote them
# synced names drawn as boxes one types into: they commit when they lose focus
_TYPED_WIDGETS = ("text_area", "text_input", "number_input")
_TYPED_NAMES: set[str] = set()


def _url_params() -> dict[str, str]:
    return {k: str(v) for k, v in st.query_params.to_dict().items()}


def take_incoming_params() -> None:
    """Called once per run: query parameters we did not write ourselves (a copied link, a
    reload, an edited URL) are applied to the widgets as they are drawn, and so are values
    typed just before a page link was clicked (navigation.py), which are newer than both."""
    params = _url_params()
    if params and params != st.session_state.get(_SEEN):
        st.session_state[_INCOMING] = params
    st.session_state[_SEEN] = params
    ctx = get_script_run_ctx()
    carried = navigation.take_carried(ctx.session_id) if ctx is not None else {}
    for key, value in carried.items():
        name = key[len(_WIDGET):]
        if key.startswith(_WIDGET) and name in _TYPED_NAMES:
            st.session_state[_STATE + name] = clean_str(value) if isinstance(value, str) else value
            (st.session_state.get(_INCOMING) or {}).pop(name, None)


def _copy_widget_to_state(name: str) -> None:  # a callback: cannot fail
    st.session_state[_STATE + name] = st.session_state[_WIDGET + name]
    link_notes.forget(name)  # the person chose: a line about the link's value is stale


def _bool_from_url(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(text)


def synced(widget: Callable, name: str, label: str, default: Any, *,
           options: Sequence | None = None, valid: Callable[[Any], bool] | None = None,
           parse: Callable[[str], Any] | None = None, to_url: Callable[[Any], str] | None = None,
           url: bool = True, refused: Callable[[str, str], str] | None = None,
           **kwargs) -> Any:
    """Draw ``widget`` (st.selectbox, st.sidebar.toggle, ...) with a value that survives page
    switches and is mirrored in the URL's query parameter ``name``; return its value.

    default: the value when neither the session nor the URL has one (not in the URL).
    options: for selectbox/radio/multiselect; a remembered value no longer among them (e.g.
        layer 11 after switching to a 6-layer model) falls back to ``default``.
    valid: extra check of a remembered or URL value; invalid ones fall back to ``default``.
    parse / to_url: str <-> value for the URL (by default from the type of ``default``:
        bool "1"/"0", int, float, list "a,b", str).
    url: False keeps the value across pages but out of the URL.
    refused: (the link's value as a line shows it, the value used, as the widget shows it)
        -> the line that says a link's value was refused (link_notes; by default one naming
        the parameter and the widget's label). A text longer than a link is read
        (settings.readable_from_link) is refused too; the app writes only a text that
        settings.fits_in_link.
    Other keyword arguments go to the widget (help, format_func, min_value, ...). Do not pass
    value/index/default: the remembered value is the widget's value.
    """
    state_key, widget_key = _STATE + name, _WIDGET + name
    if getattr(widget, "__name__", "") in _TYPED_WIDGETS:
        _TYPED_NAMES.add(name)
    parse = parse or _default_parser(default)
    to_url = to_url or _default_serializer(default)

    def ok(value) -> bool:
        if options is not None:
            members = list(options)
            if isinstance(default, list):
                if not isinstance(value, list) or any(v not in members for v in value):
                    return False
            elif value not in members:
                return False
        return valid is None or bool(valid(value))

    incoming = st.session_state.get(_INCOMING) or {}
    link_refused = None  # the link's value, when the page cannot use it
    if url and name in incoming:
        raw = incoming.pop(name)
        try:
            value = parse(raw)
            if isinstance(default, str) and not readable_from_link(raw):
                link_refused = raw
            elif ok(value):
                st.session_state[state_key] = value
            else:
                link_refused = raw
        except (ValueError, TypeError):
            log.info("ignoring query parameter %s=%r", name, raw)
            link_refused = raw
    value = st.session_state.get(state_key, default)
    if isinstance(value, str):
        value = clean_str(value)
    if not ok(value):
        value = default
    if link_refused is not None:
        used = link_notes.shown_value(kwargs.get("format_func", str)(value))
        if isinstance(default, str) and not readable_from_link(link_refused):
            line = (f"The link's {name} ({len(link_refused):,} characters) is longer than a "
                    f"link is read ({URL_READ_MAX_CHARS:,} characters at most): "
                    f"*{md_escape(label)}* is “{used}” instead. Paste the text into the sidebar, or share a saved "
                    f"trace (.npz).")
        else:
            line = (refused or _refused_line(name, label))(
                link_notes.shown_value(link_refused), used)
        link_notes.refuse(name, line)
    st.session_state[state_key] = value
    st.session_state[widget_key] = value
    if options is not None:
        kwargs["options"] = options
    result = widget(label, key=widget_key, on_change=_copy_widget_to_state, args=(name,),
                    **kwargs)
    st.session_state[state_key] = result
    if url:
        _write_param(name, None if result == default else to_url(result))
    return result


def _refused_line(name: str, label: str) -> Callable[[str, str], str]:
    """The line of a refused link value, by default: the parameter and its value, the
    widget, the value used instead."""
    def line(value: str, used: str) -> str:
        return (f"The link's {name}={value} is not a value of *{md_escape(label)}* this page "
                f"offers: it shows {used} instead.")
    return line


def _write_param(name: str, text: str | None) -> None:
    if text is not None and not fits_in_link(text):
        text = None  # too long for a link: the value is kept in the session only
    current = st.query_params.get(name)
    if text is None:
        if current is not None:
            del st.query_params[name]
    elif current != text:
        st.query_params[name] = text
    st.session_state[_SEEN] = _url_params()


def _default_parser(default):
    if isinstance(default, bool):
        return _bool_from_url
    if isinstance(default, int):
        return int
    if isinstance(default, float):
        return float
    if isinstance(default, list):
        return lambda text: [int(v) if v.lstrip("-").isdigit() else v
                             for v in text.split(",") if v != ""]
    return clean_str


def _default_serializer(default):
    if isinstance(default, bool):
        return lambda v: "1" if v else "0"
    if isinstance(default, list):
        return lambda v: ",".join(str(x) for x in v)
    return str


def take_url_value(name: str) -> str | None:
    """The query parameter ``name`` of a link not written by us (a copied link, a reload, an
    edited URL), taken once: for a value kept without a widget (write_url_value writes it)."""
    incoming = st.session_state.get(_INCOMING) or {}
    return incoming.pop(name, None)


def incoming_value(name: str) -> str | None:
    """The value a link brings for ``name``, left for its widget to take when it is drawn."""
    return (st.session_state.get(_INCOMING) or {}).get(name)


def write_url_value(name: str, text: str | None) -> None:
    """Put a value kept without a widget in the URL (None: take it out)."""
    _write_param(name, text)


def set_value(name: str, value: Any) -> None:
    """Set a synced value from code (e.g. in a callback); the widget shows it on the next draw.
    It is newer than a link's value for the same name that no widget has taken yet (a link
    holding a cell whose section is folded, then a click on the map): that value is
    dropped, so the click wins."""
    st.session_state[_STATE + name] = value
    (st.session_state.get(_INCOMING) or {}).pop(name, None)
    link_notes.forget(name)


def get_value(name: str, default: Any = None) -> Any:
    """A synced value as last drawn (or ``default``)."""
    return st.session_state.get(_STATE + name, default)


PRESENT_MIN_WINDOW_PX = 640  # narrower windows (a phone) ignore presentation mode
_VIEWPORT = "_mv_viewport_size"  # the browser's sizes, as output._measure_viewport keeps them


def presenting() -> bool:
    """Presentation mode (the sidebar toggle, or ?present=1 in a link), on a wide screen: a
    phone opening a teacher's link keeps its own layout (large type would shrink its maps)."""
    window = (st.session_state.get(_VIEWPORT) or {}).get("window")
    if isinstance(window, int) and window < PRESENT_MIN_WINDOW_PX:
        return False
    incoming = (st.session_state.get(_INCOMING) or {}).get("present")
    if incoming is not None:
        try:
            return _bool_from_url(incoming)
        except ValueError:
            return False
    return bool(st.session_state.get(_STATE + "present", False))


def image_format() -> str:
    """"png" or "svg": the format the camera button saves (the sidebar's switch)."""
    fmt = get_value("img", "png")
    return fmt if fmt in IMAGE_FORMATS else "png"


@functools.cache
def browser_component(name: str, js: str):
    """A component that runs ``js`` (whose default export is ``function(component)``) in the
    page and reports back (st.components.v2), registered once per process, on first use:
    importing the ui must not need a running Streamlit.

    Its ``data`` (a dict) reaches the js as ``component.data``; it travels wrapped in a list,
    because Streamlit looks for dataframes among the values of a dict it is given, which
    imports pandas and pyarrow in the visitor's run: 0.3-0.5 s of a server's first page, in
    front of its first figure (mha_viz.server.startup imports pandas between runs)."""
    import streamlit.components.v2 as components

    own = "export default function(component)"
    if own not in js:
        raise ValueError(f"the js of {name} has no {own}")
    mount = components.component(name, js=js.replace(
        own, "const mvComponent = function(component)", 1) + _UNWRAPPED_DATA)

    def mounted(*, data: dict | None = None, **kwargs):
        return mount(data=None if data is None else [data], **kwargs)

    return mounted


# the js's own function, handed the component with its data out of the list it travels in
_UNWRAPPED_DATA = """
export default function(component) {
    const data = Array.isArray(component.data) ? component.data[0] : component.data;
    return mvComponent(new Proxy(component, {
        get: (target, key) => key === 'data' ? data : target[key]}));
}
"""
