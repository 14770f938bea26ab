"""Layer 2, maps: attention maps once computed, and how they are held. AttentionTrace (trace:
every head's maps, whole or rebuilt on demand, and its .npz file; trace_file: what that file
may hold, checked as it is read), the on-demand rebuild from
each layer's input (ondemand), value-weighted maps (value_weighted: what each head moves),
the one protocol by which every statistic reads maps a block of
rows at a time (streaming), and block averages for overviews (downsample).

May import: core, engine.
"""
