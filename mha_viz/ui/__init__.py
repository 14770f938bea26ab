"""Layer 7, ui: the Streamlit glue every page shares (the only folder that imports
streamlit): the sidebar's choices, stored results and jobs keyed by what made them, messages,
figures and downloads, the run policies; the pages' views (views/) and their words (words/).

May import: core, engine, checkpoints, maps, models, dictionaries, analysis, corpus, server, plots.

Shared Streamlit pieces for every page of the app (the only mha_viz module importing streamlit).

A page (pages/N_Name.py) is its title and one call to its view, ui/views/<page>.py, which
holds the page's widgets and calls into the library. A view's pattern::

    import streamlit as st
    from ... import analysis as A, plots, ui

    @dataclass(frozen=True)
    class Entropy:                                # what every section reads
        selection: ui.Selection
        trace: AttentionTrace
        values: np.ndarray

    def entropy_of(selection) -> Entropy:         # the page's choices, above its sections
        trace = ui.get_trace(selection)           # bad input: the message, the page stops
        return Entropy(selection, trace, ui.memo(A.entropy, trace))  # stored under its call

    def heads_section(e: Entropy) -> None:        # a section: a function of the context
        ui.show_figure(plots.layer_head_heatmap(e.values, "Entropy", "nats"), key="ent")

    SECTIONS = [heads_section, ui.Folded("One head", "one_head", one_head_section)]

    def show() -> None:                           # the page called page_setup(title, INTRO)
        selection = ui.sidebar(reads=MAPS)        # model, text(s), options; every page's
        with ui.guard():                          # MhaVizError -> st.error, anything else
            ui.show_sections(entropy_of(selection), SECTIONS)   # a generic message

What lives here:

- ``page_setup(title, intro)``: first call of every page: page config, the title, and the
  hand-over of the URL's query parameters to the widgets.
- ``app_pages(home)``: the pages app.py hands to st.navigation (the home page, then every
  pages/*.py, found by file name; Streamlit draws their links at the top of the sidebar).
- ``sidebar() -> Selection``: presentation mode, the model picker (the bundled smollm2 by
  default, see default_model(); hub ids, a local folder), the text, sentence B for BERT,
  example texts, max tokens, the PNG/SVG switch and the attention caveat. Everything is kept
  across pages and in the URL. ``Selection.model`` is the loaded Model (or None and
  ``Selection.model_error``); ``Selection.key`` identifies the input.
- ``get_seq2seq_trace(selection)``: an encoder-decoder's EncoderDecoderTrace (the sidebar's
  source and target); for one, ``get_trace`` gives the self-attention of the stack the
  sidebar picked (``selection.map_set``, maps.sets: a square set); a page that reads
  cross-attention draws it from the EncoderDecoderTrace. ``sidebar(reads=MAPS)``: the sets
  a page reads; where the set chosen is not one of them the page says so and stops.
- ``get_model(name)`` (cached, raises MhaVizError), ``get_trace(selection)`` (cached per
  (model, text, pair, max_tokens); shows the error and stops the page on bad input).
- ``synced(widget, name, label, default, ...)``: any widget whose value survives page
  switches and lives in the URL's query parameter ``name``; ``set_value``/``get_value``
  change/read it from code (e.g. in a callback). Draw each synced name once per page.
- ``weights_switch(model)``: "attention" or "value" (what heads move), the shared "weights"
  switch; ``get_trace(selection, weights=...)`` reads it.
- ``head_picker(trace)`` (shared "layer"/"head"), ``hide_special_toggle(trace)`` (keep mask),
  ``shown_trace(selection, trace, keep)`` (the trace with hidden tokens removed, rows
  renormalized, read like any trace, long or short), ``hidden_note``, ``trace_notes``
  (token count, truncation warning).
- ``memo(fn, *args, **kwargs)``, ``computed`` (a job with progress), ``run_or_wait`` (a job
  behind a button past a size): a result stored under ``result_key(fn, *args, **kwargs)``, the
  function's qualified name and one digest of its arguments (mha_viz.core.digest: a model or a
  trace names itself by what made it), so one call from two pages is one result. No page
  builds a key. ``RUNS_ON_OPEN`` (settings): what runs by itself on opening, up to which size.
- ``show_figure(fig, key, on_select=None)``: st.plotly_chart with the app's config;
  ``show_built(build, *args, key=..., **kwargs)``: the same for ``build(*args, **kwargs)``,
  built and laid out once for every session asking it for the same screen and input.
- ``download_csv``, ``download_bytes``, ``download_trace``: download buttons (pass a callable
  to build big files only when clicked); ``image_format()``: "png" or "svg".
- ``guard()`` around a page body, ``callback(fn)`` around widget callbacks, ``show_error``.
- ``model_card``, ``caveat``, ``md_escape`` (text into markdown as itself), ``NUMBERING``.

Cached objects (models, traces, memo results) are shared between sessions: never mutate them.

The package, by concern (a page imports ``mha_viz.ui`` and its view):

- ``settings``: defaults, model choices, example texts, limits, the run policies
  (``RUNS_ON_OPEN``: what a page runs by itself on opening, up to which size); ``md_escape``.
- ``state``: ``synced`` widget values kept across pages and in the URL; presentation mode.
- ``messages``: ``show_error``, ``guard``, ``callback``: errors without tracebacks or paths.
- ``loading``: the loaded models (``get_model``); ``selection``: what the sidebar chose
  (``Selection``); ``stores``: results kept under the key of their call (``memo``);
  ``jobs``: long computations with progress (``computed``, ``run_or_wait``); ``traces``:
  the forward store and the traces and runs read through the Selection (``get_trace``).
- ``gestures``: one tap picks a figure's point; ``ask_scroll``/``scroll_anchor`` bring what a
  click changed into view.
- ``output``: ``page_setup``, figures fitted to the screen, downloads, model card, notes.
- ``controls``: the sidebar and the page widgets (head, hidden tokens, target metric);
  ``reads``: which sets of maps a page reads, and what the sidebar says where it does not.
- ``why``: why a head attends where it does, for a clicked cell (``why_section``,
  ``pick_cell``, ``marked_cell``: the cell outlined on the map): its score by source, its
  sums, and who composes into it.
- ``why_features``: the why panel "in features" (a residual dictionary of the head's layer:
  the score as feature pairs, with the error and bias terms). ``dictionaries``: the
  dictionaries a page reads for a model (the bundled ones that fit it, a SAELens folder of
  the server's allowed folders), read once and checked against the model.
- ``warm``: the warm start and "prepare every page" (RUNS_ON_OPEN's warm results).
- ``continuation``: the model's continuation of the sidebar's text (Home's Continue): asked
  for in the session and the URL (cont, ctemp, cseed), written as a job, read by every page
  with the written tokens marked (settings.WRITTEN_MARK; traces marks the traces and runs).
- ``token_boxes``: Home's text as one box per token. ``narrow``: what a phone needs (the
  folded sidebar's button names what it holds; the sidebar folds once a page is chosen).
- ``sections``: a page is a context and its sections (``show_sections``, ``Folded``).
- ``views``: one module per page (its controls and sections), the top of ui: nothing in ui
  imports a view. ``words``: labels, button texts, captions and number formats.
"""

