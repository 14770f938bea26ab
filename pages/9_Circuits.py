"""Circuits: which heads cause a prediction. Patch activations between a clean and a corrupted
prompt, trace paths between heads, and draw the circuit that carries the behaviour."""

from mha_viz import ui
from mha_viz.ui.views import circuits

ui.page_setup("Circuits", circuits.INTRO)
circuits.show()
