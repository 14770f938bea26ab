"""Predictions: what the model predicts at every token, and which heads write a prediction."""

from mha_viz import ui
from mha_viz.ui.views import predictions

ui.page_setup("Predictions", predictions.INTRO)
predictions.show()
