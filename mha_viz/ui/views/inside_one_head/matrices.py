"""How Inside one head draws a step: its heading (number, symbol and shape), formula and
explanation, its matrix (whole, values written in, when small; a corner and a one-line
summary when large) and the matrix as CSV (not in a lesson, whose screen holds the step)."""

from __future__ import annotations

from functools import partial

import numpy as np
import streamlit as st

from .... import plots, ui
from ....server import export
from ... import lesson as lesson_mode
from ...words import inside_one_head as words
from ...words.one_head import Step
from .head import Head

VALUES_MAX = 40  # matrices up to this many rows and columns show their values in the cells
VIEW_ROWS = 64  # larger matrices: this many rows (tokens) are drawn ...
VIEW_COLS = 768  # ... and this many columns; the CSV has everything


def matrix_view(n_rows: int, n_cols: int, fmt: str) -> tuple[bool, int, int, str]:
    """How a step's matrix is drawn: (its values written in the cells, rows drawn, columns
    drawn, the values' format: wide rows get one decimal)."""
    small = n_rows <= VALUES_MAX and n_cols <= VALUES_MAX
    if small and n_cols > 20:
        fmt = ".1f"
    return small, min(n_rows, VIEW_ROWS), min(n_cols, VIEW_COLS), fmt


def show_matrix(array: np.ndarray, rows: list[str], cols: list[str], title: str, key: str,
                diverging: bool = True, colorscale: str | None = None, fmt: str = ".2f",
                row_title: str = "", col_title: str = "", share: float = 1.0,
                span: float | None = None, on_select=None) -> None:
    """Small: a heatmap with the values written in. Large: the top-left corner as a heatmap
    without values, plus a one-line summary of the whole array. span: the diverging scale's
    ±reach (default the drawn part's largest |value|). on_select: a click on a cell calls it
    (a query x key map: ui.pick_cell)."""
    small, n_rows, n_cols, fmt = matrix_view(*array.shape, fmt)
    fig = plots.tensor_figure(array[:n_rows, :n_cols], rows[:n_rows], cols[:n_cols], title,
                              show_values=small, diverging=diverging, colorscale=colorscale,
                              fmt=fmt, row_title=row_title, col_title=col_title, span=span,
                              pickable=on_select is not None)
    ui.show_figure(fig, key=key, alt=title, share=share, on_select=on_select)
    if not small and not lesson_mode.on_lesson_screen():  # a lesson's screen: the figure
        st.caption(words.summary_caption(array, n_rows, n_cols))


def step_header(number: int | str | None, step: Step, title: str | None = None,
                help_terms: bool = True, explain: bool = True) -> None:
    """A step's heading (its number, none on a lesson's screen; symbol and shape), formula
    and explanation (unless explain is False)."""
    st.markdown(f"#### {words.numbered(number)}{title or step.symbol}: {step.shape_text}")
    st.latex(step.formula)
    if explain:
        st.markdown(step.explanation, help=ui.terms_in(step.explanation) if help_terms else None)


def csv_button(h: Head, array, rows, cols, what: str, key: str) -> None:
    """A step's matrix as CSV (none in a lesson: its screen holds the step, the whole page
    has the downloads)."""
    if h.lesson:
        return
    ui.download_csv(partial(export.matrix_csv, array, rows, cols, corner=""),
                    export.safe_filename(h.stem, what, suffix=".csv"), f"{what} as CSV",
                    key=f"dl_{key}")


def pick(chart: str):
    """A click on a query x key matrix: follow that query, ask why about that key."""
    return partial(ui.pick_cell, chart, "query", "wk")


def matrix_step(h: Head, number_key: str, step: str, array, rows, cols, title: str, what: str,
                row_title: str, col_title: str, key: str | None = None,
                span: float | None = None, on_select=None, explain: bool = True) -> None:
    """A step's heading, its matrix and the matrix as CSV (number_key: the step's number;
    key: the figure's and the download's, the step's own by default; span: its colour scale's
    reach; explain: False leaves the step's sentence to the text that follows)."""
    step_header(h.num(number_key), h.steps[step], explain=explain)
    with lesson_mode.figure_place():
        show_matrix(array, rows, cols, title, key or step, row_title=row_title,
                    col_title=col_title, span=span, on_select=on_select,
                    share=lesson_mode.FIGURE_SHARE if h.lesson else 1.0)
        csv_button(h, array, rows, cols, what, key or step)
