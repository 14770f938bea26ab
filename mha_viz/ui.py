"""Shared Streamlit pieces for every page of the app (the only mha_viz module importing streamlit).

A page is a thin script: widgets and calls into the library. The pattern::

    import streamlit as st
    from mha_viz import analysis as A, plots, ui

    ui.page_setup("Head similarity", "One sentence on what this page shows.")
    selection = ui.sidebar()                  # model, text(s), options; shared by all pages
    with ui.guard():                          # MhaVizError -> st.error, anything else -> a
        trace = ui.get_trace(selection)       #   generic message (traceback in the log)
        layer, head = ui.head_picker(trace)   # shared "layer"/"head" choice, kept in the URL
        values = ui.memo(A.entropy, trace.attentions, key=selection.key, causal=trace.causal)
        ui.show_figure(plots.layer_head_heatmap(values, "Entropy", "nats"), key="ent")
        ui.download_csv(lambda: export.layer_head_csv(values, "entropy"), "entropy.csv")

What lives here:

- ``page_setup(title, intro)``: first call of every page: page config, the title, and the
  hand-over of the URL's query parameters to the widgets.
- ``sidebar() -> Selection``: page links (every pages/*.py, found by file name), the model
  picker (the bundled smollm2 by default, see default_model(); hub ids, a local folder), the text, sentence B for BERT,
  example texts, max tokens, the PNG/SVG switch and the attention caveat. Everything is kept
  across pages and in the URL. ``Selection.model`` is the loaded Model (or None and
  ``Selection.model_error``); ``Selection.key`` identifies the input.
- ``get_model(name)`` (cached, raises MhaVizError), ``get_trace(selection)`` (cached per
  (model, text, pair, max_tokens); shows the error and stops the page on bad input).
- ``synced(widget, name, label, default, ...)``: any widget whose value survives page
  switches and lives in the URL's query parameter ``name``; ``set_value``/``get_value``
  change/read it from code (e.g. in a callback). Draw each synced name once per page.
- ``head_picker(trace)`` (shared "layer"/"head"), ``hide_special_toggle(trace)`` (keep mask),
  ``shown_maps(selection, trace, keep)`` (maps with hidden tokens removed, rows
  renormalised), ``hidden_note``, ``trace_notes`` (token count, truncation warning).
- ``memo(fn, *arrays, key=..., **options)``: cache an analysis result per input (fn must be a
  named function, not a lambda: it is identified by its qualified name).
- ``show_figure(fig, key, on_select=None)``: st.plotly_chart with the app's config.
- ``download_csv``, ``download_bytes``, ``download_trace``: download buttons (pass a callable
  to build big files only when clicked); ``image_format()``: "png" or "svg".
- ``guard()`` around a page body, ``callback(fn)`` around widget callbacks, ``show_error``.
- ``model_card``, ``caveat``, ``md_escape`` (text into markdown as itself), ``NUMBERING``.

Cached objects (models, traces, memo results) are shared between sessions: never mutate them.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

import numpy as np
import streamlit as st

from . import budget, checkpoints, export, fit, jobs, plots
from .errors import (CheckpointNotFoundError, InputError, LoadError, MhaVizError,
                     NotAllowedError, OfflineError)
from .model import ForwardRun, Model, TargetMetric, load_model
from .trace import AttentionTrace

log = logging.getLogger("mha_viz.ui")

# --------------------------------------------------------------------------- settings

APP_NAME = "mha-viz"
DEFAULT_MODEL = "smollm2"  # a real causal LM: the first minute shows predictions


def default_model() -> str:
    """The model a visitor starts with: MHA_VIZ_DEFAULT_MODEL when it names a bundled model
    or a hub suggestion (a classroom may prefer MiniLM), else SmolLM2."""
    chosen = os.environ.get("MHA_VIZ_DEFAULT_MODEL", "").strip().lower()
    return chosen if chosen in MODEL_CHOICES and chosen != FOLDER_CHOICE else DEFAULT_MODEL

FOLDER_CHOICE = "folder"  # the model picker's "local checkpoint folder" entry
MODEL_CHOICES = [*checkpoints.BUNDLED, *checkpoints.HUB_SUGGESTIONS, FOLDER_CHOICE]
MODEL_LABELS = {
    "minilm": "MiniLM (bundled, offline)",
    "smollm2": "SmolLM2-135M (bundled, causal LM)",
    "gpt2": "gpt2: GPT-2 small (hub)",
    "distilgpt2": "distilgpt2 (hub)",
    "gpt2-medium": "gpt2-medium (hub)",
    "bert-base-uncased": "bert-base-uncased (hub)",
    "bert-base-cased": "bert-base-cased (hub)",
    FOLDER_CHOICE: "A local checkpoint folder…",
}

EXAMPLES = {
    "coreference": {
        "label": "Coreference: it → animal?",
        "help": "Which word does 'it' attend to? Look for heads linking 'it' to 'animal'.",
        "text": "The animal didn't cross the street because it was too tired.",
        "pair": "",
    },
    "induction": {
        "label": "Repeated text (induction)",
        "help": "A sequence seen twice: induction heads attend from a token to the token "
                "that followed its previous occurrence (clearest in causal models: SmolLM2, "
                "GPT-2).",
        "text": ("Mr and Mrs Dursley of number four Privet Drive were proud to say that they "
                 "were perfectly normal. Mr and Mrs Dursley of number four Privet Drive were "
                 "proud to say that they were perfectly normal."),
        "pair": "",
    },
    "ioi": {
        "label": "Indirect object (IOI)",
        "help": "Who gets the drink? A causal model should predict ' Mary', the indirect "
                "object (Wang et al. 2023). See the Predictions page: target ' Mary', "
                "contrast ' John'.",
        "text": "When Mary and John went to the store, John gave a drink to",
        "pair": "",
    },
    "pair": {
        "label": "Sentence pair (BERT)",
        "help": "A question and an answer as BERT's sentences A and B ([SEP] between them). "
                "A causal model reads them as one text.",
        "text": "Where did the cat sleep last night?",
        "pair": "The cat slept on the warm mat by the kitchen door.",
    },
}
DEFAULT_TEXT = EXAMPLES["coreference"]["text"]

# Traces grow as L * H * T^2 floats (gpt2-medium at 1024 tokens: 1.6 GB), so by default a
# trace stops at 512 tokens; the sidebar lets a user go up to the model's context.
DEFAULT_MAX_TOKENS = 512
URL_MAX_CHARS = 4000  # longer texts are not copied into the URL (browsers and proxies cut it)
IMAGE_FORMATS = ("png", "svg")

CAVEAT = ("Attention weights show where each token reads information from, not why the model "
          "made a prediction (Jain & Wallace 2019, *Attention is not Explanation*; Wiegreffe & "
          "Pinter 2019). Read the maps as hypotheses to test, e.g. with head ablation.")
NUMBERING = "Layers and heads count from 0: L5.H1 = layer 5, head 1, counted from 0."


def _configure_torch() -> None:
    """One intra-op thread per request by default: a web server runs many sessions at once,
    and OpenMP threads spinning against each other on a shared machine made a 30-token trace
    ~20x slower. MHA_VIZ_TORCH_THREADS overrides."""
    try:
        import torch

        torch.set_num_threads(max(1, int(os.environ.get("MHA_VIZ_TORCH_THREADS", "1"))))
    except (ImportError, ValueError):  # pragma: no cover
        pass


_configure_torch()

# --------------------------------------------------------------------------- text helpers

_MD_SPECIAL = "\\`*_[]|$<>~"


def md_escape(text: object) -> str:
    """Text shown inside st.markdown/st.error as itself: no emphasis, links, LaTeX or HTML.
    (For text inside a line; a line starting with "- " or "1." would still become a list.)"""
    return "".join("\\" + c if c in _MD_SPECIAL else c for c in str(text))


def _clean_str(text: object) -> str:
    """Lone surrogates (broken copy-paste) cannot travel to the browser: make them U+FFFD."""
    return str(text).encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _sentence(message: str) -> str:
    message = str(message).strip()
    return message[:1].upper() + message[1:] if message else message


# --------------------------------------------------------------------------- state + URL

_STATE = "_mv_state_"  # persisted values (plain session_state keys, survive page switches)
_WIDGET = "_mv_w_"  # widget keys (Streamlit forgets these when the page changes)
_INCOMING = "_mv_incoming"  # query parameters from a URL not written by us, not yet used
_SEEN = "_mv_seen"  # the query parameters as we last wrote them


def _url_params() -> dict[str, str]:
    return {k: str(v) for k, v in st.query_params.to_dict().items()}


def _take_incoming_params() -> None:
    """Called once per run: query parameters we did not write ourselves (a copied link, a
    reload, an edited URL) are applied to the widgets as they are drawn."""
    params = _url_params()
    if params and params != st.session_state.get(_SEEN):
        st.session_state[_INCOMING] = params
    st.session_state[_SEEN] = params


def _copy_widget_to_state(name: str) -> None:  # a callback: cannot fail
    st.session_state[_STATE + name] = st.session_state[_WIDGET + name]


def _bool_from_url(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(text)


def synced(widget: Callable, name: str, label: str, default: Any, *,
           options: Sequence | None = None, valid: Callable[[Any], bool] | None = None,
           parse: Callable[[str], Any] | None = None, to_url: Callable[[Any], str] | None = None,
           url: bool = True, **kwargs) -> Any:
    """Draw ``widget`` (st.selectbox, st.sidebar.toggle, ...) with a value that survives page
    switches and is mirrored in the URL's query parameter ``name``; return its value.

    default: the value when neither the session nor the URL has one (not in the URL).
    options: for selectbox/radio/multiselect; a remembered value no longer among them (e.g.
        layer 11 after switching to a 6-layer model) falls back to ``default``.
    valid: extra check of a remembered or URL value; invalid ones fall back to ``default``.
    parse / to_url: str <-> value for the URL (by default from the type of ``default``:
        bool "1"/"0", int, float, list "a,b", str).
    url: False keeps the value across pages but out of the URL.
    Other keyword arguments go to the widget (help, format_func, min_value, ...). Do not pass
    value/index/default: the remembered value is the widget's value.
    """
    state_key, widget_key = _STATE + name, _WIDGET + name
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
    if url and name in incoming:
        raw = incoming.pop(name)
        try:
            value = parse(raw)
            if ok(value):
                st.session_state[state_key] = value
        except (ValueError, TypeError):
            log.info("ignoring query parameter %s=%r", name, raw)
    value = st.session_state.get(state_key, default)
    if isinstance(value, str):
        value = _clean_str(value)
    if not ok(value):
        value = default
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


def _write_param(name: str, text: str | None) -> None:
    if text is not None and len(text) > URL_MAX_CHARS:
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
    return _clean_str


def _default_serializer(default):
    if isinstance(default, bool):
        return lambda v: "1" if v else "0"
    if isinstance(default, list):
        return lambda v: ",".join(str(x) for x in v)
    return str


def set_value(name: str, value: Any) -> None:
    """Set a synced value from code (e.g. in a callback); the widget shows it on the next draw."""
    st.session_state[_STATE + name] = value


def get_value(name: str, default: Any = None) -> Any:
    """A synced value as last drawn (or ``default``)."""
    return st.session_state.get(_STATE + name, default)


# --------------------------------------------------------------------------- page

_PAGE_CSS = """
<style>
/* the heading anchors link to the page itself; they only add noise here */
[data-testid="stHeaderActionElements"] {display: none;}
/* the viewport reporter draws nothing and should take no room */
.st-key-_mv_viewport {display: none;}
</style>
"""
# Presentation mode: everything Streamlit sizes in rem grows by a half (text, widgets,
# headings) and the page uses the whole width of the projector.
_PRESENT_CSS = """
<style>
html {font-size: 24px;}
[data-testid="stMainBlockContainer"] {max-width: none; padding: 1.5rem 2rem;}
</style>
"""


def page_setup(title: str, intro: str | None = None) -> None:
    """First call of every page: page config, the query-parameter hand-over, the title."""
    st.session_state["_mv_run_start"] = time.perf_counter()
    # "auto": open beside the page on a wide screen, closed on a phone, where an open
    # sidebar covers the whole page after every navigation
    _take_incoming_params()
    present = presenting()
    st.set_page_config(page_title=f"{title} · {APP_NAME}", layout="wide",
                       initial_sidebar_state="collapsed" if present else "auto")
    st.html(_PAGE_CSS + (_PRESENT_CSS if present else ""))
    _measure_viewport()
    st.title(title)
    if intro:
        st.markdown(intro)


def caveat(where=None) -> None:
    """The "attention is not explanation" note."""
    (where or st).caption("⚠ " + CAVEAT)


# --------------------------------------------------------------------------- loading


@st.cache_resource(max_entries=3, show_spinner="Loading the model…")
def _load_model_cached(name: str) -> Model:
    return load_model(name, local_dirs=checkpoints.allowed_dirs(APP_DIR / "models"))


_OFFLINE_RETRY_SECONDS = 20.0
_offline_failures: dict[str, tuple[float, OfflineError]] = {}


def get_model(name: str) -> Model:
    """The loaded model (cached, at most 3 at once). Raises MhaVizError on a bad name.

    A hub id that failed because the hub is unreachable is not retried for 20 s: the check
    can take seconds, and every widget change reruns the page."""
    name = str(name).strip()
    failed = _offline_failures.get(name)
    if failed is not None and time.monotonic() - failed[0] < _OFFLINE_RETRY_SECONDS:
        raise failed[1]
    try:
        return _load_model_cached(name)
    except OfflineError as error:
        _offline_failures[name] = (time.monotonic(), error)
        raise


def _forward_cached(kind: str, name: str, text: str, pair: str | None,
                    max_tokens: int | None):
    """model.trace(...) or model.run(...), kept in the server's byte-bounded store; an input
    whose maps alone would not fit the memory budget is refused with a message first."""
    key = (kind, name, text, pair, max_tokens)
    store = _results()
    found, value = store.get(key)
    if found:
        return value
    model = get_model(name)
    n_tokens = len(model.encode(text, pair, max_tokens).input_ids)
    budget.check_fits(model.info.n_layer, model.info.n_head, n_tokens)
    turns = _forward_turns()
    waiting = None
    if not turns.acquire(blocking=False):
        # At most MHA_VIZ_MAX_JOBS forward passes at once (memory and cores): say so.
        waiting = st.info(f"The server is running other people's texts "
                          f"({jobs.default_max_running()} at a time); yours starts as soon as "
                          f"one of them finishes.", icon="⏳")
        turns.acquire()
    try:  # from here the turn is always given back, even when the page run is stopped
        if waiting is not None:
            waiting.empty()
        # Model serialises its tokenizer calls itself; forwards of several sessions may overlap.
        with st.spinner(f"Running the model on {n_tokens:,} tokens…"):
            return store.get_or_compute(key, lambda: getattr(model, kind)(
                text, text_pair=pair, max_tokens=max_tokens))
    finally:
        turns.release()


@st.cache_resource(show_spinner=False)
def _forward_turns() -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(jobs.default_max_running())


def _trace_cached(name: str, text: str, pair: str | None, max_tokens: int | None
                  ) -> AttentionTrace:
    return _forward_cached("trace", name, text, pair, max_tokens)


@dataclass(frozen=True)
class Selection:
    """What the sidebar chose. ``key`` identifies the trace (use it as a memo key)."""

    model_name: str  # what load_model() gets: "minilm", "gpt2", or a folder path
    text: str
    text_pair: str | None  # sentence B (BERT only), None when empty
    max_tokens: int | None
    model: Model | None = field(default=None, compare=False, repr=False)
    model_error: MhaVizError | None = field(default=None, compare=False)
    # a saved trace the person opened (pages that only read maps show it instead)
    uploaded: AttentionTrace | None = field(default=None, compare=False, repr=False)
    upload_digest: str | None = None

    @property
    def key(self) -> tuple:
        if self.upload_digest is not None:
            return ("uploaded trace", self.upload_digest)
        return (self.model_name, self.text, self.text_pair, self.max_tokens)

    @property
    def file_stem(self) -> str:
        """A short name for downloads: the model name, or the folder's last part."""
        name = self.model_name
        if os.sep in name or name.startswith((".", "~")):
            name = Path(name).name or "model"
        return export.safe_filename(name)


