"""The text as the model reads it (Home): one box per token, its position above its text, and
the tokens the model wrote after the text (Continue) in boxes of their own colour, beside
their mark."""

from __future__ import annotations

import html

import streamlit as st

from .settings import WRITTEN_MARK

MAX_BOXES = 2048  # past this many tokens the rest is counted, not drawn

_CSS = """<style>
.mv-tokens {display: flex; flex-wrap: wrap; gap: 0.3rem; margin: 0.25rem 0 0.5rem;}
.mv-token {display: inline-flex; flex-direction: column; align-items: center;
  border: 1px solid rgba(49, 51, 63, 0.3); border-radius: 0.3rem; padding: 0.05rem 0.35rem;
  background: #f6f6f9; line-height: 1.25;}
.mv-token-pos {font-size: 0.7rem; color: rgba(49, 51, 63, 0.6);}
.mv-token-text {font-family: "Source Code Pro", monospace; font-size: 0.9rem;
  white-space: pre;}
.mv-written {background: #fff1c7; border-color: #c99a06;}
</style>"""


def token_boxes(tokens: list[str], written_from: int | None = None, where=None) -> None:
    """Draw the tokens as boxes (position and text); those from ``written_from`` on are the
    model's continuation, in boxes of their own colour."""
    where = where or st
    shown = tokens[:MAX_BOXES]
    boxes = "".join(
        f'<span class="mv-token{" mv-written" if written_from is not None and i >= written_from else ""}"'
        f' title="position {i}"><span class="mv-token-pos">{i}</span>'
        f'<span class="mv-token-text">{html.escape(token)}</span></span>'
        for i, token in enumerate(shown))
    where.html(f'{_CSS}<div class="mv-tokens">{boxes}</div>')
    if len(tokens) > len(shown):
        where.caption(f"… and {len(tokens) - len(shown):,} more tokens (the trace's download "
                      f"holds every one).")


def legend(written: int | None) -> str:
    """What the boxes are, in words; the written ones' mark when there are any."""
    text = ("Each box is one token, the piece of text the model reads as one unit, with its "
            "position above it (counted from 0). ␣ marks a space at the start of a token, ↵ a "
            "line break; ## marks a piece that continues a word (BERT).")
    if written:
        text += (f" The {written} yellow boxes marked {WRITTEN_MARK} are the model's "
                 f"continuation: every page reads your text and them together.")
    return text
