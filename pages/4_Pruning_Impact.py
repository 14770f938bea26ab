"""Pruning impact: what happens to the model's score when heads are switched off."""

from mha_viz import ui
from mha_viz.ui.views import pruning_impact

ui.page_setup("Pruning impact", pruning_impact.INTRO)
pruning_impact.show()
