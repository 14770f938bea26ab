"""What a page shows: its setup (title, styles, presentation mode), figures laid out for the
screen the browser reports, download buttons, the model card and notes about the trace."""

from __future__ import annotations

import re
import time
from typing import Callable

import numpy as np
import streamlit as st
from plotly.basedatatypes import BaseFigure

from .. import plots
from ..maps.trace import AttentionTrace
from ..models.model import MAX_TEXT_CHARS
from ..plots import fit
from ..server import export
from ..server.static_assets import VIEWPORT_COOKIE  # its name, also in _VIEWPORT_JS
from . import link_notes, narrow
from .selection import Selection
from .stores import figure_store, result_key
from .traces import cached_seq2seq_trace, cached_trace
from .settings import APP_NAME, CAVEAT, MAX_UPLOAD_BYTES, NUMBERING, md_escape, terms_in
from .gestures import taps_select
from .state import browser_component, image_format, presenting, synced, take_incoming_params

_PAGE_CSS = """
<style>
/* the heading anchors link to the page itself; they only add noise here */
[data-testid="stHeaderActionElements"] {display: none;}
/* the viewport reporter, the tap helper and the scroller draw nothing and take no room */
.st-key-_mv_viewport, .st-key-_mv_taps, [class*="st-key-_mv_scroll_"] {display: none;}
[class*="st-key-_mv_at_"] {scroll-margin-top: 4rem;}  /* what a click shows: below the header */
/* on a phone a folded section's figures get the column's whole width: the section's side
   padding would cut a map's plot area below 250 px */
@media (max-width: 640px) {
  [data-testid="stExpanderDetails"] {padding-left: 0; padding-right: 0;}
}
</style>
"""
# Presentation mode: everything Streamlit sizes in rem grows by a half (text, widgets,
# headings) and the page uses the whole width of the projector.
_PRESENT_CSS = """
<style>
html {font-size: 24px;}
[data-testid="stMainBlockContainer"] {max-width: none; padding: 4rem 2rem 1.5rem;  /* below the header (3.75rem) */
    --mv-present: 1;  /* the viewport reporter measures once this is in force */}
</style>
"""


def _through_app_navigation() -> None:
    """Make sure pages run under app.py's st.navigation. Until a script has called
    st.navigation, Streamlit (1.67) treats a pages/ folder the old way: a link straight to
    /Entropy runs that file alone and lists the pages by their file names ("app"). The first
    such run switches the old way off and runs again, through app.py."""
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # pragma: no cover - another Streamlit's layout
        return
    if getattr(PagesManager, "uses_pages_directory", False):
        PagesManager.uses_pages_directory = False
        if "_mv_run_start" not in st.session_state:  # a new session: no click to lose
            st.rerun()


def page_setup(title: str, intro: str | None = None) -> None:
    """First call of every page: page config, the query-parameter hand-over, the title."""
    _through_app_navigation()
    st.session_state["_mv_run_start"] = time.perf_counter()
    # "auto": open beside the page on a wide screen, closed on a phone, where an open
    # sidebar covers the whole page after every navigation
    take_incoming_params()
    st.set_page_config(page_title=f"{title} · {APP_NAME}", layout="wide",
                       initial_sidebar_state="collapsed" if presenting() else "auto")
    _measure_viewport()  # first: a phone's window, just reported, ignores presenting
    st.html(_PAGE_CSS + narrow.CSS + (_PRESENT_CSS if presenting() else ""))
    taps_select()
    narrow.fold_after_choosing()
    st.title(title)
    link_notes.place_notes()  # what a link asked for and did not get, one line each
    if intro:
        st.markdown(intro, help=terms_in(intro))


def caveat(where=None) -> None:
    """The "attention is not explanation" note."""
    (where or st).caption("⚠ " + CAVEAT)


# -------------------------------------------------------------------- figures


def show_figure(fig, key: str, *, on_select: Callable | None = None, width="stretch",
                selection_mode="points", alt: str | None = None, share: float = 1.0):
    """st.plotly_chart with the app's settings: no Streamlit theme, the PNG/SVG camera
    button, no network. on_select (a callback) makes the chart pickable. The figure's
    layout.meta records the run's input, which the browser tests and benchmark read.

    Once the browser has reported the page's width, the figure is laid out for it
    (mha_viz.plots.fit: square cells, numbers and labels only where they fit, presentation mode);
    ``share`` is the fraction of the page's width its column has on a wide screen (columns
    stack on a phone)."""
    fig, width = _laid_out(fig, figure_screen(share), st.session_state.get("_mv_meta"), width)
    return _chart(fig, key, width, on_select, selection_mode, alt)


