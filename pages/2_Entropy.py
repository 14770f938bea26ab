"""Entropy: how broad or focused each head is, per head and per query token, and how much
attention goes to [CLS], [SEP], punctuation and neighbouring tokens."""

from mha_viz import ui
from mha_viz.ui.views import entropy

ui.page_setup("Entropy", entropy.INTRO)
entropy.show()