def _run_cached(name: str, text: str, pair: str | None, max_tokens: int | None) -> ForwardRun:
    return _forward_cached("run", name, text, pair, max_tokens)


def get_run(selection: Selection) -> ForwardRun:
    """One forward pass kept whole (model.run): its trace, predictions, target metrics and
    attribution cost nothing more. For pages that show a model's outputs beside its maps; on
    bad input it shows the error and stops the page, as get_trace does."""
    return _computed_or_stop(selection, _run_cached)


def _computed_or_stop(selection: Selection, compute: Callable):
    """compute(model name, text, pair, max_tokens), or the error shown and the page stopped."""
    try:
        if selection.model_error is not None:
            raise selection.model_error
        value = compute(selection.model_name, selection.text, selection.text_pair,
                        selection.max_tokens)
        set_figure_meta(selection)
        return value
    except MhaVizError as error:
        show_error(error)
        st.stop()


def get_trace(selection: Selection) -> AttentionTrace:
    """The trace for the selection (computed once per (model, text, pair, max_tokens) and
    cached), or the saved trace the person opened in the sidebar. On bad input it shows the
    error on the page and stops the page."""
    if selection.uploaded is not None:
        st.info(f"Showing the saved trace **{md_escape(selection.uploaded.model_name)}** "
                f"({selection.uploaded.n_tokens} tokens) opened in the sidebar; close it "
                f"there to trace the text again.")
        set_figure_meta(selection)
        return selection.uploaded
    return _computed_or_stop(selection, _trace_cached)


