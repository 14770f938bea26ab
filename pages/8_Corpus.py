"""Corpus: every head's statistics over many texts, mean and spread over segments, as the
papers measure them (entropy, where attention goes, role scores, head similarity).

One sentence is an anecdote. Clark et al. (2019) averaged their head statistics over about a
thousand 128-token segments; this page does the same for a corpus you upload, paste, or the
built-in one (paragraphs of Python's own documentation, available offline).
"""

from mha_viz import ui
from mha_viz.ui.views import corpus

ui.page_setup("Corpus", corpus.INTRO)
corpus.show()
