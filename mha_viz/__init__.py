"""mha-viz: see inside multi-head attention.

    from mha_viz import load_model
    model = load_model("minilm")            # bundled; or "gpt2", or a checkpoint folder
    trace = model.trace("The cat sat on the mat.")
    trace.attentions                        # float32 [layers, heads, T, T]
    long = model.trace(book, maps="on_demand")   # maps computed when asked for
    long.head_map(3, 7)                     # [T, T]
    model.plan(book)                        # tokens, cut or not, maps held / on demand / refused
    moved = model.trace(text, weights="value")   # rows: what each head moves (normalized)
    model.generate("Once upon a time", max_new_tokens=20).text   # causal models
    t5 = load_model("path/to/t5")           # an encoder-decoder (T5, BART, Marian)
    t5.trace("The house.", target="Das Haus.").cross_attentions   # [L_dec, H, T, S]
    series = checkpoint_series("induction-toy")   # a training run's checkpoints, by step
    sae = load_sae("induction-toy/L1.hook_z")     # a dictionary in SAELens's format
"""

from .core.errors import (CheckpointNotFoundError, ClusterError, CorruptCheckpointError,
                          DictionaryFileError, InputError, LoadError, MhaVizError,
                          NotAllowedError, OfflineError, TraceFileError, UnsupportedModelError)
from .dictionaries import SparseDictionary, load_sae
from .maps.ondemand import MapsTooLargeError
from .maps.trace import AttentionTrace
from .models.model import (Generation, Model, ModelInfo, Predictions, TargetMetric, TracePlan,
                           load_model)
from .models.seq2seq import EncoderDecoderModel, EncoderDecoderTrace
from .models.series import CheckpointSeries, SeriesError, checkpoint_series

__all__ = [
    "load_model", "Model", "ModelInfo", "AttentionTrace", "Predictions", "TargetMetric", "MhaVizError", "InputError",
    "LoadError", "CheckpointNotFoundError", "UnsupportedModelError", "CorruptCheckpointError",
    "OfflineError", "NotAllowedError", "TraceFileError", "MapsTooLargeError",
    "EncoderDecoderModel", "EncoderDecoderTrace", "ClusterError", "checkpoint_series",
    "CheckpointSeries", "SeriesError", "Generation", "TracePlan", "DictionaryFileError",
    "SparseDictionary", "load_sae",
]