_HINTS = [
    (OfflineError, "Pick **SmolLM2** or **MiniLM** (bundled, work offline), or a local "
                   "checkpoint folder."),
    (NotAllowedError, "Pick **SmolLM2** or **MiniLM** (bundled), or a hub id such as `gpt2`."),
    (CheckpointNotFoundError, "Pick **SmolLM2** or **MiniLM** (bundled), a hub id, a folder "
                              "saved with `save_pretrained()`, or a .gguf file."),
    (InputError, "Change the text in the sidebar."),
]


def show_error(error: BaseException) -> None:
    """A MhaVizError as a readable message, with what to do about it."""
    if isinstance(error, LoadError):
        kind = "The model could not be loaded."
    elif isinstance(error, InputError):
        kind = "This text cannot be traced."
    else:
        kind = "This cannot be shown."
    hint = next((h for cls, h in _HINTS if isinstance(error, cls)), "")
    message = md_escape(_sentence(without_server_paths(str(error))))
    st.error(f"**{kind}** {message}" + (f"\n\n{hint}" if hint else ""))


def _server_folders() -> list[str]:
    """Folders whose names a visitor has no business seeing, longest first: the app's, the
    Python installation's, the Hugging Face cache, the allowed folders, home, temp."""
    import tempfile

    folders = [APP_DIR, Path(sys.prefix), Path(sys.base_prefix), Path.home(),
               Path(tempfile.gettempdir())]
    try:
        folders += checkpoints.allowed_dirs(APP_DIR / "models")
    except Exception:  # noqa: BLE001 - a message is still shown without this
        pass
    names = {str(f) for f in folders} | {str(f.resolve()) for f in folders}
    return sorted((n for n in names if len(n) > 1), key=len, reverse=True)


def without_server_paths(message: str) -> str:
    """The message with the server's own folders replaced by "…": a corrupt file in the
    Hugging Face cache, say, is named by its place in the checkpoint, not on the disk."""
    for folder in _server_folders():
        message = message.replace(folder, "…")
    return message


