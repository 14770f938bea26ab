"""Head similarity: which heads attend alike? Distance matrix, clustering, a 2-D map of heads,
and the nearest heads of a chosen head."""

from mha_viz import ui
from mha_viz.ui.views import head_similarity

ui.page_setup("Head similarity", head_similarity.INTRO)
head_similarity.show()
