"""The Attention maps page's view: every head at a glance, one head as a heatmap with the
tokens on both axes and as lines between tokens (a long input: its overview and a window at
full resolution), and, drawn when opened, the head mean and attention rollout and the heads
that link two tokens; for an encoder-decoder's cross-attention, every head, one head and the
alignment of the last layers.

``show()`` builds the page's context once (``square.Maps`` for a square set of maps, a
model's self-attention or one stack's; ``cross.CrossMaps`` for cross-attention, target x
source) and walks its sections, each a function of it (the sizes and widgets both read:
``sizes``). A new section is one function and one line."""

from __future__ import annotations

from .... import ui
from ...words import attention_maps as words
from . import cross, square

MAPS = ("self", "encoder", "decoder", "cross")  # the sets of maps the page reads (maps.sets)
INTRO = words.INTRO
SECTIONS = [square.grid_section, square.one_head_section, square.why_section,
            square.sink_section,
            ui.Folded("Aggregates over heads and layers", "aggregates", square.aggregates),
            ui.Folded("Which heads link two tokens", "token_pair", square.token_pair),
            square.downloads_section]
CROSS_SECTIONS = [cross.grid_section, cross.one_head_section, cross.alignment_section]


def show() -> None:
    selection = ui.sidebar(reads=MAPS)
    with ui.guard():
        # the weights, or what heads move (Kobayashi et al. 2020): every figure below reads it
        weights = ui.weights_switch(selection.model)
        if selection.map_set.square:
            ui.show_sections(square.maps_of(selection, weights), SECTIONS)
        else:  # cross-attention: target rows over the source's columns
            ui.show_sections(cross.cross_of(selection), CROSS_SECTIONS)
