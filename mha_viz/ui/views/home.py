"""The Home page's view (app.py): what the app is, a link to every page with what it shows,
the lesson, "prepare every page" for a teacher's text, the model card and the tokens of the
current text as the model reads them."""

from __future__ import annotations

import streamlit as st

from ... import ui

INTRO = ("This app runs real checkpoints (BERT, GPT-2 and Llama-family models such as the "
         "bundled SmolLM2, and encoder-decoders: T5, BART, Marian and the bundled toy T5 "
         "translator) through our own multi-head-attention code and records, for every layer "
         "and head, how much each token attends to every other token. Pick a model and a text "
         "in the sidebar, then explore the maps on the pages listed there.")


def show() -> None:
    selection = ui.sidebar()
    with ui.guard():
        st.subheader("Pages")
        pages = [page for page in ui.page_files() if page.path != "app.py"]
        per_row = min(3, len(pages)) or 1
        for k, page in enumerate(pages):
            if k % per_row == 0:  # a row of columns at a time: on a phone they stack in order
                columns = st.columns(per_row)
            with columns[k % per_row]:
                st.page_link(page.path, label=f"**{page.label}**")
                st.caption(ui.md_escape(page.summary))

        st.page_link("pages/5_Inside_One_Head.py", icon="🎓", query_params={"lesson": "1"},
                     label="**A lesson: inside one head, one step per screen**",
                     help="Inside one head in lesson mode: X, Q, K, V, scores, mask, softmax, "
                          "W_O, chunked and flash attention, gradients and the KV cache, with "
                          "this model's real numbers for your text. Back / Next or the arrow "
                          "keys; add &present=1 to the link for a projector.")

        prepare_lesson(selection)

        st.subheader("Model card")
        if selection.model is None:
            ui.show_error(selection.model_error)
            st.stop()
        ui.model_card(selection.model)

        st.subheader("The text, as the model reads it")
        if selection.kind is not None:  # an encoder-decoder: the source, then the target
            seq = ui.get_seq2seq_trace(selection)
            for title, tokens in (("The source (the encoder reads it)", seq.source_tokens),
                                  ("The decoder's input (the start token, then the target)"
                                   if not seq.generated else "The decoder's input: the start "
                                   "token, then the model's own output", seq.target_tokens)):
                st.caption(title)
                st.code("  ".join(f"{i}:{token}" for i, token in enumerate(tokens)),
                        language=None, wrap_lines=True)
            trace = seq.as_trace("encoder")
        else:
            trace = ui.get_trace(selection)
            ui.trace_notes(trace)
            st.code("  ".join(f"{i}:{token}" for i, token in enumerate(trace.display_tokens)),
                    language=None, wrap_lines=True)
        st.caption("Each box is one token with its position. ␣ marks a leading space "
                   "(byte-level BPE: GPT-2, SmolLM2); ## marks a word piece that continues a "
                   "word (BERT).")
        ui.download_trace(selection, trace)

        st.subheader("How to read the maps")
        st.markdown(
            "- A **head** turns each token (a *query*) into a probability distribution over the "
            "tokens it can see (the *keys*); each row of a map sums to 1.\n"
            "- GPT-2 and SmolLM2 are **causal**: a token sees only itself and earlier tokens, so "
            "the upper triangle of their maps is empty. BERT sees the whole text in both "
            "directions.\n"
            "- Many heads park attention on [CLS], [SEP] or a causal model's first token when "
            "they have nothing better to do; hide them with the *Special tokens* option to see "
            "the rest.\n"
            f"- {ui.NUMBERING}")
        st.info(ui.CAVEAT)


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