GENERIC_ERROR = ("Something went wrong on this page (an internal error; the details are in the "
                 "server's log). Try another text or model, or reload the page.")


def callback(fn: Callable) -> Callable:
    """Wrap a widget callback (on_change, on_click, on_select): callbacks run before the page
    script, outside ``guard()``, so an error in one is logged and otherwise ignored."""
    import functools

    @functools.wraps(fn)
    def safe(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception:  # noqa: BLE001
            log.exception("error in callback %s", getattr(fn, "__name__", fn))
            if os.environ.get("MHA_VIZ_RAISE"):
                raise

    return safe


@contextmanager
def guard():
    """Wrap a page body: a MhaVizError shows its message; any other exception shows a generic
    message and logs the traceback server-side (MHA_VIZ_RAISE=1 re-raises, for debugging)."""
    try:
        yield
        if os.environ.get("MHA_VIZ_TIMING"):
            start = st.session_state.get("_mv_run_start", time.perf_counter())
            print(f"[mha_viz] page ran in {1e3 * (time.perf_counter() - start):.0f} ms",
                  file=sys.stderr, flush=True)
    except MhaVizError as error:
        show_error(error)
    except Exception:  # noqa: BLE001 - the page boundary: never show a traceback
        log.exception("error on page")
        if os.environ.get("MHA_VIZ_RAISE"):
            raise
        st.error(GENERIC_ERROR)


# --------------------------------------------------------------------------- sidebar


APP_DIR = Path(__file__).resolve().parents[1]  # where app.py and pages/ live


@dataclass(frozen=True)
class PageFile:
    path: str  # relative to app.py, as st.page_link wants it
    label: str  # "pages/2_Entropy.py" -> "Entropy"
    description: str  # the page file's docstring, its first paragraph


def _docstring(path: Path) -> str:
    import ast

    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    except (OSError, SyntaxError, UnicodeDecodeError):
        return ""
    return " ".join(doc.split("\n\n")[0].split())


_PAGES_LOCK = threading.Lock()
_pages: list[PageFile] | None = None


def page_files() -> list[PageFile]:
    """The home page and every pages/*.py in order. A new page only needs its file in pages/
    (its docstring's first paragraph describes it on the home page).

    Read once per process, under a lock: the pages do not change while the server runs, and
    CPython 3.11's ast.parse is not safe in two threads at once (sessions starting together
    hit "SystemError: AST constructor recursion depth mismatch", python/cpython#106905)."""
    global _pages
    with _PAGES_LOCK:
        if _pages is None:
            _pages = _read_page_files()
        return list(_pages)


def _read_page_files() -> list[PageFile]:
    pages = [PageFile("app.py", "Home", "")]
    for path in sorted((APP_DIR / "pages").glob("*.py"),
                       key=lambda p: (int(p.name.split("_", 1)[0]) if p.name[0].isdigit()
                                      else 10_000, p.name)):
        stem = path.stem.split("_", 1)[1] if path.stem[0].isdigit() and "_" in path.stem \
            else path.stem
        label = stem.replace("_", " ")
        pages.append(PageFile(f"pages/{path.name}", label[:1].upper() + label[1:].lower(),
                              _docstring(path)))
    return pages


def navigation(where=None) -> None:
    """Links to every page (Streamlit's own list is switched off in .streamlit/config.toml
    so the home page reads "Home", not "app")."""
    where = where or st.sidebar
    for page in page_files():
        where.page_link(page.path, label=page.label)
    where.divider()


def _apply_example(name: str) -> None:
    example = EXAMPLES[name]
    text, pair = example["text"], example["pair"]
    if pair and st.session_state.get("_mv_causal"):
        text, pair = f"{text} {pair}", ""
    set_value("text", text)
    set_value("pair", pair)


def sidebar(shows_saved_traces: bool = True) -> Selection:
    """The shared sidebar: model, text, sentence B (BERT), examples, options, a saved trace
    to open, caveat. Pages that run the model themselves (not only read maps) pass
    shows_saved_traces=False: their Selection never carries an opened trace."""
    bar = st.sidebar
    navigation(bar)
    synced(bar.toggle, "present", "Presentation mode", False,
           help="Large type and figures that fit one screen, for a projector; the sidebar "
                "starts closed. A link with ?present=1 opens in it.")
    bar.header("Model")
    choice = synced(bar.selectbox, "model", "Model", default_model(), options=MODEL_CHOICES,
                    format_func=lambda c: MODEL_LABELS.get(c, c),
                    help="MiniLM (a BERT sentence encoder) and SmolLM2-135M (a Llama-family "
                         "causal language model with grouped-query attention) are bundled and "
                         "work offline. Hub models need network the first time (then they are "
                         "cached). A local checkpoint is a folder (config.json, "
                         "model.safetensors, tokenizer files) of a GPT-2, BERT, Llama, Mistral "
                         "or Qwen2 model, or one Llama .gguf file, inside the folders this "
                         "server allows (the Hugging Face cache and its models folder unless "
                         "the operator set MHA_VIZ_ALLOWED_DIRS).")
    name = choice
    if choice == FOLDER_CHOICE:
        name = synced(bar.text_input, "folder", "Checkpoint folder or .gguf file", "",
                      placeholder="/path/to/checkpoint",
                      help="A folder saved with save_pretrained(): config.json, "
                           "model.safetensors (or pytorch_model.bin), tokenizer files; or a "
                           "Llama-architecture .gguf file.").strip()
    model, model_error = None, None
    if choice == FOLDER_CHOICE and not name:
        model_error = CheckpointNotFoundError(
            "no folder given: type the path of a checkpoint folder in the sidebar")
    else:
        try:
            model = get_model(name)
        except MhaVizError as error:
            model_error = error
    if model is not None:
        info = model.info
        heads = f"{info.n_head} heads" + (f" ({info.n_kv_head} key/value)"
                                          if info.n_kv_head != info.n_head else "")
        bar.caption(f"{info.arch.upper()} · {info.n_layer} layers × {heads} · "
                    f"d_model {info.d_model} · context {info.max_positions} tokens")
        st.session_state["_mv_causal"] = info.causal
    else:
        bar.caption("Model not loaded (see the message on the page).")

    bar.header("Text")
    text = synced(bar.text_area, "text", "Text", DEFAULT_TEXT, height=120,
                  help="Press Ctrl+Enter (or click outside the box) to run it.")
    if len(text) > URL_MAX_CHARS:
        bar.caption(f"This text ({len(text):,} characters) is too long for the page's link "
                    f"(at most {URL_MAX_CHARS:,}): a copied link keeps the model and the "
                    f"choices, not the text. Save the trace (.npz) to share it.")
    pair = ""
    if model is not None and not model.info.causal:
        pair = synced(bar.text_area, "pair", "Sentence B (optional, BERT)", "", height=80,
                      help="BERT reads two sentences as [CLS] A [SEP] B [SEP]; leave empty "
                           "for one text.")
    bar.caption("Or try an example:")
    for key, example in EXAMPLES.items():
        bar.button(example["label"], key=f"_mv_example_{key}", help=example["help"],
                   on_click=callback(_apply_example), args=(key,), width="stretch")

    with bar.expander("Options"):
        context = model.info.max_positions if model is not None else None
        default_max = min(context, DEFAULT_MAX_TOKENS) if context else DEFAULT_MAX_TOKENS
        max_tokens = synced(
            st.number_input, "max_tokens", "Max tokens", default_max, min_value=2,
            max_value=context or 100_000, step=32,
            valid=lambda v: 2 <= int(v) <= (context or 100_000),
            help="Longer texts are cut here (the model's context is the upper limit). Memory "
                 "grows with layers × heads × tokens².")
        synced(st.radio, "img", "Figure download format", "png", options=list(IMAGE_FORMATS),
               format_func=str.upper, horizontal=True,
               help="What the camera button above each figure saves.")
    uploaded, digest = saved_trace_picker(bar)
    if uploaded is not None and not shows_saved_traces:
        st.info("A saved trace is open in the sidebar, but this page runs the model itself: "
                "it shows the sidebar's model and text.")
        uploaded, digest = None, None
    bar.divider()
    bar.caption(NUMBERING)
    caveat(bar)
    return Selection(model_name=name, text=_clean_str(text),
                     text_pair=_clean_str(pair) if pair and pair.strip() else None,
                     max_tokens=int(max_tokens), model=model, model_error=model_error,
                     uploaded=uploaded, upload_digest=digest)


MAX_UPLOAD_BYTES = 200 * 2**20  # also server.maxUploadSize in .streamlit/config.toml


def _close_saved_trace() -> None:
    st.session_state.pop("_mv_uploaded", None)
    st.session_state["_mv_upload_generation"] = st.session_state.get(
        "_mv_upload_generation", 0) + 1  # a new uploader widget: the old file is dropped


def saved_trace_picker(where=None) -> tuple[AttentionTrace | None, str | None]:
    """An uploader for a trace saved as .npz (by this app or AttentionTrace.save). It is read
    with allow_pickle=False and refused over MAX_UPLOAD_BYTES (unpacked); it stays open in
    this session (only) until closed."""
    import hashlib

    where = where or st.sidebar
    with where.expander("Open a saved trace (.npz)",
                        expanded="_mv_uploaded" in st.session_state):
        generation = st.session_state.get("_mv_upload_generation", 0)
        file = st.file_uploader("Trace file", type=["npz"], key=f"_mv_upload_{generation}",
                                help="A trace downloaded from this app, or written by "
                                     "AttentionTrace.save(). Never unpickled.")
        if file is not None:
            data = file.getvalue()
            digest = hashlib.sha256(data).hexdigest()[:16]
            current = st.session_state.get("_mv_uploaded")
            if current is None or current[0] != digest:
                try:
                    trace = AttentionTrace.load(data, max_bytes=MAX_UPLOAD_BYTES)
                except MhaVizError as error:
                    st.error(f"This file cannot be opened: {md_escape(_sentence(str(error)))}")
                    return None, None
                st.session_state["_mv_uploaded"] = (digest, trace)
        current = st.session_state.get("_mv_uploaded")
        if current is None:
            return None, None
        st.caption(f"Open: {md_escape(current[1].model_name or 'a trace')}, "
                   f"{current[1].n_tokens} tokens.")
        st.button("Close the saved trace", on_click=callback(_close_saved_trace),
                  key="_mv_close_upload")
        return current[1], current[0]


def image_format() -> str:
    """"png" or "svg": the format the camera button saves (the sidebar's switch)."""
    fmt = get_value("img", "png")
    return fmt if fmt in IMAGE_FORMATS else "png"


# --------------------------------------------------------------------------- model card


def model_card(model: Model) -> None:
    """Layers, heads, sizes, attention parameters per layer and where the weights came from."""
    info = model.info
    columns = st.columns([1, 1, 1, 1, 2])
    columns[0].metric("Layers", info.n_layer)
    columns[1].metric("Heads per layer", info.n_head)
    columns[2].metric("d_model", info.d_model)
    columns[3].metric("d_head", info.d_head, help="d_model / heads")
    columns[4].metric("Attention weights per layer", f"{info.attention_params_per_layer:,}",
                      help="W_Q, W_K, W_V and W_O (biases not counted): 4 × d_model² for plain "
                           "multi-head attention, less when key/value heads are shared")
    kind = ("causal: each token sees only itself and earlier tokens" if info.causal
            else "bidirectional: each token sees every token")
    sharing = ""
    if info.n_kv_head != info.n_head:
        groups = {}
        for head, kv in enumerate(info.kv_heads):
            groups.setdefault(kv, []).append(f"H{head}")
        sharing = ("\n- **Heads that share keys and values** (" + info.attention_kind + "): "
                   + "; ".join(f"{', '.join(heads)} (K/V head {kv})"
                               for kv, heads in groups.items())
                   + ". Every query head still has its own attention map.")
    st.markdown(
        f"- **Attention:** {md_escape(kind)}\n"
        f"- **Architecture ({md_escape(info.arch)}):** {md_escape(info.description)}\n"
        f"- **Context:** {info.max_positions:,} tokens; vocabulary {info.vocab_size:,} tokens\n"
        f"- **Attention weights in all layers:** "
        f"{info.n_layer * info.attention_params_per_layer:,}{sharing}\n"
        f"- **Weights from:** {md_escape(info.source)}\n"
        f"- **Score used by the pruning analyses:** {md_escape(info.score_name)}")


# --------------------------------------------------------------------------- trace helpers


def trace_notes(trace: AttentionTrace) -> None:
    """Token count, and a warning when the text was cut to the context / max tokens."""
    if trace.truncated:
        st.warning(f"The text has {trace.n_tokens_before_truncation:,} tokens; only the first "
                   f"{trace.n_tokens:,} are traced (the model's context or the *Max tokens* "
                   f"option in the sidebar).")
    pair = " (sentence pair)" if trace.is_pair else ""
    st.caption(f"{trace.n_tokens} tokens{pair} · {trace.n_layers} layers × {trace.n_heads} "
               f"heads · {NUMBERING}")


def kv_sharing_note(trace: AttentionTrace, head: int | None = None) -> str | None:
    """Which query heads share keys and values (grouped- or multi-query attention), in words:
    for every group, or for one head's group. None when every head has its own."""
    if trace.n_kv_heads == trace.n_heads:
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
    return (f"{kind.capitalize()} attention: {trace.n_heads} query heads read {trace.n_kv_heads} "
            f"key/value head(s); these share one each: {spans}.")


def head_picker(trace: AttentionTrace, where=None, default: tuple[int, int] | None = None
                ) -> tuple[int, int]:
    """Layer and head selectors (shared by all pages, kept in the URL as layer/head). Until
    the person picks one: ``default`` (e.g. opening(trace)[2:]), else L0.H0."""
    where = where or st
    default = default or (0, 0)
    left, right = where.columns(2)
    layer = synced(left.selectbox, "layer", "Layer", int(default[0]),
                   options=list(range(trace.n_layers)), format_func=lambda l: f"L{l}")
    head = synced(right.selectbox, "head", "Head", int(default[1]),
                  options=list(range(trace.n_heads)), format_func=lambda h: f"H{h}")
    return layer, head


def opening(trace: AttentionTrace) -> tuple[int, int, int, int]:
    """(query, key, layer, head) to open the pages on (analysis.opening_view): a few
    O(L H T) reductions, cheap enough to recompute on every run."""
    from .analysis import opening_view

    return opening_view(trace.attentions, trace.display_tokens, trace.special_mask)


def hide_special_toggle(trace: AttentionTrace, where=None) -> np.ndarray | None:
    """The "hide special tokens" choice: the keep mask [T] (True = shown), or None when
    nothing is hidden. Causal models also offer hiding their first token (the attention
    sink)."""
    where = where or st
    if trace.causal:
        options = ["none", "first", "special", "both"]
        labels = {"none": "Show every token",
                  "first": "Hide the first token (the attention sink of causal models)",
                  "special": "Hide special tokens (<|endoftext|>, <|im_start|>, ...)",
                  "both": "Hide the first token and special tokens"}
    else:
        options = ["none", "special"]
        labels = {"none": "Show every token", "special": "Hide [CLS] and [SEP]"}
    choice = synced(where.selectbox, "hide", "Special tokens", "none", options=options,
                    format_func=labels.get,
                    help="Hidden tokens are removed from rows and columns and every row is "
                         "renormalised to sum to 1 over the tokens still shown.")
    if choice == "none":
        return None
    from .analysis import special_keep_mask

    keep = special_keep_mask(trace, drop_first=choice in ("first", "both"))
    if choice == "first":
        keep = np.ones(trace.n_tokens, dtype=bool)
        keep[0] = False
    if keep.sum() < 1:
        where.info("Nothing would be left to show: every token is hidden, so none are.")
        return None
    if keep.all():
        where.caption("This text has no such tokens: nothing is hidden.")
        return None
    return keep


def shown_maps(selection: Selection, trace: AttentionTrace, keep: np.ndarray | None
               ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(attentions [L, H, K, K], kept positions [K], their labels) after hiding tokens
    (rows renormalised; cached per input). keep None returns the trace's own arrays."""
    if keep is None:
        return trace.attentions, np.arange(trace.n_tokens), list(trace.display_tokens)
    from .analysis import drop_positions

    maps, kept = memo(drop_positions, trace.attentions, key=("shown", selection.key),
                      large=True, keep_mask=keep)
    return maps, kept, [trace.display_tokens[i] for i in kept]


def hidden_note(trace: AttentionTrace, keep: np.ndarray | None) -> None:
    if keep is None:
        return
    hidden = [f"{i} {trace.display_tokens[i]}" for i in np.flatnonzero(~keep)]
    shown = ", ".join(hidden[:6]) + (" …" if len(hidden) > 6 else "")
    st.info(f"Hidden {len(hidden)} token(s) ({md_escape(shown)}). Every row is renormalised "
            f"to sum to 1 over the tokens still shown, so the weights are not the model's raw "
            f"weights.")


# --------------------------------------------------------------------------- memo


def _hashable(value):
    if isinstance(value, np.ndarray):
        return ("ndarray", value.shape, str(value.dtype), value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


@st.cache_resource(max_entries=64, show_spinner=False)
def _memo_small(fn_id: str, key: Any, options: tuple, _fn, _arrays, _kwargs):
    return _fn(*_arrays, **_kwargs)


def _memo_large(fn_id: str, key: Any, options: tuple, _fn, _arrays, _kwargs):
    return _results().get_or_compute(("memo", fn_id, key, options),
                                     lambda: _fn(*_arrays, **_kwargs))


def memo(fn: Callable, *arrays, key: Any, large: bool = False, **options):
    """``fn(*arrays, **options)``, computed once per (fn, key, options) and shared.

    key must identify the arrays (they are not hashed: ``selection.key`` plus whatever
    was done to them); options are hashed by value (numbers, strings, small arrays).
    large=True for results the size of a trace (kept in the server's byte-bounded store,
    see mha_viz.budget), else 64 are kept.
    Treat the result as read-only.
    """
    fn_id = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}"
    opts = tuple(sorted((k, _hashable(v)) for k, v in options.items()))
    cache = _memo_large if large else _memo_small
    return cache(fn_id, _hashable(key), opts, fn, arrays, options)


# --------------------------------------------------------------------------- output


def show_figure(fig, key: str, *, on_select: Callable | None = None, width="stretch",
                selection_mode="points", alt: str | None = None, share: float = 1.0):
    """st.plotly_chart with the app's settings: no Streamlit theme, the PNG/SVG camera
    button, no network. on_select (a callback) makes the chart pickable. The figure's
    layout.meta records the run's input, which the browser tests and benchmark read.

    Once the browser has reported the page's width, the figure is laid out for it
    (mha_viz.fit: square cells, numbers and labels only where they fit, presentation mode);
    ``share`` is the fraction of the page's width its column has on a wide screen (columns
    stack on a phone)."""
    meta = st.session_state.get("_mv_meta")
    if meta is not None:
        fig.update_layout(meta={**(fig.layout.meta if isinstance(fig.layout.meta, dict)
                                   else {}), **meta})
    elif not isinstance(fig.layout.meta, dict):
        fig.layout.meta = {}
    screen = figure_screen(share)
    if screen is not None and width == "stretch":
        fit.fit_figure(fig, screen)
        fig.layout.meta["fitted"] = screen.width  # the browser tests wait for this
        if fig.layout.width is not None:
            width = "content"
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
    };
    const later = () => { clearTimeout(timer); timer = setTimeout(measure, 250); };
    measure();
    window.addEventListener('resize', later);
    const main = document.querySelector('[data-testid="stMainBlockContainer"]');
    const observer = main ? new ResizeObserver(later) : null;
    if (observer) observer.observe(main);
    return () => {
        window.removeEventListener('resize', later);
        if (observer) observer.disconnect();
        clearTimeout(timer);
    };
}
"""
_viewport_component = None
STACKED_BELOW_PX = 640  # Streamlit stacks columns on windows narrower than this


def _measure_viewport() -> None:
    """Mount the (invisible) viewport reporter; called once per page run by page_setup."""
    global _viewport_component
    if _viewport_component is None:
        import streamlit.components.v2 as components

        _viewport_component = components.component("mha_viz_viewport", js=_VIEWPORT_JS)
    known = st.session_state.get("_mv_viewport_size")
    with st.sidebar:
        result = _viewport_component(key=_VIEWPORT_KEY,
                                     data={"known": known, "present": presenting()},
                                     on_size_change=lambda: None)
    size = getattr(result, "size", None)
    if isinstance(size, dict):
        st.session_state["_mv_viewport_size"] = size


def viewport() -> dict | None:
    """{"width": main column px, "height": window px, "window": window width px} as the
    browser last reported it, or None before it has (the first run, AppTest)."""
    size = st.session_state.get("_mv_viewport_size")
    try:
        return {k: int(size[k]) for k in ("width", "height", "window")}
    except (TypeError, KeyError, ValueError):
        return None


def presenting() -> bool:
    """Presentation mode (the sidebar toggle, or ?present=1 in a link)."""
    incoming = (st.session_state.get(_INCOMING) or {}).get("present")
    if incoming is not None:
        try:
            return _bool_from_url(incoming)
        except ValueError:
            return False
    return bool(st.session_state.get(_STATE + "present", False))


def figure_screen(share: float = 1.0) -> fit.Screen | None:
    """The Screen a figure in a column of ``share`` of the page's width is shown on."""
    size = viewport()
    if size is None or size["width"] < 100:
        return None
    width = size["width"]
    if share < 1.0 and size["window"] >= STACKED_BELOW_PX:
        width = int(width * share - 16)  # the columns' gap
    return fit.Screen(width=width, height=size["height"] or None, present=presenting())


