"""The Home page's view (app.py): what the app is and where its controls are, the text as
the model reads it, Continue (the model writes after the text), how to read the maps, a link
to every page with what it shows, the lesson, "prepare every page" for a teacher's text, and
last the model's card."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from ... import ui
from .. import continuation
from ..settings import WRITTEN_MARK
from ..narrow import SIDEBAR_BUTTON
from ..token_boxes import legend, token_boxes
from ..words import home as words

MAPS = ("self", "encoder", "decoder", "cross")  # the sets of maps the page reads (maps.sets)
INTRO = ("See what the attention heads of a language model do with your text: for every "
         "layer and head, how much each token reads from every other token. Choose the model "
         "and type your text in the sidebar: on the left of the page, or, where it is folded "
         f"(on a phone), behind **» {SIDEBAR_BUTTON}** at the top left. The pages listed "
         "below, and at the top of the sidebar, each show one view of the same text.")


def home() -> None:
    """The Home page, as app.py's navigation lists it (at the site's root)."""
    ui.page_setup("mha-viz: look inside multi-head attention", INTRO)
    show()


@dataclass(frozen=True)
class Home:
    """What Home's sections read: the selection and the trace its download saves."""
    selection: ui.Selection
    trace: object


def home_of(selection: ui.Selection) -> Home:
    st.subheader("Your text, as the model reads it")
    return Home(selection, text_as_tokens(selection))


def continue_section(h: Home) -> None:
    continue_text(h.selection)


def how_to_read(h: Home) -> None:
    st.subheader("How to read the maps")
    st.markdown(words.HOW_TO_READ + f"\n- {ui.NUMBERING}")


def pages_section(h: Home) -> None:
    pages(h.selection)


def about_model(h: Home) -> None:
    st.subheader("About this model")
    ui.model_card(h.selection.model)
    ui.download_trace(h.selection, h.trace)
    st.info(ui.CAVEAT)


SECTIONS = [continue_section, how_to_read, pages_section, about_model]


def show() -> None:
    selection = ui.sidebar(reads=MAPS, explains_mark=False)
    lesson_link()
    with ui.guard():
        if selection.model is None:
            ui.show_error(selection.model_error)
            pages(selection)
            st.stop()
        ui.show_sections(home_of(selection), SECTIONS)


def text_as_tokens(selection):
    """The boxes of the text's tokens (an encoder-decoder: the source's, then the decoder's
    input) and what a box is; -> the trace the page's download saves."""
    if selection.kind is not None:  # an encoder-decoder: the source, then the target
        seq = ui.get_seq2seq_trace(selection)
        for title, tokens in (("The source (the encoder reads it)", seq.source_tokens),
                              ("The decoder's input (the start token, then the target)"
                               if not seq.generated else "The decoder's input: the start "
                               "token, then the model's own output", seq.target_tokens)):
            st.caption(title)
            token_boxes(list(tokens))
        st.caption(legend(None))
        return seq.as_trace("encoder")
    trace = ui.get_trace(selection)
    ui.trace_notes(trace)
    written = continuation.written_from(trace)
    token_boxes(list(trace.display_tokens), written)
    st.caption(legend(None if written is None else trace.n_tokens - written))
    return trace