def show_built(build: Callable, *args, key: str, on_select: Callable | None = None,
               selection_mode="points", alt: str | None = None, share: float = 1.0,
               **kwargs):
    """show_figure(build(*args, **kwargs), ...) with the figure built, laid out and turned into
    what st.plotly_chart sends once for every session that asks the same build for the same
    screen and input (a class opening a page on one text): kept in a store of figures, under
    the build's result_key, the screen and the run's input, and only read after."""
    screen, meta = figure_screen(share), st.session_state.get("_mv_meta")
    shared = f"{result_key(build, *args, **kwargs)}|{screen}|{sorted((meta or {}).items())}"
    def built():
        fig, width = _laid_out(build(*args, **kwargs), screen, meta, "stretch")
        return _SentFigure(fig), width
    fig, width = figure_store().get_or_compute(shared, built)
    return _chart(fig, key, width, on_select, selection_mode, alt)


class _SentFigure(BaseFigure):
    """A figure sent as it is to every session that shows it: the dict st.plotly_chart reads
    of it (to_dict, all Streamlit 1.67 reads) made once. A figure's own to_dict deep-copies it
    and writes its arrays as base64, for every session (the maps page's line view: 19 ms of
    the server's CPU a send). The dict is never changed after; BaseFigure's __init__ is not run."""

    def __init__(self, fig: BaseFigure):  # noqa: not BaseFigure's, on purpose (see above)
        self._as_dict = fig.to_dict()

    def to_dict(self) -> dict:
        return self._as_dict


def _laid_out(fig, screen: fit.Screen | None, meta: dict | None, width):
    """fig with the run's input in its layout.meta and, once the browser has reported its
    window, laid out for screen (changed in place) -> (fig, the width to draw it at)."""
    if meta is not None:
        fig.update_layout(meta={**(fig.layout.meta if isinstance(fig.layout.meta, dict)
                                   else {}), **meta})
    elif not isinstance(fig.layout.meta, dict):
        fig.layout.meta = {}
    if screen is not None and width == "stretch":
        fit.fit_figure(fig, screen)
        fig.layout.meta["fitted"] = screen.width  # the browser tests wait for this
        if fig.layout.width is not None:
            width = "content"
    return fig, width


def _chart(fig, key: str, width, on_select: Callable | None, selection_mode, alt):
    kwargs = {}
    if on_select is not None:
        kwargs.update(on_select=on_select, selection_mode=selection_mode)
    return st.plotly_chart(fig, theme=None, config=plots.FIGURE_CONFIG(image_format()),
                           key=key, width=width, alt=alt, **kwargs)


_VIEWPORT_KEY = "_mv_viewport"
# Reports the width of the page's main column and the window's height, rounded to 20 px so
# that small changes do not rerun the page; again when they change (a rotated phone, the
# sidebar opened). Runs in the page itself (st.components.v2), nothing is fetched.
_VIEWPORT_JS = """
export default function(component) {
    const { setStateValue, data } = component;
    const VIEWPORT_COOKIE = 'mha_viz_viewport';
    // the window's height matters only in presentation mode: elsewhere a phone's address
    // bar sliding away would rerun the page for nothing
    const present = !!(data && data.present);
    let last = JSON.stringify((data && data.known) || null), timer = null;
    const measure = () => {
        const main = document.querySelector('[data-testid="stMainBlockContainer"]');
        let width = window.innerWidth;
        if (main) {
            const style = getComputedStyle(main);
            width = main.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
        }
        const size = {width: Math.floor(width / 20) * 20,
                      height: present ? Math.floor(window.innerHeight / 20) * 20 : 0,
                      window: Math.floor(window.innerWidth / 20) * 20};
        const text = JSON.stringify(size);
        if (text !== last) { last = text; setStateValue('size', size); }
        // the next tab of this browser starts with it: its first run is already fitted
        document.cookie = `${VIEWPORT_COOKIE}=${size.width}x${size.height}x${size.window}; `
            + 'path=/; max-age=2592000; SameSite=Strict';
    };
    // The first measure waits for the layout to settle: in presentation mode for the page's
    // own CSS (sent after this reporter), which sets the main block's sides (2 s at most),
    // then as a resize does, until nothing has moved for 250 ms (the sidebar closing at
    // presentation mode's start slides). Measured in between, a passing width would rerun
    // the page for nothing (seen: four runs of a projector's page, on a busy machine).
    let styled = false, waited = 0, poll = null;
    const later = () => {
        if (!styled) return;
        clearTimeout(timer);
        timer = setTimeout(measure, 250);
    };
    const first = () => {
        const main = document.querySelector('[data-testid="stMainBlockContainer"]');
        styled = !present || waited >= 2000 || (!!main && getComputedStyle(main)
            .getPropertyValue('--mv-present').trim() === '1');
        if (styled) { later(); return; }
        waited += 50;
        poll = setTimeout(first, 50);
    };
    first();
    window.addEventListener('resize', later);
    const main = document.querySelector('[data-testid="stMainBlockContainer"]');
    const observer = main ? new ResizeObserver(later) : null;
    if (observer) observer.observe(main);
    return () => {
        window.removeEventListener('resize', later);
        if (observer) observer.disconnect();
        clearTimeout(timer);
        clearTimeout(poll);
    };
}
"""
STACKED_BELOW_PX = 640  # Streamlit stacks columns on windows narrower than this


