"""Features: a head in a sparse dictionary's features: which features it writes on your text,
where each fires, and its pre-activation by head and source token, summed exactly."""

from mha_viz import ui
from mha_viz.ui.views import features

ui.page_setup("Features at the head", features.INTRO)
features.show()
