"""The Attention maps page for an encoder-decoder's cross-attention: each target position (a
row) reads the source (the columns). Its context (``CrossMaps``: the trace, the rows' labels,
the head chosen) and its sections: where each written character looks in an image (an image
reader's), every head, one head, and the mean of the last layers as an alignment."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import streamlit as st

from .... import analysis, plots, ui
from ....server import export
from ...why import cross_cell_note, pick_cross_cell
from ...words import attention_maps as words
from . import sizes


@dataclass(frozen=True)
class CrossMaps:
    """What every section reads: the encoder-decoder's trace (its cross-attention maps:
    ``cross``, [L, H, T, S]), the rows' and the columns' labels, the head chosen."""
    selection: ui.Selection
    seq: object  # the EncoderDecoderTrace
    rows: list[str]  # the target positions, by what each writes or reads
    source: list[str]
    layer: int
    head: int

    @property
    def cross(self) -> np.ndarray:
        """The cross-attention maps, [L, H, T, S]."""
        return self.seq.cross_attentions

    @property
    def n_layer(self) -> int:
        return self.cross.shape[0]

    @property
    def name(self) -> str:
        return analysis.head_name(self.layer, self.head)

    @property
    def stem(self) -> str:
        return self.selection.file_stem


def cross_of(selection: ui.Selection) -> CrossMaps:
    """The trace, what it read, the rows' labels chosen, and (after an image reader's image)
    the head; the notes on the source and the target above the sections."""
    seq = ui.get_seq2seq_trace(selection)
    if seq.source_truncated:
        st.warning(f"The source is longer than the encoder's context: only its first "
                   f"{len(seq.source_ids)} tokens are read.")
    if seq.generated:
        st.info(f"No target given: the decoder reads the model's own output, greedy, "
                f"{len(seq.labels)} tokens (at most {seq.max_new_tokens}): "
                f"*{ui.md_escape(seq.target_shown)}*")
    st.caption(words.CROSS)
    by = ui.synced(st.radio, "rows", "Label the rows by", "writes",
                   options=["writes", "reads"], horizontal=True,
                   format_func=words.CROSS_ROWS.get,
                   help="Position i reads target token i - 1 (the start token first) and "
                        "writes target token i (teacher forcing).")
    rows = list(seq.label_tokens if by == "writes" else seq.target_tokens)
    image_section(seq, rows)
    n_layer = seq.cross_attentions.shape[0]
    # the heads of the stack that holds cross-attention: the decoder's
    layer, head = ui.head_picker(seq.as_trace(selection.map_set.stack),
                                 default=(n_layer - 1, 0))
    return CrossMaps(selection, seq, rows, list(seq.source_tokens), layer, head)


def image_section(seq, rows: list[str]) -> None:
    """Cross-modal: where each written character looks in the image the encoder read."""
    if seq.image is None:
        return
    n_layer = seq.cross_attentions.shape[0]
    st.subheader("Where each written character looks in the image")
    screen = ui.figure_screen()
    fig = plots.cross_attention_over_image(
        seq.image, analysis.mean_cross_attention(seq.cross_attentions, [n_layer - 1]),
        seq.patch_width, rows, title=f"Last layer (L{n_layer - 1}), mean of its heads",
        plot_px=700 if screen is None else max(150, min(900, screen.width - 200)))
    ui.show_figure(fig, key="image", alt="Cross-attention over the image", share=1.0)
    st.caption(words.image_strips(seq.patch_width))


def grid_section(c: CrossMaps) -> None:
    """Every cross-attention head at a glance; a click opens it below."""
    n_head = c.cross.shape[1]
    st.subheader("All cross-attention heads")
    st.caption(words.CROSS_GRID)
    grid = plots.model_view_grid(c.cross, thumb_size=sizes.GRID_THUMB,
                                 selected=(c.layer, c.head), cell_px=sizes.grid_cell_px(n_head),
                                 title="All cross-attention heads")
    ui.show_figure(grid, key="grid", on_select=partial(sizes.pick_from_grid, n_head),
                   alt="Grid of every cross-attention head")


def one_head_section(c: CrossMaps) -> None:
    """One cross-attention head: which source tokens each target position reads."""
    st.subheader(f"One head: {c.name} (decoder layer {c.layer}, head {c.head})")
    the_map = c.cross[c.layer, c.head]
    heat = plots.cross_attention_heatmap(the_map, c.rows, c.source,
                                         title=f"{c.name}: which source tokens each target "
                                               f"position reads", pickable=True)
    ui.show_figure(plots.camera_only(heat), key="head", alt=f"Cross-attention of head {c.name}",
                   share=1.0, on_select=partial(pick_cross_cell, "head"))
    cross_cell_note(the_map, c.rows, c.source)
    ui.download_csv(partial(export.matrix_csv, the_map, export.position_labels(c.rows),
                            export.position_labels(c.source), corner="target \\ source"),
                    export.safe_filename(c.stem, "cross", c.name, suffix=".csv"),
                    f"{c.name} as CSV", key="dl_head")


def alignment_section(c: CrossMaps) -> None:
    """The mean of the last layers' heads: a word alignment in a trained translator."""
    n_layer = c.n_layer
    st.subheader("Alignment: the mean of the last layers' heads")
    first = ui.synced(st.select_slider, "alayers", "Average decoder layers from", n_layer - 1,
                      options=list(range(n_layer)), format_func=lambda l: f"L{l}",
                      valid=lambda l: 0 <= int(l) < n_layer,
                      help="The mean over every head of these layers, up to the last.")
    layers = list(range(int(first), n_layer))
    mean = analysis.mean_cross_attention(c.cross, layers)
    through = words.layers_through(layers)
    fig = plots.cross_attention_heatmap(mean, c.rows, c.source,
                                        title=f"Mean cross-attention of {through}")
    ui.show_figure(fig, key="alignment", alt="Mean cross-attention as an alignment", share=1.0)
    st.caption(words.ALIGNMENT)
    ui.download_csv(partial(export.matrix_csv, mean, export.position_labels(c.rows),
                            export.position_labels(c.source), corner="target \\ source"),
                    export.safe_filename(c.stem, "cross", "mean", through, suffix=".csv"),
                    "This mean as CSV", key="dl_alignment")
    ui.caveat()
