"""Inside one head, step by step, for the classroom: the real numbers of every step from X to
the weighted values of a head of any set of a model's maps, an encoder-decoder's encoder,
decoder and cross-attention too (steps, the arrays and numbers; seq2seq_steps tells an
encoder-decoder's steps; the words the page writes of them are ui.words.one_head's), the same
attention computed a block at a time as chunked and flash attention do (blockwise), the
gradients of one head's W_Q and W_O (gradients), and what the key/value cache costs
(kv_cache_size).
"""
