"""The Attention maps page's view of an encoder-decoder's cross-attention: each target
position (a row) reads the source (the columns); every head, one head, and the mean of the
last layers as an alignment (over the image an image-to-text model read)."""

from __future__ import annotations

from functools import partial

import streamlit as st

from ... import analysis, plots
from ...server import export
from ..controls import head_picker
from ..output import caveat, download_csv, figure_screen, show_figure
from ..settings import md_escape
from ..state import synced
from ..why import cross_cell_note, pick_cross_cell
from .attention_maps_parts import GRID_THUMB, grid_cell_px, pick_from_grid


def layers_through(layers: list[int]) -> str:
    """'L3' for one layer, 'L3–L5' for several: a mean's title and file name."""
    return f"L{layers[0]}" + (f"–L{layers[-1]}" if len(layers) > 1 else "")



def cross_attention_view(seq, stem: str) -> None:
    """An encoder-decoder's cross-attention: each target position (a row) reads the source
    (the columns); every head, one head, and the mean of the last layers as an alignment.
    stem: the downloads' file name stem."""
    maps = seq.cross_attentions  # [L, H, T, S]
    n_layer, n_head = maps.shape[:2]
    if seq.source_truncated:
        st.warning(f"The source is longer than the encoder's context: only its first "
                   f"{len(seq.source_ids)} tokens are read.")
    if seq.generated:
        st.info(f"No target given: the decoder reads the model's own output, greedy, "
                f"{len(seq.labels)} tokens (at most {seq.max_new_tokens}): "
                f"*{md_escape(seq.target_shown)}*")
    st.caption("Cross-attention: the decoder's queries read keys and values made from the "
               "encoder's output, so each row is a target position and each column a source "
               "token; every row sums to 1. No causal mask: a target position may read the "
               "whole source.")
    by = synced(st.radio, "rows", "Label the rows by", "writes",
                options=["writes", "reads"], horizontal=True,
                format_func={"writes": "the target token each position writes",
                             "reads": "the decoder's input at that position"}.get,
                help="Position i reads target token i - 1 (the start token first) and "
                     "writes target token i (teacher forcing).")
    rows = list(seq.label_tokens if by == "writes" else seq.target_tokens)
    source = list(seq.source_tokens)
    if seq.image is not None:  # cross-modal: the encoder read an image
        st.subheader("Where each written character looks in the image")
        screen = figure_screen()
        fig = plots.cross_attention_over_image(
            seq.image, analysis.mean_cross_attention(maps, [n_layer - 1]), seq.patch_width,
            rows, title=f"Last layer (L{n_layer - 1}), mean of its heads",
            plot_px=700 if screen is None else max(150, min(900, screen.width - 200)))
        show_figure(fig, key="image", alt="Cross-attention over the image", share=1.0)
        st.caption(f"The encoder read the image in vertical strips {seq.patch_width} pixels "
                   f"wide (a linear patch embedding, as ViT does): its positions are the "
                   f"strips, left to right. As the decoder writes each character, its "
                   f"cross-attention should fall on the strips where that character is "
                   f"drawn. The source columns below are the strips, labelled by the "
                   f"character drawn on most of each (· = background).")
    layer, head = head_picker(seq.as_trace("decoder"), default=(n_layer - 1, 0))
    name = analysis.head_name(layer, head)

    st.subheader("All cross-attention heads")
    st.caption("One thumbnail per decoder layer (rows) and head (columns); click one to open "
               "it below. Each thumbnail has its own colour scale.")
    grid = plots.model_view_grid(maps, thumb_size=GRID_THUMB, selected=(layer, head),
                                 cell_px=grid_cell_px(n_head), title="All cross-attention heads")
    show_figure(grid, key="grid", on_select=lambda: pick_from_grid(n_head),
                alt="Grid of every cross-attention head")

    st.subheader(f"One head: {name} (decoder layer {layer}, head {head})")
    heat = plots.cross_attention_heatmap(maps[layer, head], rows, source,
                                         title=f"{name}: which source tokens each target "
                                               f"position reads", pickable=True)
    show_figure(plots.camera_only(heat), key="head", alt=f"Cross-attention of head {name}",
                share=1.0, on_select=partial(pick_cross_cell, "head"))
    cross_cell_note(maps[layer, head], rows, source)
    download_csv(partial(export.matrix_csv, maps[layer, head], export.position_labels(rows),
                         export.position_labels(source), corner="target \\ source"),
                 export.safe_filename(stem, "cross", name, suffix=".csv"), f"{name} as CSV",
                 key="dl_head")

    st.subheader("Alignment: the mean of the last layers' heads")
    first = synced(st.select_slider, "alayers", "Average decoder layers from", n_layer - 1,
                   options=list(range(n_layer)), format_func=lambda l: f"L{l}",
                   valid=lambda l: 0 <= int(l) < n_layer,
                   help="The mean over every head of these layers, up to the last.")
    layers = list(range(int(first), n_layer))
    mean = analysis.mean_cross_attention(maps, layers)
    through = layers_through(layers)
    fig = plots.cross_attention_heatmap(mean, rows, source,
                                        title=f"Mean cross-attention of {through}")
    show_figure(fig, key="alignment", alt="Mean cross-attention as an alignment", share=1.0)
    st.caption("In a trained translation model the last layers' mean tends to put each target "
               "word's weight on the source word it translates (Bahdanau et al. 2015): the ○ "
               "trace the word alignment, crossing where the two languages order words "
               "differently.")
    download_csv(partial(export.matrix_csv, mean, export.position_labels(rows),
                         export.position_labels(source), corner="target \\ source"),
                 export.safe_filename(stem, "cross", "mean", through, suffix=".csv"),
                 "This mean as CSV", key="dl_alignment")
    caveat()
