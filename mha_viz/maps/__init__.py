"""Layer 2, maps: attention maps once computed, and how they are held. AttentionTrace (trace:
every head's maps and what made them, in typed fields, and its .npz file; trace_file: what
that file may hold, checked as it is read), the one form of maps the trace delegates to
(forms.Maps: held whole in held.HeldMaps, rebuilt on demand from each layer's input in
ondemand, value-weighted in value_weighted: what each head moves), the one protocol by which
every statistic reads maps a block of rows at a time (streaming), what a corpus batch
measures of a layer's maps at once for those statistics (summaries), and block averages for
overviews (downsample); the named sets of a model's maps (sets: its self-attention, or an
encoder-decoder's encoder, decoder and cross-attention).

May import: core, engine.
"""
