"""What the page does in the browser beyond what Streamlit does: one tap on a figure picks
its point (a touch screen has no hover), and the page scrolls to what a click changed when
that is drawn further down."""

from __future__ import annotations

import streamlit as st

from .state import browser_component

# A touch screen has no hover: Plotly takes a tap for a hover and only the next tap on the
# same point for a click, so picking a head took two taps (issue 51). A touch on a plot is
# first announced to it as the pointer arriving there, and the tap then clicks at once.
_TAPS_JS = """
export default function(component) {
    const onTouch = (event) => {
        if (event.touches.length !== 1 || !event.target.closest) return;
        const area = event.target.closest('.js-plotly-plot .nsewdrag');
        if (!area) return;
        const touch = event.touches[0];
        area.dispatchEvent(new MouseEvent('mousemove', {clientX: touch.clientX,
            clientY: touch.clientY, bubbles: true}));
    };
    document.addEventListener('touchstart', onTouch, {capture: true, passive: true});
    return () => document.removeEventListener('touchstart', onTouch, {capture: true});
}
"""


def taps_select() -> None:
    """Mount the (invisible) helper that makes one tap pick a point of a figure."""
    with st.sidebar:
        browser_component("mha_viz_taps", _TAPS_JS)(key="_mv_taps")


# Scrolls the page (Streamlit's main area scrolls in its own container) to an anchor once,
# a few times over the next second: figures above it may still change height as they draw.
_SCROLL_JS = """
export default function(component) {
    const target = component.data && component.data.target;
    const go = () => {
        const found = target && document.querySelector(target);
        if (found) found.scrollIntoView({block: 'start'});
    };
    const timers = [0, 300, 900].map(ms => setTimeout(go, ms));
    return () => timers.forEach(clearTimeout);
}
"""
_SCROLL = "_mv_scroll_to"


def ask_scroll(anchor: str) -> None:
    """After this run, bring scroll_anchor(anchor) into view (call it from a callback: a
    thumbnail tapped, a cell clicked, whose result is drawn further down)."""
    st.session_state[_SCROLL] = anchor


def scroll_anchor(anchor: str):
    """A container that ask_scroll(anchor) brings to the top of the screen once: draw what
    the click changed (its heading) in it, ``with ui.scroll_anchor("one_head"): ...``."""
    place = st.container(key=f"_mv_at_{anchor}")
    if st.session_state.get(_SCROLL) == anchor:
        del st.session_state[_SCROLL]
        count = st.session_state["_mv_scrolls"] = st.session_state.get("_mv_scrolls", 0) + 1
        browser_component("mha_viz_scroll", _SCROLL_JS)(
            key=f"_mv_scroll_{count}", data={"target": f".st-key-_mv_at_{anchor}"})
    return place
