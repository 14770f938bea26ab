"""Layer 1, engine: our own PyTorch multi-head attention and the stacks built from it.
attention (the kernel: scores, masks, softmax, shared key/value heads), transformer (a stack
configured by what varies between families, StackConfig), encoder_decoder (two stacks and
cross-attention) and interventions (the named activation points that are read or replaced).
Knows no checkpoint format and no family by name.

May import: core.
"""
