"""Lesson mode: one step of a page per screen, for a class. A progress line, Back and Next,
the arrow keys (and a presenter's clicker, which sends Page Up / Page Down), and the step in
the URL (?lesson=1&lstep=4), so a teacher can prepare a lesson as links."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from urllib.parse import urlencode

import streamlit as st

from .output import drawn_when_opened
from .state import browser_component, get_value, presenting, set_value, synced

STEP = "lstep"
LEAVE_HELP = "Leave the lesson: the whole page, every step in order"  # the URL's name of the step ("step" is the pruning curve's)
# Runs in the page itself (st.components.v2): a key moves the lesson unless the reader is
# typing or working a widget that uses the arrow keys itself.
_KEYS_JS = """
export default function(component) {
    const { setTriggerValue } = component;
    const OWN_KEYS = ['slider', 'spinbutton', 'combobox', 'listbox', 'option', 'radio', 'tab',
                      'textbox', 'menu', 'menuitem', 'grid'];
    const busy = (el) => !!el && (el.isContentEditable
        || ['INPUT', 'TEXTAREA', 'SELECT'].includes(el.tagName)
        || OWN_KEYS.includes(el.getAttribute('role')));
    const MOVES = {ArrowRight: 1, PageDown: 1, ArrowLeft: -1, PageUp: -1};
    const onKey = (event) => {
        if (!(event.key in MOVES) || event.altKey || event.ctrlKey || event.metaKey
                || event.shiftKey || busy(document.activeElement)) return;
        event.preventDefault();
        setTriggerValue('move', MOVES[event.key]);
    };
    document.addEventListener('keydown', onKey);
    return () => document.removeEventListener('keydown', onKey);
}
"""
# A lesson's screen belongs to its step: the page's title and the lesson switch give their
# rows to it (the progress line names the step; the sidebar leaves the lesson), its text is
# set a little smaller than the page's, and the step's heading sits tight.
_LESSON_CSS = """<style>
[data-testid="stMainBlockContainer"] h1, .st-key-_mv_w_lesson {display: none;}
[data-testid="stElementContainer"]:has(> [data-testid="stHeading"] h1) {display: none;}
.st-key-_mv_lesson_keys {display: none;}
.st-key-_mv_lesson_back button, .st-key-_mv_lesson_next button {min-height: 2rem;}
[data-testid="stLayoutWrapper"]:has(.st-key-_mv_lesson_back) {margin-bottom: -0.75rem;}
[data-testid="stMainBlockContainer"] {padding-bottom: 0.5rem !important;}
.st-key-_mv_lesson_text [data-testid="stMarkdownContainer"] p,
.st-key-_mv_lesson_text [data-testid="stMarkdownContainer"] li {font-size: 0.8rem !important;}
.st-key-_mv_lesson_text h4 {font-size: 1.1rem !important; padding-top: 0 !important;}
.st-key-_mv_lesson_text [data-testid="stCaptionContainer"] {font-size: 0.7rem !important;}
</style>"""
# The height a lesson's screen keeps for its own rows: the header, the progress line, the
# margins (at 1280x720 presenting: the header to 96 px, the progress row to 156, the step
# from 162, 12 px under it, 4 to spare). Figures are laid out for what is left
# (output.figure_screen).
LESSON_CHROME_PX = 178
FIGURE_SHARE = 0.6  # the figures' column of a step beside its words (st.columns([2, 3]))
_RESERVED = "_mv_reserved_px"  # read by output.figure_screen
_PLACES = "_mv_lesson_places"  # this run's (text, figures) columns of a lesson's step


def _arrow_keys() -> int:
    """+1 or -1 when the reader pressed a key that moves the lesson since the last run."""
    with st.sidebar:
        keys = browser_component("mha_viz_lesson_keys", _KEYS_JS)
        result = keys(key="_mv_lesson_keys", on_move_change=lambda: None)
    move = getattr(result, "move", None)
    return int(move) if move in (1, -1) else 0


def lesson_step(titles: list[str]) -> int:
    """Draw the lesson's navigation for steps with these titles; -> the step to show (from 1)."""
    n = len(titles)
    st.html(_LESSON_CSS)
    move = _arrow_keys()
    if move:
        set_value(STEP, min(max(int(get_value(STEP, 1) or 1) + move, 1), n))
    with st.sidebar:  # jumping to a step is for the teacher; the row below is for the class
        current = synced(st.selectbox, STEP, "Lesson step", 1, options=list(range(1, n + 1)),
                         format_func=lambda k: f"{k}. {titles[k - 1]}")
    # the way out stays in sight: a folded sidebar (a projector's) would hide it
    back, progress, forward, leave = st.columns([1, 4, 1, 0.5], vertical_alignment="center")
    leave.button("✕", key="_mv_lesson_leave", help=LEAVE_HELP, type="tertiary",
                 on_click=set_value, args=("lesson", False))
    progress.progress(current / n, text=f"Step {current} of {n}: {titles[current - 1]}")
    back.button("← Back", key="_mv_lesson_back", disabled=current == 1, width="stretch",
                on_click=set_value, args=(STEP, current - 1))
    forward.button("Next →", key="_mv_lesson_next", disabled=current == n, width="stretch",
                   on_click=set_value, args=(STEP, current + 1), type="primary")
    return current


