"""Layer 3, models: the loaded-model API that a notebook, the command line and the pages call.
load_model and Model (model: running the network and capturing its maps), put together from
encoding (text to ids), tokens (the checkpoint's tokenizer), scoring (the pruning score and
target metrics), predictions, forward_run (one pass, kept), model_info, activation_cache
(run_with_cache's named activations), generation (a causal model writing text) and segments (texts cut into token-id segments, for the corpus and for training dictionaries); seq2seq and image_to_text for encoder-decoders.

May import: core, engine, toys, checkpoints, maps.
"""