def continue_text(selection) -> None:
    """Continue: the model writes after the text (how many tokens, greedy or sampled), with
    progress and Cancel; what it wrote, why it stopped, and a button that removes it."""
    model = selection.model
    st.subheader("Let the model continue your text")
    refused = continuation.why_not(model)
    if refused or selection.uploaded is not None:
        st.caption(f"No *Continue* here: {ui.md_escape(refused)}." if refused else
                   "A saved trace is open in the sidebar: close it to let the model write.")
        return
    st.caption(words.CONTINUE + WRITTEN_MARK + ".")
    count_col, temperature_col, seed_col, button_col = st.columns(
        4, vertical_alignment="bottom")
    count = ui.synced(count_col.number_input, "cont_n", "Tokens to write", 20, min_value=0,
                      max_value=continuation.MAX_COUNT, step=5,
                      help="How many tokens the model writes after the text (it stops sooner "
                           "if it writes its end-of-text token).")
    temperature = ui.synced(temperature_col.number_input, continuation.TEMPERATURE,
                            "Temperature", 0.0, min_value=0.0, max_value=5.0, step=0.1,
                            help="0: always the most likely token (the same text every time). "
                                 "Above 0: drawn from the model's probabilities, sharpened "
                                 "below 1 and flattened above it.")
    ui.synced(seed_col.number_input, continuation.SEED, "Seed", 0, min_value=0,
              max_value=2 ** 31 - 1, step=1, disabled=not temperature,
              help="The random draws when the temperature is above 0: the same seed writes the "
                   "same tokens.")
    written = selection.generation
    pressed = button_col.button("Continue further" if written else "Continue",
                                type="primary", key="_mv_continue", width="stretch")
    room = continuation.room(model, selection.typed_text, written, selection.max_tokens)
    if pressed:
        refused = continuation.ask_more(selection.model_name, selection.typed_text, int(count),
                                        room)
        if refused is None:
            st.rerun()
        st.warning(refused)
    note = continuation.note_for(selection.model_name, selection.typed_text)
    if note:
        st.caption(note)
    if written is None:
        return
    asked = continuation.asked()
    st.markdown(f"**The model wrote {len(written.new_ids)} tokens** ({asked.how}; "
                f"{written.tokens_per_second:,.0f} tokens a second). "
                f"{continuation.STOPPED[written.stop_reason]}")
    with st.container(border=True):
        st.markdown(ui.md_escape(written.text))
    st.button("Remove the continuation", key="_mv_cont_remove_home",
              on_click=ui.callback(continuation.remove))


def pages(selection) -> None:
    """A link to every page with what it shows, and "prepare every page"."""
    st.subheader("Pages")
    files = [page for page in ui.page_files() if page.path != "app.py"]
    per_row = min(3, len(files)) or 1
    for k, page in enumerate(files):
        if k % per_row == 0:  # a row of columns at a time: on a phone they stack in order
            columns = st.columns(per_row)
        with columns[k % per_row]:
            st.page_link(page.path, label=f"**{page.label}**")
            st.caption(ui.md_escape(page.summary))

    prepare_lesson(selection)


def lesson_link() -> None:
    """The lesson, where a teacher finds it: above the text, on the first screen."""
    st.page_link("pages/5_Inside_One_Head.py", icon="🎓", query_params={"lesson": "1"},
                 label="**A lesson: inside one head, one step per screen**",
                 help="Inside one head in lesson mode: X, Q, K, V, scores, mask, softmax, "
                      "W_O, chunked and flash attention, gradients and the KV cache, with "
                      "this model's real numbers for your text. Back / Next or the arrow "
                      "keys; add &present=1 to the link for a projector. \"Prepare every "
                      "page\", under the pages, readies them for your text.")


def prepare_lesson(selection) -> None:
    """A teacher's own text: every page's heavy work done now, with progress, so that in
    class each page opens at once."""
    if selection.model is None or selection.uploaded is not None:
        return
    if not st.button("Prepare every page for this text", key="prepare_lesson",
                     help="Runs now what the pages compute first for this model and text (the "
                          "maps, the predictions, the pruning sweep, gradients and curve), so "
                          "that during a lesson every page opens without waiting."):
        return
    bar = st.progress(0.0, text="Preparing…")
    ui.prepare_lesson(selection.model_name, selection.text, selection.text_pair,
                      selection.max_tokens,
                      progress=lambda done, total, what: bar.progress(
                          done / total, text=f"Prepared {what} ({done} of {total})"))
    bar.progress(1.0, text="Every page is ready for this text.")
