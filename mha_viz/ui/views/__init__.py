"""The pages' views: one module per page of the app (pages/N_Name.py holds the page's title
and one call to its view's show()). A view holds the page's controls and sections; it reads
the library (numbers and figures) and ui's shared helpers (the sidebar, stored results,
figures, the words in ui.words, the run policies in ui.settings), and computes nothing itself:
no cache key built, no hash, no index arithmetic on layers and heads, no label parsed back
(tests/unit/test_architecture.py reads every view and page for them). A view too long for
one module (500 lines) keeps its parts in <page>_<part>.py beside it, read by it alone.
"""
