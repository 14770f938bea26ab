"""The pruning curve, one section for every kind of model (Pruning impact): what it ranks
heads by and how many go per step, the curve itself and its CSV."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import streamlit as st

from .... import plots, ui
from ....analysis import pruning
from ....server import export
from ...words import pruning as words


def curve_controls(default_by: str) -> tuple[str, float]:
    """What the pruning curve ranks heads by, and the share of heads removed per step."""
    left, right = st.columns(2)
    with left:
        by = ui.synced(st.radio, "by", "Remove first the heads with the smallest", default_by,
                       options=list(words.CURVE_RANKINGS), format_func=words.CURVE_RANKINGS.get,
                       horizontal=True, help="After each step the importance of the remaining "
                                             "heads is estimated again (Michel et al.'s "
                                             "iterative pruning).")
    with right:
        step = ui.synced(st.radio, "step", "Heads removed per step", 0.1, options=[0.1, 0.05],
                         format_func=lambda s: f"{s:.0%}", horizontal=True)
    return by, step


def pruning_curve_section(heading: str, default_by: str, total_heads: int,
                          run: Callable, *, baseline: float, score_unit: str, title: str,
                          table: Callable, file_stem: str, refused: str | None = None,
                          after_figure: Callable | None = None) -> None:
    """The pruning curve: its controls, ``run(by, step, per_step, steps)`` (the curve, or None
    while it waits for its button), the figure and its CSV (``table(curve)``). ``refused``: why a
    gradient ranking cannot run here. ``after_figure(curve)`` draws more below the figure."""
    st.subheader(heading)
    by, step = curve_controls(default_by)
    if refused and by == "gradient":
        st.info(refused + " Rank the heads by their ablation effect instead.")
        return
    curve = run(by, step, *pruning.curve_steps(total_heads, step))
    if curve is None:
        st.info("The curve re-estimates importance after every step; press the button to run "
                "it. A bar shows its progress.")
        return
    fig = plots.pruning_curve_figure(
        curve.fractions, curve.scores, baseline=baseline, score_name=score_unit,
        title=f"{title} as heads are removed (by {words.CURVE_RANKINGS[by]})")
    ui.show_figure(fig, key="curve", alt="Pruning curve")
    if after_figure is not None:
        after_figure(curve)
    ui.download_csv(partial(export.table_csv, table(curve)),
                    export.safe_filename(file_stem, "pruning_curve", by, suffix=".csv"),
                    "Pruning curve as CSV", key="dl_curve")