def _measure_viewport() -> None:
    """Mount the (invisible) viewport reporter; called once per page run by page_setup."""
    known = st.session_state.get("_mv_viewport_size")
    if known is None:
        # A new session: the size this browser's last tab reported, so the first run
        # already lays the figures out (no second run once the reporter has measured).
        known = _size_from_cookie()
        if known is not None:
            st.session_state["_mv_viewport_size"] = known
    with st.sidebar:
        reporter = browser_component("mha_viz_viewport", _VIEWPORT_JS)
        result = reporter(key=_VIEWPORT_KEY, data={"known": known, "present": presenting()},
                          on_size_change=lambda: None)
    size = getattr(result, "size", None)
    if isinstance(size, dict):
        st.session_state["_mv_viewport_size"] = size


_COOKIE_SIZE = re.compile(r"(\d{1,5})x(\d{1,5})x(\d{1,5})")


def _size_from_cookie() -> dict | None:
    """{"width", "height", "window"} from the viewport cookie, or None. The cookie is the
    visitor's to write: anything but three small numbers is ignored."""
    try:
        text = st.context.cookies.get(VIEWPORT_COOKIE)
    except Exception:  # noqa: BLE001 - no request context (AppTest, a bare script run)
        return None
    if not isinstance(text, str):  # no cookie (None), or AppTest's stand-in context
        return None
    match = _COOKIE_SIZE.fullmatch(text)
    if match is None:
        return None
    width, height, window = (int(v) for v in match.groups())
    if not (100 <= width <= 10_000 and 0 <= height <= 10_000 and 100 <= window <= 10_000):
        return None
    return {"width": width, "height": height, "window": window}


def viewport() -> dict | None:
    """{"width": main column px, "height": window px, "window": window width px} as the
    browser last reported it, or None before it has (the first run, AppTest)."""
    size = st.session_state.get("_mv_viewport_size")
    try:
        return {k: int(size[k]) for k in ("width", "height", "window")}
    except (TypeError, KeyError, ValueError):
        return None


def figure_screen(share: float = 1.0) -> fit.Screen | None:
    """The Screen of a figure in a column of ``share`` of the width (a lesson: less high)."""
    size = viewport()
    if size is None or size["width"] < 100:
        return None
    reserved = st.session_state.get("_mv_reserved_px", 0)  # a lesson's own rows
    width, height = size["width"], size["height"] - reserved
    if share < 1.0 and size["window"] >= STACKED_BELOW_PX:
        width = int(width * share - 16)  # the columns' gap
    return fit.Screen(width=width, height=max(height, 200) if size["height"] else None,
                      present=presenting(), fill=bool(reserved))


def narrow_screen() -> bool:
    """Whether the page is read on a phone (narrower than fit.NARROW_PX)."""
    screen = figure_screen()
    return screen is not None and screen.width < fit.NARROW_PX


def figure_columns(spec, **kwargs) -> list:
    """st.columns for figures side by side; in presentation mode they stack, each the whole
    width (a projector's map must be legible from the back). Pass each figure's show_figure
    share=column_share(...)."""
    n = spec if isinstance(spec, int) else len(spec)
    if presenting():
        return [st.container() for _ in range(n)]
    return st.columns(spec, **kwargs)


def section_open_key(key: str) -> str:
    """The session-state entry that says whether the folded section ``key`` is open (set it
    True in a callback to open the section on the next run)."""
    return f"_mv_open_{key}"


def _link_opens(key: str) -> bool:
    """Whether the link's ?open= names the section ``key`` (or all)."""
    wanted = str(st.query_params.get("open", ""))[:200].split(",")
    return "all" in wanted or key in wanted


