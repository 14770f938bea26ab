"""Attention maps: every head at a glance, one head as a heatmap with the tokens on both
axes and as lines between tokens, and the head mean and attention rollout."""

from mha_viz import ui
from mha_viz.ui.views import attention_maps

ui.page_setup("Attention maps", attention_maps.INTRO)
attention_maps.show()
