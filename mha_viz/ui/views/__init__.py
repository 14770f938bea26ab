"""The pages' views: one module (or package) per page of the app (pages/N_Name.py holds the
page's title and one call to its view's show()). A view is a context and its sections: it
builds one frozen context (the selection, the trace or run, the page's choices) and show()
walks an ordered list of module-level section functions that take it (ui.show_sections;
ui.Folded for one drawn when opened). It reads the library (numbers and figures) and ui's
shared helpers (the sidebar, stored results, figures, the words in ui.words, the run
policies in ui.settings), and computes nothing itself: no cache key built, no hash, no index
arithmetic on layers and heads, no label parsed back (tests/unit/test_architecture.py reads
every view and page for them, and holds every function here to 80 lines, none inside
another). A page whose sections outgrow one module is a package, one module a section group
(views/pruning_impact/, views/inside_one_head/, views/circuits/); no view imports another
page's. MAPS in a view names the sets of maps the page reads (maps.sets).
"""