def section_opens(key: str, expanded: bool = False) -> bool:
    """Whether drawn_when_opened(..., key, expanded=expanded) draws its content in this run,
    asked before it is drawn (a figure above it marks what the section explains)."""
    state = st.session_state.get(section_open_key(key))
    if state is not None:
        return bool(state)
    return expanded or _link_opens(key)


def drawn_when_opened(label: str, key: str, draw: Callable[[], None],
                      expanded: bool = False) -> bool:
    """A folded section whose content is computed and drawn only while it is open (opening
    it reruns the page): a page opens with the figures a reader looks at first, and the rest
    costs nothing until asked for (each Plotly figure is ~0.1-0.2 s of the browser's time).
    Stays open across reruns and pages of the session. A link opens sections with
    ``?open=all`` or ``?open=<key>,<key>`` (to print a whole page, or to share one section).
    -> whether it was drawn."""
    expanded = expanded or _link_opens(key)
    section = st.expander(label, expanded=expanded, key=section_open_key(key),
                          on_change="rerun")
    if not section.open:
        return False
    with section:
        draw()
    return True


GRID_LAYERS_PRESENTING = 4  # a projector's model view: this many layers at a time
GRID_CELL_PX_PRESENTING = 110  # ... with thumbnails this large


def layer_window(n_layer: int, layer: int) -> tuple[int, int]:
    """The layers the model view shows: all of them, or on a projector a few at a time (a
    slider picks which; it opens on those around the chosen head). -> (first, stop)."""
    if not presenting() or n_layer <= GRID_LAYERS_PRESENTING:
        return 0, n_layer
    size = GRID_LAYERS_PRESENTING
    starts = list(range(0, n_layer, size))
    first = synced(st.select_slider, "glayers", "Layers shown", starts[min(layer // size,
                                                                            len(starts) - 1)],
                   options=starts, valid=lambda v: int(v) in starts,
                   format_func=lambda v: f"L{v}–L{min(v + size, n_layer) - 1}",
                   help="On a projector the grid shows a few layers at a time, so each "
                        "thumbnail is large enough to see and to click.")
    return int(first), min(int(first) + size, n_layer)


def column_share(share: float) -> float:
    """The share of the width a figure in figure_columns gets: all of it when presenting."""
    return 1.0 if presenting() else share


# ------------------------------------------------------------------ downloads


def download_bytes(data: bytes | Callable[[], bytes], file_name: str, label: str,
                   mime: str = "application/octet-stream", key: str | None = None,
                   help: str | None = None, where=None) -> None:
    """A download button; pass a callable to build big files only when clicked."""
    (where or st).download_button(label, data=data, file_name=file_name, mime=mime,
                                  key=key or f"_mv_dl_{file_name}", help=help,
                                  on_click="ignore")


def download_csv(data: bytes | Callable[[], bytes], file_name: str, label: str = "CSV",
                 key: str | None = None, help: str | None = None, where=None) -> None:
    """A CSV download button (data: bytes, or a callable returning them, see mha_viz.server.export)."""
    download_bytes(data, file_name, f"⬇ {label}", "text/csv", key, help, where)


def download_trace(selection: Selection, trace: AttentionTrace, where=None) -> None:
    """The whole trace as .npz (AttentionTrace.load reads it back).

    The bytes are made on the click, from the trace looked up again by the selection: a
    closure over ``trace`` would keep it alive as long as Streamlit keeps the session (two
    minutes after the tab closes), past the memory budget's eviction."""
    weights = "value" if trace.value_weighted else "attention"  # a string: no closure

    def trace_again() -> bytes:
        if selection.uploaded is not None:
            return export.trace_npz(selection.uploaded)
        if selection.kind is not None:  # an encoder-decoder's stack, as the page shows it
            return export.trace_npz(cached_seq2seq_trace(
                selection.model_name, selection.text, selection.target).as_trace(selection.kind))
        return export.trace_npz(cached_trace(selection.model_name, selection.text,
                                             selection.text_pair, selection.max_tokens,
                                             weights=weights))

    where = where or st
    # A long input's file holds each layer's queries and keys, which rebuild its maps.
    size = trace.saved_bytes()
    if size > MAX_UPLOAD_BYTES:
        where.caption(f"The trace of this input would be a {size / 2**20:,.0f} MB file: too "
                      f"big to download here (or to open again). From Python, "
                      f"`model.trace(text).save(path)` writes it.")
        return
    download_bytes(trace_again, f"{selection.file_stem}_trace.npz",
                   "⬇ Trace (.npz)", key="_mv_dl_trace",
                   help="Every head's attention (for a long input: each layer's queries and "
                        "keys, which rebuild it), the tokens and the metadata; "
                        "mha_viz.AttentionTrace.load() reads it back.", where=where)


