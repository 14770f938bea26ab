"""The app's words: labels, button texts, captions and the formats numbers are shown in, one
module per subject (pruning, similarity, circuits, Inside one head's steps). The library
returns numbers and structured results; the views turn them into sentences through these
modules, so no label lives beside the numbers and no view parses a label back into data.
"""
