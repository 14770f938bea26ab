"""What a narrow screen (a phone, a narrow window) needs that Streamlit does not do by itself:
the folded sidebar's button says what the sidebar holds (the home page names it in those
words), and the sidebar folds once a page is chosen in it, so that the page chosen is what one
sees. Streamlit folds it only for a phone's user agent: not in a narrow desktop window, and not
on a tablet that reports a desktop one."""

from __future__ import annotations

import streamlit as st

from .state import browser_component

SIDEBAR_BUTTON = "Model and text"  # beside the » that opens the folded sidebar
OVERLAY_UP_TO_PX = 768  # Streamlit's sidebar covers the page up to this window width

CSS = f"""<style>
[data-testid="stExpandSidebarButton"] {{width: auto;}}
[data-testid="stExpandSidebarButton"]::after {{content: "{SIDEBAR_BUTTON}"; margin-left: 0.2rem;
  font-size: 0.95rem; font-weight: 600; white-space: nowrap; color: rgba(49, 51, 63, 0.85);}}
.st-key-_mv_fold {{display: none;}}
</style>"""

# Runs in the page itself (st.components.v2), once per tab: a click (or tap) on a page link in
# the sidebar, where the sidebar covers the page, folds it once the page has been chosen.
_FOLD_JS = """
export default function(component) {
    const { data } = component;
    if (window.__mvFoldsSidebar) return;
    window.__mvFoldsSidebar = true;
    const upTo = (data && data.upTo) || 768;
    document.addEventListener('click', (event) => {
        const link = event.target && event.target.closest
            && event.target.closest('[data-testid="stSidebarNav"] a');
        if (!link || window.innerWidth > upTo) return;
        setTimeout(() => {
            const fold = document.querySelector(
                '[data-testid="stSidebarCollapseButton"] button');
            if (fold) fold.click();
        }, 0);
    }, true);
}
"""


def fold_after_choosing() -> None:
    """Mount the (invisible) folding of the sidebar; every page run, from page_setup."""
    with st.sidebar:
        browser_component("mha_viz_fold_sidebar", _FOLD_JS)(
            key="_mv_fold", data={"upTo": OVERLAY_UP_TO_PX})
