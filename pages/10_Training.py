"""Training: watch attention heads form across a training run's checkpoints: the loss with
the induction-head phase change marked, every head's role scores over steps, and the maps at
the step under a slider, which a play button walks."""

from mha_viz import ui
from mha_viz.ui.views import training

ui.page_setup("Training: watch attention learn", training.INTRO)
training.show()
