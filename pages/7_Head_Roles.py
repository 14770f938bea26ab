"""Head roles: which heads read the previous token, earlier copies of the current token or
what followed them (induction), which rest on a sink, which spread out; every head's
strongest role in a table."""

from mha_viz import ui
from mha_viz.ui.views import head_roles

ui.page_setup("Head roles", head_roles.INTRO)
head_roles.show()