def set_figure_meta(selection: Selection) -> None:
    """Tag every figure of this run with a short id of the input (see show_figure)."""
    import hashlib

    digest = hashlib.sha1(repr(selection.key).encode("utf-8", "replace")).hexdigest()[:12]
    st.session_state["_mv_meta"] = {"input": digest}


def download_bytes(data: bytes | Callable[[], bytes], file_name: str, label: str,
                   mime: str = "application/octet-stream", key: str | None = None,
                   help: str | None = None, where=None) -> None:
    """A download button; pass a callable to build big files only when clicked."""
    (where or st).download_button(label, data=data, file_name=file_name, mime=mime,
                                  key=key or f"_mv_dl_{file_name}", help=help,
                                  on_click="ignore")


def download_csv(data: bytes | Callable[[], bytes], file_name: str, label: str = "CSV",
                 key: str | None = None, help: str | None = None, where=None) -> None:
    """A CSV download button (data: bytes, or a callable returning them, see mha_viz.export)."""
    download_bytes(data, file_name, f"⬇ {label}", "text/csv", key, help, where)


def download_trace(selection: Selection, trace: AttentionTrace, where=None) -> None:
    """The whole trace as .npz (AttentionTrace.load reads it back).

    The bytes are made on the click, from the trace looked up again by the selection: a
    closure over ``trace`` would keep it alive as long as Streamlit keeps the session (two
    minutes after the tab closes), past the memory budget's eviction."""
    def trace_again() -> bytes:
        if selection.uploaded is not None:
            return export.trace_npz(selection.uploaded)
        return export.trace_npz(_trace_cached(*selection.key))

    download_bytes(trace_again, f"{selection.file_stem}_trace.npz",
                   "⬇ Trace (.npz)", key="_mv_dl_trace",
                   help="Every head's attention, the tokens and the metadata; "
                        "mha_viz.AttentionTrace.load() reads it back.", where=where)


