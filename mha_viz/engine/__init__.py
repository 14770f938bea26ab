"""Layer 1, engine: our own PyTorch multi-head attention and the stacks built from it.
attention (the one kernel every path scores with: scale, soft-cap, masks, sliding windows,
shared key/value heads, softmax), positions (rotary with long-context scalings, relative,
sinusoidal), config (StackConfig: an architecture by what varies, with each layer's own
attention settings), experts (a mixture-of-experts MLP), norms (RMSNorm rounded as each
family rounds in half precision), placement (dtype and device names, and every result as
float32 numpy), transformer (the stack; cross_input: what a decoder's cross-attention
reads), wiring (what each block reads and writes, in
order: pre- or post-norm, parallel, sandwich norms, cross-attention, as data that analyses
follow), encoder_decoder (two stacks and cross-attention),
kv_cache (the keys and values of text written a token at a time), windows (heads restricted
to a sink and a window, an exact mask the kernel applies) and interventions (the named
activation points that are read or replaced). Knows no checkpoint
format and no family by name.

May import: core.
"""
