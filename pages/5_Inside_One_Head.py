"""Inside one head, for the classroom: every step of one head's computation with the real
tensors of the chosen layer, head and text."""

from mha_viz import ui
from mha_viz.ui.views import inside_one_head

ui.page_setup("Inside one head")
inside_one_head.show()