__all__ = [
    "Selection", "page_setup", "sidebar", "get_model", "get_trace", "get_run", "synced", "set_value",
    "get_value", "head_picker", "hide_special_toggle", "shown_maps", "hidden_note", "memo",
    "show_figure", "set_figure_meta", "download_bytes", "download_csv", "download_trace",
    "image_format", "show_error", "guard", "callback", "model_card", "trace_notes", "caveat",
    "md_escape", "EXAMPLES", "CAVEAT", "NUMBERING", "GENERIC_ERROR",
]


# --------------------------------------------------------------------------- results and jobs
# Long computations (the ablation sweep, gradient importance, pruning curves) run as jobs
# (mha_viz.jobs): in their own thread, so a widget change or a page switch, which stops the
# script run, does not stop them; the next run finds the job and waits on it again, or takes
# its result. Results are shared by every session, in a small LRU by key.


class _Store:
    """A small LRU shared by every session."""

    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self.data: OrderedDict = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key):
        with self.lock:
            if key in self.data:
                self.data.move_to_end(key)
                return True, self.data[key]
        return False, None

    def put(self, key, value) -> None:
        with self.lock:
            self.data[key] = value
            self.data.move_to_end(key)
            while len(self.data) > self.max_entries:
                self.data.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self.data.clear()


