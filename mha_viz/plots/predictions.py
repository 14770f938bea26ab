"""Predictions: the text as a strip of tokens coloured by their loss (plots.tokens)."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from .picking import index_of_point
from .tokens import token_strip


def token_loss_strip(tokens: Sequence[str], loss: np.ndarray, hover: Sequence[str],
                     per_row: int = 12, title: str = "How surprised the model was by each token",
                     max_loss: float | None = None, clickable: bool = True,
                     given: str = "the tokens before it") -> go.Figure:
    """The text as a grid of cells, per_row tokens a row, each coloured by the loss of
    predicting it (-log p, nats; the first token is predicted by nothing and stays blank).
    hover[i] is shown over token i (e.g. what the model expected instead). clickable: the
    note invites a click (the page explains the clicked prediction); given: what each
    prediction is conditioned on, for the note."""
    finite = np.asarray(loss, dtype=float)
    finite = finite[np.isfinite(finite)]
    top = max_loss or (float(finite.max()) if finite.size else 1.0)
    # purple, not red: on the Predictions page red and blue say which way a head pushes the
    # prediction (one colour meaning per page)
    return token_strip(
        tokens, loss, hover, per_row=per_row, colorscale="Purples", zmax=top, title=title,
        note=(f"colour = −log p(token | {given}), from white (0) to dark purple "
              f"({max(top, 1e-6):.1f} nats); point at a token for the model's top guesses"
              + (", click or tap it to explain its prediction" if clickable else "")))


def strip_point_to_token(point: Mapping) -> int | None:
    """The token position of one selected point of ``token_loss_strip``, or None."""
    return index_of_point(point)
