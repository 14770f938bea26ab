"""The exceptions mha_viz raises on bad input, one type per kind of problem.

Every message says what went wrong and what to do about it, so the app can show it to a
person as it is. All of them derive from MhaVizError; the loading problems also derive
from LoadError, so ``except LoadError`` catches any failed ``load_model``.
"""


class MhaVizError(Exception):
    """Base class of every error mha_viz raises on purpose."""


class InputError(MhaVizError, ValueError):
    """The text (or token ids, or head mask) cannot be run: empty, no tokens, wrong shape."""


class LoadError(MhaVizError):
    """A model could not be loaded. The subclasses say why."""


class CheckpointNotFoundError(LoadError):
    """The name is neither a bundled model, nor a checkpoint folder, nor a hub id in the cache."""


class UnsupportedModelError(LoadError):
    """The checkpoint is of an architecture the engine does not implement (t5, llama, ...)."""


class CorruptCheckpointError(LoadError):
    """config.json or the weights file is unreadable, truncated, or does not match the config."""


class ModelTooLargeError(LoadError):
    """The model's weights, in the dtype asked for, would not fit the memory free for them."""


class OfflineError(LoadError):
    """A hub id that is not in the local cache was asked for, and the hub cannot be reached."""


class NotAllowedError(LoadError):
    """A local folder outside the allow-list (MHA_VIZ_ALLOWED_DIRS) was asked for."""


class ClusterError(MhaVizError, RuntimeError):
    """A corpus run on Ray could not start or finish: Ray is not installed, the cluster's
    address is malformed or does not answer, or a worker failed for good."""


class TraceFileError(MhaVizError, ValueError):
    """A saved trace (.npz) is unreadable, too large, or not a trace written by mha_viz."""


class DictionaryFileError(MhaVizError, ValueError):
    """A dictionary (sparse autoencoder) is unreadable, too large, of an architecture or a
    setting mha-viz does not compute, or was trained on another model."""