@st.cache_resource(show_spinner=False)
def _small_store() -> _Store:
    return _Store(64)


@st.cache_resource(show_spinner=False)
def _results() -> budget.ByteLRU:
    """Traces, runs and results the size of a trace, in one store bounded by bytes (half the
    memory budget; the rest is for the forward passes running)."""
    return budget.ByteLRU(int(budget.RESULTS_SHARE * budget.budget_bytes()))


@st.cache_resource(show_spinner=False)
def job_runner() -> jobs.JobRunner:
    """The server's one job runner: at most MHA_VIZ_MAX_JOBS heavy computations at once."""
    return jobs.JobRunner(jobs.default_max_running())


def clear() -> None:
    """Forget every stored result and cancel every job (tests; a fresh start)."""
    for store in (_small_store(), _results()):
        store.clear()
    job_runner().cancel_all()


_CANCELLED = "_mv_cancelled_jobs"  # keys this session cancelled: not restarted by themselves


def peek(key: Hashable, large: bool = False):
    """The result stored under key (by ``computed``), or None."""
    return (_results() if large else _small_store()).get(key)[1]


def cancelled(key: Hashable) -> bool:
    """Whether this session cancelled the computation under key (and has not restarted it)."""
    return key in st.session_state.get(_CANCELLED, set())