# ------------------------------------------------- trace notes


def trace_notes(trace: AttentionTrace) -> None:
    """Token count, and a warning when the text was cut to the context / max tokens."""
    given = trace.n_chars_given
    if given is not None:  # the length the visitor sent, not of what was read
        st.warning(f"The text has {given:,} characters; only the first {MAX_TEXT_CHARS:,} are "
                   f"read, and the first {trace.n_tokens:,} tokens of those are traced (the "
                   f"model's context or the *Max tokens* option in the sidebar).")
    elif trace.truncated:
        st.warning(f"The text has {trace.n_tokens_before_truncation:,} tokens; only the first "
                   f"{trace.n_tokens:,} are traced (the model's context or the *Max tokens* "
                   f"option in the sidebar).")
    pair = " (sentence pair)" if trace.is_pair else ""
    stack = {"encoder": "Encoder self-attention over the source: ",
             "decoder": "Decoder self-attention over the target (the decoder's input: the "
                        "start token, then the target but its last token): "}.get(
        trace.attention_kind, "")
    st.caption(f"{stack}{trace.n_tokens} tokens{pair} · {trace.n_layer} layers × "
               f"{trace.n_head} heads · {NUMBERING}")


def kv_sharing_note(trace: AttentionTrace, head: int | None = None) -> str | None:
    """Which query heads share keys and values (grouped- or multi-query attention), in words:
    for every group, or for one head's group. None when every head has its own."""
    if trace.n_kv_heads == trace.n_head:
        return None
    if head is not None:
        others = [f"H{h}" for h in trace.heads_sharing_kv(head) if h != head]
        return (f"H{head} shares its keys and values with {', '.join(others)} (key/value head "
                f"{trace.kv_heads[head]}): the same K and V, its own queries and map.")
    groups = {}
    for h, kv in enumerate(trace.kv_heads):
        groups.setdefault(kv, []).append(h)
    spans = "; ".join(f"H{hs[0]}–H{hs[-1]}" if hs == list(range(hs[0], hs[-1] + 1))
                      else ", ".join(f"H{h}" for h in hs) for hs in groups.values())
    kind = "multi-query" if trace.n_kv_heads == 1 else "grouped-query"
    return (f"{kind.capitalize()} attention: {trace.n_head} query heads read {trace.n_kv_heads} "
            f"key/value head(s); these share one each: {spans}.")


def long_input_note(trace: AttentionTrace) -> None:
    """Say that a long input's maps are computed when looked at: the store keeps them whole
    only while they fit the budget's share for one input (Model.maps_kind "budget")."""
    from ..core import budget

    if budget.maps_fit(trace.n_layer, trace.n_head, trace.n_tokens):
        return
    st.info(f"Long input ({trace.n_tokens:,} tokens): the maps are computed when you look at "
            f"them, a block of rows at a time, so the server's memory grows with the length, "
            f"not its square.")


def one_pass_is_quick(trace: AttentionTrace) -> bool:
    """Whether a view that reads every map once (the grid) may run without a click."""
    from ..core import budget

    return budget.one_pass_is_quick(trace.n_layer, trace.n_head, trace.n_tokens)


def too_long_for(what: str, n_tokens: int, bytes_per_squared_token: float,
                 max_tokens_helps: bool = True) -> str | None:
    """Why a view is not computed for this input (budget.too_long: what it would hold does
    not fit the server's share for one input), with what to do; None when it fits."""
    from ..core import budget

    refused = budget.too_long(what, n_tokens, bytes_per_squared_token)
    if refused is None:
        return None
    return refused + (" Set *Max tokens* in the sidebar to that or fewer." if max_tokens_helps
                      else " Shorten the text to that many tokens.")


def hidden_note(trace: AttentionTrace, keep: np.ndarray | None) -> None:
    if keep is None:
        return
    hidden = [f"{i} {trace.display_tokens[i]}" for i in np.flatnonzero(~keep)]
    shown = ", ".join(hidden[:6]) + (" …" if len(hidden) > 6 else "")
    st.info(f"Hidden {len(hidden)} token(s) ({md_escape(shown)}). Every row is renormalized "
            f"to sum to 1 over the tokens still shown, so the weights are not the model's raw "
            f"weights.")
