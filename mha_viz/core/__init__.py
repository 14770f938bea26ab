"""Layer 0, core: what every layer shares. The errors the library raises (errors), array
checks (arrays), text helpers that make labels safe to show (text), memory housekeeping
(memory), the memory budget: what held results and maps cost in bytes and whether they fit
(budget), and the folders kept between runs (folders).

May import: nothing else in mha_viz.
"""
