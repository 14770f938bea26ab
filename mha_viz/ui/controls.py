"""The widgets: the sidebar every page shares (pages, model, text, options, a saved trace) and
the choices pages draw (head, hidden tokens, target metric), all kept in the URL."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import streamlit as st

from ..core import budget
from ..core.digest import digest as content_digest
from ..core.errors import CheckpointNotFoundError, MhaVizError
from ..maps.trace import AttentionTrace
from ..models.model import Model, TargetMetric
from ..models.seq2seq import DEFAULT_NEW_TOKENS
from .loading import charts_code_meanwhile, get_model
from .selection import Selection
from .stores import memo, results_store
from . import continuation, navigation, reads as page_reads
from .messages import callback
from .output import caveat
from .settings import (APP_DIR, DEFAULT_TEXT, EXAMPLES, FOLDER_CHOICE, IMAGE_FORMATS,
                       MAX_UPLOAD_BYTES, MODEL_CHOICES, MODEL_LABELS, NUMBERING, URL_MAX_CHARS,
                       as_sentence, clean_str, default_model, default_text, fits_in_link,
                       max_tokens_within, md_escape)
from .state import set_value, synced
from .words.sidebar import SETS_HELP, TEXT_FIELDS

# ---------------------------------------------------------------------- pages


@dataclass(frozen=True)
class PageFile:
    path: str  # relative to app.py, as st.page_link wants it
    label: str  # "pages/2_Entropy.py" -> "Entropy"
    description: str  # the page file's docstring, its first paragraph

    @property
    def summary(self) -> str:
        """What the page shows, for a link under its label: the description without its
        leading "Entropy:" ("Entropy: how broad ..." -> "How broad ...")."""
        text = self.description
        name, colon, rest = text.partition(":")
        if colon and len(name) < 40:
            text = rest.strip()
        return text[:1].upper() + text[1:]


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


def app_pages(home: Callable[[], None]) -> list:
    """The pages for st.navigation: ``home`` (app.py's home page, at the site's root) and
    every pages/*.py in order, titled as page_files() names them ("Home", not "app"; the
    URLs stay /Attention_Maps, ... as Streamlit derives them from the file names)."""
    pages = [st.Page(home, title="Home", default=True)]
    for page in page_files()[1:]:
        pages.append(st.Page(page.path, title=page.label))
    navigation.install()
    return pages


# -------------------------------------------------------------------- sidebar


def _apply_example(name: str) -> None:
    example = EXAMPLES[name]
    text, pair = example["text"], example["pair"]
    if name in st.session_state.get("_mv_cut_examples", ()):  # the context would cut it
        text = example["short"]
    if pair and st.session_state.get("_mv_causal"):
        text, pair = f"{text} {pair}", ""
    set_value("text", text)
    set_value("pair", pair)


def _model_refused(value: str, used: str) -> str:
    """The line for a link's model that is not in the picker (a path, a typo): README's
    one message for every checkpoint the server does not offer."""
    return (f"The link's model={value} is not a checkpoint this server offers: the page "
            f"opened {used} instead. A checkpoint folder of this server is picked in the "
            f"sidebar ({MODEL_LABELS[FOLDER_CHOICE]}).")


def sidebar(shows_saved_traces: bool = True, reads: Sequence[str] = page_reads.EVERY_SET,
            explains_mark: bool | str = True) -> Selection:
    """The shared sidebar: model, text, the model's continuation of it (Continue, on Home),
    sentence B (BERT), examples, options, a saved trace to open, caveat. Pages that run the
    model themselves (not only read maps) pass shows_saved_traces=False: their Selection
    never carries an opened trace. reads: the sets of maps the page reads (its view's MAPS,
    maps.sets); where the set chosen is not one of them the page says which it reads and
    stops. explains_mark: say at the top of the page ("sidebar": in the sidebar, out of a
    lesson's screen) what marks the written tokens (Home
    says it beside them)."""
    bar = st.sidebar
    synced(bar.toggle, "present", "Presentation mode", False,
           help="Large type and figures that fit one screen, for a projector; the sidebar "
                "starts closed. A link with ?present=1 opens in it.")
    bar.header("Model")
    choice = synced(bar.selectbox, "model", "Model", default_model(), options=MODEL_CHOICES,
                    format_func=lambda c: MODEL_LABELS.get(c, c), refused=_model_refused,
                    help="MiniLM (a BERT sentence encoder), SmolLM2-135M (a Llama-family "
                         "causal language model with grouped-query attention), a toy T5 "
                         "translator (an encoder-decoder), a toy digit reader and the two "
                         "induction toys trained on the Training page (their last "
                         "checkpoints: they read characters, 64 at most) are bundled and work "
                         "offline. Hub models need network the first time (then they are "
                         "cached). A local checkpoint is a folder (config.json, "
                         "model.safetensors, tokenizer files) of a GPT-2, BERT, Llama, Mistral, "
                         "Qwen2, T5, BART or Marian model, or one Llama .gguf file, inside the "
                         "folders this "
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
            with charts_code_meanwhile(name):
                model = get_model(name)
        except MhaVizError as error:
            model_error = error
    # the fields of what the model reads: a text (and a sentence B), or a source and a target
    field = TEXT_FIELDS["text" if model is None else model.reads]
    if model is not None:
        info = model.info
        heads = f"{info.n_head} heads" + (f" ({info.n_kv_head} key/value)"
                                          if info.n_kv_head != info.n_head else "")
        layers = " + ".join(f"{stack} {n}".strip()
                            for stack, n in info.stack_layers.items()) + " layers"
        bar.caption(f"{info.model_type.upper()} · {layers} × {heads} · "
                    f"d_model {info.d_model} · context {info.max_positions} tokens")
        st.session_state["_mv_causal"] = info.causal
        # the examples whose text the context would cut (the induction toy's 64 tokens cut
        # the repeated text before it repeats): their buttons give their short form
        st.session_state["_mv_cut_examples"] = {
            name for name, example in EXAMPLES.items() if example.get("short")
            and model.reads == "text" and model.n_tokens(example["text"]) >= info.max_positions}
    else:
        bar.caption("Model not loaded (see the message on the page).")

    bar.header(field.header)
    text = synced(bar.text_area, "text", field.label,
                  DEFAULT_TEXT if model is None else default_text(model),
                  height=120, help="Press Ctrl+Enter (or click outside the box) to run it.")
    target = kind = None
    if field.target:
        target = synced(bar.text_area, "target", "Target (optional)", "", height=80,
                        help=f"The decoder reads the target teacher-forced: each position "
                             f"predicts the next target token. Leave it empty to see the "
                             f"model's own output (greedy, up to {DEFAULT_NEW_TOKENS} "
                             f"tokens).")
    sets = () if model is None else model.map_sets
    if len(sets) > 1:  # the set of maps the pages show, the last (cross-attention) first
        names = [s.name for s in sets]
        labels = {s.name: s.label for s in sets}
        kind = synced(bar.radio, "kind", "Attention shown", names[-1], options=names,
                      format_func=labels.get, valid=lambda k: k in names, help=SETS_HELP)
    written = continuation.in_sidebar(bar, model, name, clean_str(text))
    if not fits_in_link(text):
        bar.caption(f"This text ({len(text):,} characters) is too long for the page's link "
                    f"(at most {URL_MAX_CHARS:,} characters, fewer in other alphabets): a "
                    f"copied link keeps the model and the "
                    f"choices, not the text. Save the trace (.npz) to share it.")
    pair = ""
    if model is not None and not model.info.causal and field.pair:
        pair = synced(bar.text_area, "pair", "Sentence B (optional, BERT)", "", height=80,
                      help="BERT reads two sentences as [CLS] A [SEP] B [SEP]; leave empty "
                           "for one text.")
    bar.caption("Or try an example:")
    for key, example in EXAMPLES.items():
        bar.button(example["label"], key=f"_mv_example_{key}", help=example["help"],
                   on_click=callback(_apply_example), args=(key,), width="stretch")

    with bar.expander("Options"):
        context = model.info.max_positions if model is not None else None
        max_tokens = synced(
            st.number_input, continuation.MAX_TOKENS, "Max tokens",
            max_tokens_within(None, context), min_value=2, max_value=context or 100_000,
            step=32, valid=lambda v: max_tokens_within(v, context) == int(v),
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
    selection = Selection(model_name=name,
                          text=clean_str(text) + (written.text if written else ""),
                          text_pair=clean_str(pair) if pair and pair.strip() else None,
                          max_tokens=int(max_tokens), model=model, model_error=model_error,
                          uploaded=uploaded, upload_digest=digest,
                          target=clean_str(target) if target and target.strip() else None,
                          kind=kind, generation=written)
    refused = None if model is None or uploaded is not None else page_reads.refusal(
        model, selection.map_set, reads, page_files)
    if refused:
        st.info(refused)
        st.stop()
    if written is not None and uploaded is None and explains_mark:
        continuation.explain_mark(written,
                                  where=st.sidebar if explains_mark == "sidebar" else None)
    return selection


def _close_saved_trace() -> None:
    st.session_state.pop("_mv_uploaded", None)
    st.session_state["_mv_upload_generation"] = st.session_state.get(
        "_mv_upload_generation", 0) + 1  # a new uploader widget: the old file is dropped


def saved_trace_picker(where=None) -> tuple[AttentionTrace | None, str | None]:
    """An uploader for a trace saved as .npz (by this app or AttentionTrace.save). It is read
    with allow_pickle=False, refused over MAX_UPLOAD_BYTES (unpacked) or when its maps are not
    attention (AttentionTrace.load), and stays open in this session (only) until closed.

    The trace itself is kept in the server's byte-bounded store with the traces it computes
    (mha_viz.core.budget), not in the session: many visitors' uploads cannot add up past the
    memory budget. If it was evicted to make room, the visitor is asked to open it again."""
    where = where or st.sidebar
    with where.expander("Open a saved trace (.npz)",
                        expanded="_mv_uploaded" in st.session_state):
        generation = st.session_state.get("_mv_upload_generation", 0)
        file = st.file_uploader("Trace file", type=["npz"], key=f"_mv_upload_{generation}",
                                help="A trace downloaded from this app, or written by "
                                     "AttentionTrace.save(). Never unpickled.")
        store = results_store()
        if file is not None:
            data = file.getvalue()
            digest = content_digest(data)
            current = st.session_state.get("_mv_uploaded")
            if current is None or current != digest or not store.get(_uploaded_key(digest))[0]:
                try:
                    trace = AttentionTrace.load(data, max_bytes=MAX_UPLOAD_BYTES)
                    budget.check_held(trace)  # its maps, or the queries and keys
                except MhaVizError as error:
                    st.error(f"This file cannot be opened: {md_escape(as_sentence(str(error)))}")
                    return None, None
                store.put(_uploaded_key(digest), trace)
                st.session_state["_mv_uploaded"] = digest
        digest = st.session_state.get("_mv_uploaded")
        if digest is None:
            return None, None
        found, trace = store.get(_uploaded_key(digest))
        if not found:
            _close_saved_trace()
            st.warning("The saved trace was set aside to free the server's memory: open the "
                       "file again to see it.")
            return None, None
        st.caption(f"Open: {md_escape(trace.model_name or 'a trace')}, "
                   f"{trace.n_tokens} tokens.")
        st.button("Close the saved trace", on_click=callback(_close_saved_trace),
                  key="_mv_close_upload")
        return trace, digest


def _uploaded_key(digest: str) -> tuple:
    return ("uploaded trace", digest)


# -------------------------------------------------------------- page controls


def head_picker(trace: AttentionTrace, where=None, default: tuple[int, int] | None = None
                ) -> tuple[int, int]:
    """Layer and head selectors (shared by all pages, kept in the URL as layer/head). Until
    the person picks one: ``default`` (e.g. opening(trace)[2:]), else L0.H0."""
    where = where or st
    default = default or (0, 0)
    left, right = where.columns(2)
    layer = synced(left.selectbox, "layer", "Layer", int(default[0]),
                   options=list(range(trace.n_layer)), format_func=lambda l: f"L{l}")
    head = synced(right.selectbox, "head", "Head", int(default[1]),
                  options=list(range(trace.n_head)), format_func=lambda h: f"H{h}")
    return layer, head


WEIGHTS_LABELS = {"attention": "Attention weights", "value": "What moves"}
WEIGHTS_HELP = ("**Attention weights**: the softmax, where each token reads from (every row "
                "sums to 1). **What moves**: each weight times the size of the vector its key "
                "sends through the head, ‖α_ij · f(x_j)‖ (Kobayashi et al. 2020), each row "
                "rescaled to sum to 1. A token that takes a large weight but sends a small "
                "vector (often the first token) moves little.")


def weights_switch(model: Model | None = None, where=None) -> str:
    """The "weights / what moves" switch every page that draws maps shares (synced as
    "weights": "attention" or "value", kept across pages and in the URL); -> what
    get_trace(selection, weights=...) should read. An encoder-decoder's maps are its weights
    only (Model.trace of a translator has no value-weighted form): "attention", said in a
    caption."""
    where = where or st
    choice = synced(where.radio, "weights", "The maps show", "attention",
                    options=list(WEIGHTS_LABELS), format_func=WEIGHTS_LABELS.get,
                    horizontal=True, help=WEIGHTS_HELP)
    if choice == "value" and model is not None and "value" not in model.map_weights:
        where.caption("What moves is computed for encoder-only and decoder-only models: "
                      "this encoder-decoder's maps show its attention weights.")
        return "attention"
    return choice


def opening(trace: AttentionTrace) -> tuple[int, int, int, int]:
    """(query, key, layer, head) to open the pages on (analysis.opening_view), computed once
    per trace: it reads one query row of every head, which a long input's maps rebuild
    layer by layer (each layer's queries and keys projected again: ~3 s of every run at
    2,048 SmolLM2 tokens, and the layer the page shows pushed out of their cache)."""
    return memo(_opening_of, trace)


def _opening_of(trace: AttentionTrace) -> tuple[int, int, int, int]:
    from ..analysis import opening_view

    return opening_view(trace, trace.display_tokens, trace.special_mask)


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
                         "renormalized to sum to 1 over the tokens still shown.")
    if choice == "none":
        return None
    from ..analysis import special_keep_mask

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


def shown_trace(selection: Selection, trace: AttentionTrace, keep: np.ndarray | None
                ) -> AttentionTrace:
    """The trace as shown after hiding tokens (analysis.shown_trace: the kept positions, rows
    renormalized; cached per input and choice), read like any trace; keep None returns the
    trace itself. analysis.kept_positions(shown) says where its tokens sit in the text."""
    if keep is None:
        return trace
    from ..analysis import shown_trace as restricted

    return memo(restricted, trace, large=True, keep_mask=keep)


METRIC_LABELS = {"logit_diff": "logit difference", "logit": "logit",
                 "logprob": "log-probability"}


def target_metric_picker(model: Model, tokens: Sequence[str], positions: Sequence[int],
                         top_two: Callable[[int], Sequence[int]],
                         decoder: bool = False) -> TargetMetric:
    """Controls for a target metric: the position, the target and contrast tokens (empty
    means the model's first and second guess there, from top_two(position)) and its kind.
    Their values live in the URL, so a metric chosen on Predictions carries to Pruning
    impact and back. decoder: an encoder-decoder's target positions, where tokens[i] is the
    target token predicted at position i (its URL key "token": "target" is the target text)."""
    positions = [int(p) for p in positions]
    pos_col, target_col, contrast_col, kind_col = st.columns(4)
    with pos_col:
        position = synced(st.selectbox, "position",
                          "Target position" if decoder else "Prediction at position",
                          positions[0] if decoder else positions[-1],
                          options=positions, valid=lambda p: int(p) in positions,
                          format_func=lambda i: f"{i}: {tokens[i]}",
                          help="The decoder's prediction of this target token, teacher-forced "
                               "on the tokens before it." if decoder else
                               "Causal models: the prediction made at this token, of the next "
                               "one. Masked-LM models: the filler of this position, masked.")
    guesses = [int(i) for i in top_two(int(position))][:2]
    shown = model.display_tokens(guesses)
    with target_col:
        target_text = synced(st.text_input, "token" if decoder else "target", "Target token", "",
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