from .jobs import cancelled, clear, computed, job_runner, run_or_wait
from .loading import get_model
from .selection import Selection
from .stores import memo, peek, result_key
from .traces import get_run, get_seq2seq_trace, get_trace, masked_trace, set_figure_meta
from .controls import (METRIC_LABELS, PageFile, app_pages, head_picker, hide_special_toggle,
                       opening, page_files, saved_trace_picker, shown_trace, sidebar,
                       target_metric_picker, weights_switch)
from .lesson import lesson_step
from .messages import GENERIC_ERROR, callback, guard, show_error, without_server_paths
from .gestures import ask_scroll, scroll_anchor
from .model_card import attention_cost, kv_cache_card, model_card
from .output import (GRID_CELL_PX_PRESENTING, STACKED_BELOW_PX, caveat, column_share,
                     download_bytes, download_csv, download_trace, drawn_when_opened,
                     figure_columns, figure_screen, hidden_note, kv_sharing_note, layer_window,
                     long_input_note, narrow_screen, one_pass_is_quick, page_setup,
                     section_open_key, show_built,
                     show_figure, too_long_for, trace_notes, viewport)
from .sections import Folded, show_sections
from .settings import (APP_DIR, APP_NAME, CAVEAT, DEFAULT_MAX_TOKENS, DEFAULT_MODEL, DEFAULT_TEXT,
                       EXAMPLES, IMAGE_FORMATS, LONG_RANGE_DEFAULTS, MAX_UPLOAD_BYTES, NUMBERING,
                       PRUNING_DEFAULTS, RUNS_ON_OPEN, TERMS, URL_MAX_CHARS, OnOpen,
                       configure_torch, default_model, kept_whole, long_range_window, md_escape,
                       pruning_runs_on_open, ray_cluster, runs_on_open, terms_in)
from .state import get_value, image_format, presenting, set_value, synced
from .warm import prepare as prepare_lesson
from .why import marked_cell, pick_cell, why_body, why_panel, why_section
from .runs import as_page_run, page_run

configure_torch()

__all__ = [
    "Selection", "page_setup", "sidebar", "get_model", "get_trace", "get_run", "synced",
    "get_seq2seq_trace",
    "set_value", "get_value", "presenting", "head_picker", "hide_special_toggle",
    "shown_trace", "weights_switch", "hidden_note", "long_input_note", "one_pass_is_quick",
    "too_long_for", "opening", "memo", "computed", "run_or_wait", "result_key", "peek",
    "cancelled", "clear", "job_runner", "masked_trace", "target_metric_picker",
    "METRIC_LABELS", "show_figure", "show_built", "figure_screen", "narrow_screen", "viewport", "STACKED_BELOW_PX",
    "set_figure_meta", "download_bytes", "download_csv", "download_trace", "image_format",
    "show_error", "without_server_paths", "guard", "callback", "model_card", "trace_notes",
    "kv_sharing_note", "lesson_step", "attention_cost", "kv_cache_card", "figure_columns",
    "column_share", "drawn_when_opened", "section_open_key", "layer_window",
    "GRID_CELL_PX_PRESENTING", "caveat", "ask_scroll", "scroll_anchor",
    "md_escape",
    "app_pages", "page_files", "PageFile",
    "saved_trace_picker", "default_model", "APP_DIR", "APP_NAME", "EXAMPLES", "CAVEAT",
    "NUMBERING", "GENERIC_ERROR", "DEFAULT_MODEL", "DEFAULT_TEXT", "DEFAULT_MAX_TOKENS",
    "IMAGE_FORMATS", "MAX_UPLOAD_BYTES", "URL_MAX_CHARS", "ray_cluster", "TERMS", "terms_in",
    "RUNS_ON_OPEN", "OnOpen", "runs_on_open", "pruning_runs_on_open", "PRUNING_DEFAULTS",
    "LONG_RANGE_DEFAULTS", "kept_whole", "long_range_window",
    "prepare_lesson", "page_run", "as_page_run", "pick_cell", "why_body", "why_panel",
    "why_section", "marked_cell", "Folded", "show_sections",
]
