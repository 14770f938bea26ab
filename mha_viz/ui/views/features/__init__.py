"""The Features page's view: a head in a dictionary's features (issue 55). For the head the
sidebar and the pickers choose, its strongest features on the text (from a hook_z dictionary
of its layer: each feature's activation summed over the text times its decoder-norm share
on the head) and where they fire most over a corpus; for one feature, where it fires on the
text, its pre-activation at a query by head x source token with the sum stated (direct
feature attribution), and the next tokens it raises and lowers.

``show()`` builds the page's context once (``context.read``: ``Features``, or ``Missing``
when no dictionary reads the head's layer) and walks its sections in order, each a
function of that context (``head``: the head's features; ``feature``: the feature
followed). A new section is one function and one line below."""

from __future__ import annotations

from .... import ui
from . import feature, head
from .context import Features, read

INTRO = ("Read a head in the **features** of a sparse dictionary (a sparse autoencoder trained "
         "on the heads' outputs): which features the head writes on your text, where each "
         "fires, and from which source tokens each head builds it. Every number here adds "
         "up: a feature's pre-activation is the sum of its parts by head and source token, "
         "plus one bias.")

MAPS = ("self",)  # the sets of maps the page reads (maps.sets): one stack's heads

SECTIONS = [head.head_features_section, feature.firing_section, feature.sources_section,
            feature.output_section, head.snippets_section]
MISSING_SECTIONS = [head.missing_section]


def show() -> None:
    selection = ui.sidebar(shows_saved_traces=False, reads=MAPS)
    with ui.guard():
        found = read(selection)
        for section in SECTIONS if isinstance(found, Features) else MISSING_SECTIONS:
            section(found)
