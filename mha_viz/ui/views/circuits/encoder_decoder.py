"""The Circuits page on an encoder-decoder: the sidebar's source is clean, a corrupted source
is typed here, and every head of every kind (each set of the model's maps) is patched between
the two runs of one target, measured at the first target token the corruption changes."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import streamlit as st

from .... import plots, ui
from ....analysis.encoder_decoder_ablation import total_heads
from ....analysis.encoder_decoder_patching import activation_patching_seq2seq, first_divergence
from ....models.model import TargetMetric
from ....server import export
from ...settings import EXAMPLES
from ...words import circuits as words
from .shown import FIXED_SPAN, KIND_TITLES, seq2seq_runs_by_itself, seq2seq_table


@dataclass(frozen=True)
class SourcesPatched:
    """Every head of every kind patched between a clean and a corrupted source."""
    selection: ui.Selection
    corrupted: str
    direction: str
    result: object  # analysis.Seq2SeqPatching


def sources_patched(selection: ui.Selection) -> SourcesPatched | None:
    """The corrupted source, the metric it changes and the patches (None, said on the page:
    nothing to patch yet)."""
    model = selection.model
    example = next((e for e in EXAMPLES.values() if e["text"] == selection.text), {})
    st.caption(words.SEQ2SEQ_PAIR)
    corrupted = ui.synced(st.text_input, "c_corrupted", "Corrupted source",
                          example.get("corrupted", ""),
                          placeholder="the source with one word changed")
    if not corrupted.strip():
        st.info("Type a corrupted source above to patch.")
        return None
    found = ui.memo(first_divergence, model, clean=selection.text, corrupted=corrupted,
                    target=selection.target)
    if found is None:
        st.info(words.SAME_ANSWER)
        return None
    position, clean_token, corrupted_token = found
    shown = model.display_tokens([clean_token, corrupted_token])
    direction = ui.synced(st.radio, "c_direction", "Patch", "denoise",
                          options=["denoise", "noise"], horizontal=True,
                          format_func=words.SEQ2SEQ_DIRECTIONS.get, help=words.DIRECTION_HELP)
    metric = TargetMetric(position, clean_token, corrupted_token)
    st.markdown(words.seq2seq_measured(ui.md_escape(shown[0]), ui.md_escape(shown[1]),
                                       position))
    result = ui.run_or_wait(
        activation_patching_seq2seq, model, selection.text, corrupted, selection.target, metric,
        direction, name="patch_seq2seq", label="Patching every head of every kind",
        auto=seq2seq_runs_by_itself(model),
        button=f"Patch every head ({total_heads(model)} runs)")
    return None if result is None else SourcesPatched(selection, corrupted, direction, result)


def maps_section(s: SourcesPatched) -> None:
    """One map of every kind, on one colour scale."""
    result = s.result
    st.caption(words.seq2seq_runs(result.clean, result.corrupted))
    for note in result.notes:
        st.caption(note)
    for column, (kind, values) in zip(ui.figure_columns(3), result.effect.items()):
        with column:
            fig = plots.layer_head_heatmap(values, KIND_TITLES[kind], words.SCALE_TITLE,
                                           fmt=".2f", diverging=True, zmax=FIXED_SPAN)
            ui.show_figure(fig, key=f"patch_{kind}", share=ui.column_share(1 / 3),
                           alt=f"Patching effect of every {kind} head")


def strongest_section(s: SourcesPatched) -> None:
    """The heads that carry the difference, of every kind, and every head as CSV."""
    st.markdown("**The heads that carry the difference**, of every kind")
    st.dataframe(seq2seq_table(s.result.strongest(), s.direction), hide_index=True,
                 width="stretch")
    ui.download_csv(partial(export.table_csv, s.result.table()),
                    export.safe_filename(s.selection.file_stem, "patching", s.direction,
                                         suffix=".csv"),
                    "Every head as CSV", key="dl_patch_seq2seq")
    st.caption(ui.NUMBERING)
    ui.caveat()