def _cancel(key: Hashable) -> None:
    st.session_state.setdefault(_CANCELLED, set()).add(key)
    job_runner().cancel(key)


def _progress_text(job: jobs.Job, label: str, runner: jobs.JobRunner) -> str:
    if job.state == jobs.QUEUED:
        ahead = runner.queue_position(job)
        return (f"{label}: waiting its turn ({ahead} in line; the server runs "
                f"{runner.max_running} heavy computation(s) at once)")
    if job.cancelling:
        return f"{label}: cancelling…"
    elapsed = f"{job.elapsed:.0f} s"
    if not job.total:
        return f"{label}: running, {elapsed}"
    left = job.seconds_left
    eta = f", about {left:.0f} s left" if left is not None else ""
    return f"{label}: {job.done} of {job.total} ({elapsed}{eta})"


def _wait_showing_progress(job: jobs.Job, key: Hashable, label: str, where) -> None:
    """Draw the job's progress until it ends. A Cancel button stops a job that reports
    progress; anything else that stops this script run (a widget change, a page switch)
    leaves the job running."""
    runner = job_runner()
    holder = (where or st).empty()
    with holder.container():
        if job.reports_progress:
            bar_col, button_col = st.columns([5, 1], vertical_alignment="center")
            button_col.button("Cancel", key=f"_mv_cancel_{abs(hash(key))}",
                              on_click=callback(_cancel), args=(key,),
                              help="Stop this computation. Changing a widget or switching "
                                   "pages does not stop it.")
        else:
            bar_col = st.container()
        bar = bar_col.empty()
    while not job.wait(0.25):
        if job.reports_progress:
            bar.progress(job.fraction, text=_progress_text(job, label, runner))
        else:
            bar.info(_progress_text(job, label, runner), icon="⏳")
    holder.empty()


def computed(key: Hashable, fn: Callable, *args, label: str, large: bool = False,
             where=None, restart: bool = False, **kwargs):
    """``fn(*args, **kwargs)`` computed once per ``key`` (shared by all sessions; args are
    not hashed, so key must identify them), as a job that outlives this script run. While it
    runs the page shows ``label`` with its progress (when fn takes ``progress``: steps done,
    time left and a Cancel button) or the time so far. Returns the result, or None when this
    session cancelled it (until restart=True: the person asked for it again).
    large=True: kept in the byte-bounded store with the traces (mha_viz.budget)."""
    store = _results() if large else _small_store()
    found, value = store.get(key)
    if found:
        return value
    if restart:
        st.session_state.get(_CANCELLED, set()).discard(key)
    elif cancelled(key):
        return None
    runner = job_runner()
    job = runner.submit(key, fn, *args, label=label, **kwargs)
    if not job.finished_state:
        _wait_showing_progress(job, key, label, where)
    runner.forget(key, job)
    if job.state == jobs.DONE:
        store.put(key, job.result)
        return job.result
    if job.state == jobs.FAILED:
        raise job.error
    st.session_state.setdefault(_CANCELLED, set()).add(key)
    return None


def run_or_wait(key: Hashable, fn: Callable, *args, label: str, auto: bool, button: str,
                **kwargs):
    """The stored result, or compute it now: by itself when ``auto`` (unless the person
    cancelled it), else when the button is pressed. None while it waits for the button."""
    found = peek(key)
    if found is not None:
        return found
    was_cancelled = cancelled(key)
    job = job_runner().get(key)
    # started earlier (by a click before a widget change or a page switch): wait on it again
    started = job is not None and not job.cancelling and job.state in (
        jobs.QUEUED, jobs.RUNNING, jobs.DONE)
    pressed = False
    if not started and (was_cancelled or not auto):
        holder = st.empty()
        pressed = holder.button(f"{button} (cancelled: run again)" if was_cancelled else button,
                                key=f"run_{key[0]}")
        if pressed:
            holder.empty()  # the progress and its Cancel button take its place
    if pressed or started or (auto and not was_cancelled):
        return computed(key, fn, *args, label=label, restart=pressed, **kwargs)
    return None


def masked_trace(selection, mask: np.ndarray, ablation: str = "zero"):
    """The selection's trace with the heads where mask == 0 switched off (cached per mask)."""
    mask = np.asarray(mask, dtype=np.float32)
    key = ("masked_trace", selection.key, mask.tobytes(), mask.shape, ablation)
    model = get_model(selection.model_name)
    return computed(key, model.trace, selection.text, text_pair=selection.text_pair,
                    max_tokens=selection.max_tokens, head_mask=mask, ablation=ablation,
                    label="Running the model with those heads switched off…", large=True)


METRIC_LABELS = {"logit_diff": "logit difference", "logit": "logit",
                 "logprob": "log-probability"}


def target_metric_picker(model: Model, tokens: Sequence[str], positions: Sequence[int],
                         top_two: Callable[[int], Sequence[int]]) -> TargetMetric:
    """Controls for a target metric: the position, the target and contrast tokens (empty
    means the model's first and second guess there, from top_two(position)) and its kind.
    Their values live in the URL, so a metric chosen on Predictions carries to Pruning
    impact and back."""
    positions = [int(p) for p in positions]
    pos_col, target_col, contrast_col, kind_col = st.columns(4)
    with pos_col:
        position = synced(st.selectbox, "position", "Prediction at position", positions[-1],
                          options=positions, valid=lambda p: int(p) in positions,
                          format_func=lambda i: f"{i}: {tokens[i]}",
                          help="Causal models: the prediction made at this token, of the next "
                               "one. Masked-LM models: the filler of this position, masked.")
    guesses = [int(i) for i in top_two(int(position))][:2]
    shown = model.display_tokens(guesses)
    with target_col:
        target_text = synced(st.text_input, "target", "Target token", "",
                             placeholder=shown[0].replace("␣", " "),
                             help="One token, e.g. ' Mary' (a leading space is part of the "
                                  "token). Empty: the model's top guess.")
    with contrast_col:
        contrast_text = synced(st.text_input, "contrast", "Contrast token (optional)", "",
                               placeholder=shown[1].replace("␣", " "),
                               help="Measure logit(target) − logit(contrast), e.g. ' Mary' vs "
                                    "' John'. Empty: the model's second guess.")
    with kind_col:
        kind = synced(st.radio, "metric", "Metric", "logit_diff", options=list(METRIC_LABELS),
                      format_func=METRIC_LABELS.get)
    target = target_text if target_text else guesses[0]
    contrast = contrast_text if contrast_text else guesses[1]
    return TargetMetric(int(position), target, contrast if kind == "logit_diff" else None, kind)
