"""The Circuits page's one prompt pair: the fields that depend on
the clean prompt and were set for another one, the pair's tokens side by side, the helper
that swaps one token to make the corrupted prompt, and the model's predictions as chips.
"""

from __future__ import annotations

import streamlit as st

from ....analysis import prompts
from ....core.errors import MhaVizError
from ...messages import callback, show_error
from ...settings import md_escape
from ...state import set_value
from ...stores import memo
from ...words import circuits as words

_MADE_FOR = "_mv_circuit_made_for"  # field -> the clean prompt it was last set for
_LAST_SEEN = "_mv_circuit_last_seen"  # field -> its value as the last run drew it


def stale_fields(clean: str, fields: dict[str, str]) -> tuple[list[str], str]:
    """The fields (name -> value) that depend on the clean prompt and were set for another
    one, and that prompt. A field whose value changed since the last run (typed, swapped,
    picked from the predictions) counts as set for the clean prompt of this run."""
    made_for = st.session_state.setdefault(_MADE_FOR, {})
    seen = st.session_state.setdefault(_LAST_SEEN, {})
    for name, value in fields.items():
        if name not in made_for or seen.get(name) != value:
            made_for[name] = clean
        seen[name] = value
    stale = [name for name in fields if made_for[name] != clean]
    return stale, (made_for[stale[0]] if stale else clean)


@callback
def keep_fields(clean: str, names: list[str]) -> None:
    made_for = st.session_state.setdefault(_MADE_FOR, {})
    for name in names:
        made_for[name] = clean


def stale_warning(where, stale: list[str], made_for: str, clean: str) -> None:
    """Says which fields were set for the previous clean prompt, with a button that keeps
    them for the new one."""
    with where.container():
        st.warning(words.stale_note(stale, made_for))
        st.button(words.KEEP_BUTTON, key="_mv_circuit_keep", on_click=keep_fields,
                  args=(clean, list(stale)))


def show_tokens(comparison: prompts.PromptComparison) -> None:
    """Both prompts' tokens side by side, the differing positions highlighted."""
    left, right = st.columns(2)
    for column, name, tokens in ((left, "Clean", comparison.clean_tokens),
                                 (right, "Corrupted", comparison.corrupted_tokens)):
        chips = " ".join(
            (f":orange-background[**{i}:{md_escape(t)}**]" if i in comparison.differing
             else f"`{i}:{md_escape(t)}`") for i, t in enumerate(tokens))
        column.markdown(f"**{name}: {len(tokens)} tokens**  \n{chips}")


def swap_helper(model, clean: str, tokens: list[str], at: int | None,
                expanded: bool = False) -> None:
    """A corrupted prompt made from the clean one with one token swapped: the clean
    prompt's tokens to choose from (a new prompt, new choices), `at` the one chosen first
    (None: the last)."""
    # opened, under its own label, when the corrupted prompt no longer fits the clean one
    # (a label seen before would keep the state the person left it in)
    with st.expander("Make a corrupted prompt from the new clean prompt: swap one of its "
                     "tokens" if expanded else
                     "Make a corrupted prompt: swap one token of the clean prompt",
                     expanded=expanded):
        swap_col, with_col, button_col = st.columns([2, 2, 1], vertical_alignment="bottom")
        choices = list(enumerate(tokens))
        picked = swap_col.selectbox(
            "Token to replace", choices, index=len(choices) - 1 if at is None else at,
            format_func=lambda choice: f"{choice[0]}: {choice[1]}", key="_mv_swap_pos")
        replacement = with_col.text_input("Replace it with", " John", key="_mv_swap_with",
                                          help="One token, with the space the word has in "
                                               "the text: ' John' for ␣John.")
        if button_col.button("Swap", key="_mv_swap"):
            try:
                set_value("corrupted", prompts.swap_token(model, clean, picked[0],
                                                          replacement))
                st.rerun()
            except MhaVizError as error:
                show_error(error)


def prediction_pills(model, clean: str, corrupted: str | None) -> None:
    """The model's top predictions after the clean prompt; a click makes one the target
    and the contrast what the corrupted prompt predicts most (the answer it pushes
    towards; the clean prompt's next guess while there is no fitting corrupted prompt)."""
    choices = top_predictions(model, clean)
    st.pills("The model's top predictions after the clean prompt (click one to make it "
             "the target; the contrast becomes the corrupted prompt's top prediction)",
             choices, format_func=lambda t: t.replace(" ", "␣"), key="_mv_circuit_pills",
             on_change=set_target_from_pills,
             args=(top_predictions(model, corrupted) if corrupted else choices,))


def top_predictions(model, text: str) -> list[str]:
    """The model's six likeliest next tokens after a text, as it would write them."""
    return [model.tokenizer.decode([int(i)]) for i in memo(model.predict, text,
                                                           k=6).top_ids[-1]]


@callback
def set_target_from_pills(contrasts: list[str]) -> None:
    """A prediction clicked: it becomes the target, the first of `contrasts` that is not
    it the contrast."""
    picked = st.session_state.get("_mv_circuit_pills")
    if picked:
        set_value("c_target", picked)
        others = [choice for choice in contrasts if choice != picked]
        if others:
            set_value("c_contrast", others[0])
