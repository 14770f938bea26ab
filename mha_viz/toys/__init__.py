"""Layer 1, toys: the small models this project trains itself and bundles in mha_viz/bundled/:
their data, the training loop they share (training), the T5 translator (translation) and the
digit reader, with the lines it draws and reads (reading). Run as scripts to train again
(python -m mha_viz.toys.translation); the models layer reads the reader's drawing.

May import: core.
"""
