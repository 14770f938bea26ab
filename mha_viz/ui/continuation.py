"""The model's continuation of the sidebar's text (Continue, on Home): what was asked for,
kept in the session and in the URL (``cont``: how many tokens the model wrote; ``ctemp`` and
``cseed``: its temperature and seed when it sampled), written as a job with progress and
Cancel, and the text every page then reads: the sidebar's text followed by what the model
wrote, whose written tokens every trace marks (settings.WRITTEN_MARK; traces._marked).

The continuation belongs to the text and the model it was written for: when either changes
it is removed, and the sidebar says so; a change of its temperature or seed writes it again.
A link reproduces it: the same text, model, count, temperature and seed write the same tokens
(greedy always; sampled from the seed)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import streamlit as st

from ..core.errors import MhaVizError
from ..models.generation import Generation
from ..models.model import Model
from . import link_notes
from .jobs import computed
from .messages import callback, show_error
from .settings import WRITTEN_MARK, as_sentence, max_tokens_within, md_escape
from .state import get_value, incoming_value, set_value, take_url_value, write_url_value

COUNT, TEMPERATURE, SEED = "cont", "ctemp", "cseed"  # their names in the URL and the session
MAX_TOKENS = "max_tokens"  # the sidebar's Max tokens, as the controls name it
MAX_COUNT = 100_000  # a link asking for more is ignored
_FOR = "_mv_cont_for"  # (model name, text) the continuation was written for
_NOTE = "_mv_cont_note"  # (message, (model name, text)) shown while that input stays
_RESTART = "_mv_cont_restart"  # the person asked again: a cancelled job may start over
_BEFORE = "_mv_cont_before"  # the count before the last request (restored on Cancel)
STOPPED = {"length": "",
           "end_of_text": "It stopped at its end-of-text token.",
           "context": "It stopped at the end of the model's context.",
           "cancelled": "It was stopped."}


def write(model: Model, prompt: str, max_new_tokens: int, temperature: float = 0.0,
          seed: int | None = None, progress=None) -> Generation:
    """model.generate without a trace (the pages trace the whole text themselves, so every
    page's results are those of that text), its progress reported as a job reports it:
    progress(done, total)."""
    step = None if progress is None else (lambda done, total, _token: progress(done, total))
    return model.generate(prompt, max_new_tokens, temperature, seed, progress=step,
                          trace=False)


def why_not(model: Model | None) -> str | None:
    """Why this model cannot continue a text (None: it can), in a reader's words."""
    if model is None:
        return "no model is loaded"
    info = model.info
    if info.encoder_decoder:
        return (f"{info.model_type.upper()} is an encoder-decoder: its decoder writes its own "
                f"output from the source (shown when the target is left empty)")
    if not info.causal:
        return (f"{info.name} reads the whole text at once, in both directions: it has no next "
                f"token to write. A causal model (SmolLM2, GPT-2) writes one")
    if not info.has_lm_head:
        return f"{info.name} has no language-model head: it gives embeddings, not tokens"
    return None


@dataclass(frozen=True)
class Asked:
    """What the person asked the model to write after the text."""
    count: int  # tokens in all (0: none)
    temperature: float  # 0: the most likely token each time
    seed: int  # the sampling seed (read only when temperature > 0)

    @property
    def sampled(self) -> bool:
        return self.temperature > 0

    @property
    def how(self) -> str:
        return (f"sampled at temperature {self.temperature:g}, seed {self.seed}" if self.sampled
                else "greedy: each time the most likely token")


def asked() -> Asked:
    return Asked(int(get_value(COUNT, 0) or 0), float(get_value(TEMPERATURE, 0.0) or 0.0),
                 int(get_value(SEED, 0) or 0))


def _from_link(name: str, prompt: str) -> None:
    """A link's cont / ctemp / cseed, taken once; a count arriving with a link is the
    continuation of the link's text. A value refused gets a line saying what is used."""
    for key, parse, ok in ((COUNT, int, lambda v: 0 <= v <= MAX_COUNT),
                           (TEMPERATURE, float, lambda v: math.isfinite(v) and 0 <= v <= 100),
                           (SEED, int, lambda v: 0 <= v < 2 ** 63)):
        raw = take_url_value(key)
        if raw is None:
            continue
        try:
            value = parse(raw)
        except (TypeError, ValueError):
            value = None
        if value is not None and ok(value):
            set_value(key, value)
            if key == COUNT:
                st.session_state[_FOR] = (name, prompt)
        else:
            link_notes.refuse(key, _refused_line(key, link_notes.shown_value(raw), asked()))


def _refused_line(key: str, value: str, used: Asked) -> str:
    """What a link's refused cont, ctemp or cseed was, and what the model does instead."""
    if key == COUNT:
        return (f"The link's cont={value} is not a number of tokens to write (a whole number "
                f"from 0 to {MAX_COUNT:,}): "
                + (f"the {used.count:,} tokens written before stay." if used.count else
                   "the model wrote nothing after the text."))
    if key == TEMPERATURE:
        return (f"The link's ctemp={value} is not a temperature (a number from 0 to 100): "
                + (f"the model writes at temperature {used.temperature:g}." if used.sampled
                   else "the model writes greedily (temperature 0: the most likely token)."))
    return (f"The link's cseed={value} is not a seed (a whole number from 0 to 2⁶³ − 1): "
            f"seed {used.seed} is used" + ("." if used.sampled else
                                          ", and read only when the model samples."))


def _note(message: str, name: str, prompt: str) -> None:
    st.session_state[_NOTE] = (message, (name, prompt))


def note_for(name: str, prompt: str) -> str | None:
    """The last message about the continuation, while the text and model it was about stay."""
    found = st.session_state.get(_NOTE)
    return found[0] if found and found[1] == (name, prompt) else None


def _drop(message: str | None, name: str, prompt: str) -> None:
    set_value(COUNT, 0)
    if message:
        _note(message, name, prompt)


def in_sidebar(bar, model: Model | None, name: str, prompt: str) -> Generation | None:
    """The continuation asked for (from the session or a link), written now if it has not
    been (a job, its progress on the page), shown under the sidebar's text with a button that
    removes it; None when there is none. Writes cont/ctemp/cseed into the URL."""
    _from_link(name, prompt)
    wanted = asked()
    generation = None
    if wanted.count > 0 and st.session_state.get(_FOR) != (name, prompt):
        _drop("The text or the model changed, so the model's continuation of the previous "
              "one was removed. *Continue* on Home writes a new one.", name, prompt)
    elif wanted.count > 0 and why_not(model):
        _drop(f"No continuation here: {as_sentence(why_not(model))}.", name, prompt)
    elif wanted.count > 0:
        wanted = _within_pages(model, name, prompt, wanted)
        if wanted.count > 0:
            generation = _written(model, name, prompt, wanted)
    wanted = asked()
    write_url_value(COUNT, str(wanted.count) if wanted.count else None)
    # as Home's synced widget writes it (str of a float), so the two never disagree
    write_url_value(TEMPERATURE, str(wanted.temperature) if wanted.count and wanted.sampled
                    else None)
    write_url_value(SEED, str(wanted.seed) if wanted.count and wanted.sampled else None)
    note = note_for(name, prompt)
    if note:
        bar.caption(note)
    if generation is not None:
        bar.caption(f"{WRITTEN_MARK} **Then the model's continuation** "
                    f"({len(generation.new_ids)} tokens, {'sampled' if wanted.sampled else 'greedy'}"
                    f"), read with your text on every page: “{md_escape(_short(generation.text))}”")
        bar.button("Remove the continuation", key="_mv_cont_remove_sidebar",
                   on_click=callback(remove))
    return generation


def _pages_limit(model: Model) -> int:
    """The most tokens the pages read: the sidebar's Max tokens (as last drawn, or as a link
    brings it before its widget is drawn), read by the widget's own rule."""
    return max_tokens_within(get_value(MAX_TOKENS, incoming_value(MAX_TOKENS)),
                             int(model.info.max_positions))


def _within_pages(model: Model, name: str, prompt: str, wanted: Asked) -> Asked:
    """A count cut to what the pages read: a link can ask for up to MAX_COUNT tokens, and
    writing past Max tokens would spend the server's time on tokens no page shows. Home's
    button asks only for what fits (ask_more), so the cut is a link's alone."""
    limit = _pages_limit(model)
    left = limit - model.n_tokens(prompt)
    if wanted.count <= left:
        return wanted
    set_value(COUNT, max(0, left))
    link_notes.refuse(COUNT, f"{wanted.count:,} tokens to write were asked for (cont="
                             f"{wanted.count}); {max(0, left):,} fit before *Max tokens* "
                             f"({limit:,}), so the model wrote {max(0, left):,}.")
    if left <= 0:
        _note("The text already fills *Max tokens*: the model wrote nothing after it.", name,
              prompt)
    return asked()


def _short(text: str, size: int = 160) -> str:
    return text if len(text) <= size else text[:size].rstrip() + "…"


def _written(model: Model, name: str, prompt: str, wanted: Asked) -> Generation | None:
    """The generation asked for, or None (cancelled, refused: said so, the count restored)."""
    restart = bool(st.session_state.pop(_RESTART, False))
    try:
        generation = computed(write, model, prompt, wanted.count,
                              temperature=wanted.temperature,
                              seed=wanted.seed if wanted.sampled else None, restart=restart,
                              label="The model is writing its continuation",
                              unit=("tokens", 1.0))
    except MhaVizError as error:
        show_error(error)
        _drop(None, name, prompt)
        return None
    if generation is None:  # cancelled: the continuation before this request stays
        set_value(COUNT, int(st.session_state.pop(_BEFORE, 0) or 0))
        _note("Cancelled: nothing more was written.", name, prompt)
        return _written(model, name, prompt, asked()) if asked().count else None
    return generation


def remove() -> None:
    """The continuation removed (a button's callback): the pages read the typed text alone."""
    set_value(COUNT, 0)
    st.session_state.pop(_NOTE, None)


@dataclass(frozen=True)
class Room:
    """How many tokens can still be written after the text."""
    used: int  # the text's tokens and those already written
    limit: int  # the most the pages read: the model's context or Max tokens
    by_max_tokens: bool  # the limit is the sidebar's Max tokens, not the context

    @property
    def left(self) -> int:
        return max(0, self.limit - self.used)


def room(model: Model, prompt: str, written: Generation | None, max_tokens: int | None) -> Room:
    n_prompt = model.n_tokens(prompt) if written is None else written.prompt_length
    used = n_prompt + (0 if written is None else len(written.new_ids))
    context = int(model.info.max_positions)
    limit = context if max_tokens is None else min(int(max_tokens), context)
    return Room(used, limit, limit < context)


def ask_more(name: str, prompt: str, count: int, space: Room) -> str | None:
    """Ask for ``count`` more tokens (a button): None when asked, else why not (0 tokens, past
    the context or Max tokens)."""
    if count < 1:
        return "Ask for one token or more: 0 tokens writes nothing."
    if count > space.left:
        where = ("*Max tokens* (in the sidebar's Options) is " if space.by_max_tokens
                 else "the model's context is ")
        more = (f"at most {space.left:,} more can be written" if space.left else
                "nothing more can be written")
        return (f"{count:,} tokens is past the end: the text is {space.used:,} tokens and "
                f"{where}{space.limit:,}, so {more}."
                + (" Raise *Max tokens* to write more." if space.by_max_tokens else ""))
    now = asked().count
    st.session_state[_BEFORE] = now
    st.session_state[_FOR] = (name, prompt)
    st.session_state[_RESTART] = True
    st.session_state.pop(_NOTE, None)
    set_value(COUNT, now + count)
    return None


def explain_mark(generation: Generation, where=None) -> None:
    """What the mark means, once per page (the top of the page; where: elsewhere, a lesson's
    sidebar)."""
    (where or st).caption(f"{WRITTEN_MARK} marks the {len(generation.new_ids)} tokens the model wrote "
               f"after your text (*Continue*, on Home): this page reads your text and them "
               f"together.")


def written_from(trace) -> int | None:
    """Where the model's continuation starts in a trace the pages read (None: it has none)."""
    start = trace.prompt_length
    return None if start is None or start >= trace.n_tokens else int(start)


def marked_labels(trace, labels: list[str]) -> list[str]:
    """Labels of a trace's positions (e.g. a prediction's tokens) with the written ones marked,
    as the trace marks its own display tokens."""
    start = written_from(trace)
    if start is None:
        return list(labels)
    return [label if i < start or label.startswith(WRITTEN_MARK) else WRITTEN_MARK + label
            for i, label in enumerate(labels)]
