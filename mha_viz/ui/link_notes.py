"""What a link asked for and did not get: every query parameter a page refuses (a value no
widget offers, a number out of range, a text longer than a link is read) gets one line at
the top of the page, saying what was refused and what the page uses instead. A line stays
while the page is the one the link opened (reruns, clicks) and goes when the person changes
that value or opens another page.

A link's values are hostile input: a line shows a refused value cut short and escaped."""

from __future__ import annotations

import streamlit as st
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from .settings import md_escape

_NOTES = "_mv_link_notes"  # {"page": the page's script hash, "lines": {name: line}}
_PLACE = "_mv_link_notes_place"  # this run's container at the top of the page
SHOWN_CHARS = 40  # of a refused value


def _page() -> str:
    ctx = get_script_run_ctx()
    return getattr(ctx, "page_script_hash", "") if ctx is not None else ""


def _notes() -> dict[str, str]:
    stored = st.session_state.get(_NOTES)
    if not stored or stored.get("page") != _page():
        stored = st.session_state[_NOTES] = {"page": _page(), "lines": {}}
    return stored["lines"]


def shown_value(raw: object) -> str:
    """A link's value as a line may show it: cut to SHOWN_CHARS characters, escaped."""
    text = str(raw)
    if len(text) > SHOWN_CHARS:
        text = text[:SHOWN_CHARS] + f"… ({len(str(raw)):,} characters)"
    return md_escape(text)


def place_notes() -> None:
    """Draw the lines kept for this page where page_setup calls it (under the title); a
    line refused later in this run joins them there."""
    place = st.container(key="_mv_link_notes")
    st.session_state[_PLACE] = (st.session_state.get("_mv_run_start"), place)
    for line in _notes().values():
        place.info(line, icon="🔗")


def refuse(name: str, line: str) -> None:
    """One line about the link's value of ``name``: what was refused and what is used
    instead (written by the caller, the value shown through shown_value)."""
    lines = _notes()
    if lines.get(name) == line:
        return
    lines[name] = line
    run, place = st.session_state.get(_PLACE) or (None, None)
    if place is not None and run == st.session_state.get("_mv_run_start"):  # this run's
        place.info(line, icon="🔗")


def forget(name: str) -> None:
    """The person changed ``name`` themselves: the line about the link's value goes."""
    stored = st.session_state.get(_NOTES)
    if stored:
        stored["lines"].pop(name, None)