def lesson_in_new_tab(label: str, page: str, params: dict[str, str]) -> None:
    """A button that opens another lesson (page: its URL path, "Inside_One_Head") in a tab
    of its own: a new session, so this one's model, text and settings stay as they are and
    closing the tab returns to them (a page link in this tab would replace them). A
    projector's lesson opens presenting too."""
    query = {**params, "lesson": "1", **({"present": "1"} if presenting() else {})}
    st.link_button(label, f"{page}?{urlencode(query)}", icon="↗")


@contextlib.contextmanager
def room_taken(px: int):
    """Figures laid out inside it leave px of the lesson's screen to what stands above them
    (output.figure_screen reads the reserve)."""
    reserved = int(st.session_state.get(_RESERVED) or 0)
    if reserved:
        st.session_state[_RESERVED] = reserved + int(px)
    try:
        yield
    finally:
        if reserved:
            st.session_state[_RESERVED] = reserved


def figure_place():
    """Where a lesson step's figures go: the column beside its text (show_steps); on the
    whole page, and in a step of words alone, where the step is drawn."""
    places = st.session_state.get(_PLACES)
    return places[1] if places else contextlib.nullcontext()


def on_lesson_screen() -> bool:
    """Whether a lesson's step with figures is being drawn (its figures stand alone)."""
    return bool(st.session_state.get(_PLACES))


def show_steps(steps: list[tuple[str, str, bool]], draw: dict[str, Callable[[], None]],
               lesson: bool, words_only: frozenset = frozenset()) -> None:
    """A page's steps (title, key, folded), each drawn by draw[key]: in a lesson one per screen
    (the page stops after it), its words in a column beside its figures (figure_place) unless
    its key is in words_only, and its figures laid out for the height the screen has left;
    else all in order, a folded one computed and drawn when opened (drawn_when_opened, under
    its key)."""
    if lesson:
        number = lesson_step([title for title, _, _ in steps])
        key = steps[number - 1][1]
        try:
            st.session_state[_RESERVED] = LESSON_CHROME_PX
            if key in words_only:
                with st.container(key="_mv_lesson_text"):
                    draw[key]()
            else:
                text, figures = st.columns([1 - FIGURE_SHARE, FIGURE_SHARE], gap="medium")
                st.session_state[_PLACES] = (text, figures)
                with text.container(key="_mv_lesson_text"):
                    draw[key]()
        finally:  # the next page's figures have the whole screen
            st.session_state[_PLACES] = None
            st.session_state[_RESERVED] = 0
        st.stop()
    for title, key, folded in steps:
        if folded:
            drawn_when_opened(title, key, draw[key])
        else:
            draw[key]()
