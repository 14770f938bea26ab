"""Long range: which heads need the whole context: needles in a haystack and the retrieval
heads that copy them (switched off, against random heads), attention sinks, and what a sink +
window costs each head with the key/value cache it saves."""

from mha_viz import ui
from mha_viz.ui.views import long_range

ui.page_setup("Long range: heads that need the whole context", long_range.INTRO)
long_range.show()
