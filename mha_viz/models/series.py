"""A series of checkpoints for the layers above checkpoints/ (the analysis of heads across
training reads it from here): checkpoint_series and its types, and each checkpoint loaded."""

from __future__ import annotations

from ..checkpoints.series import (BUNDLED_SERIES, Checkpoint, CheckpointSeries, SeriesError,
                                  checkpoint_series)
from .model import load_model

__all__ = ["BUNDLED_SERIES", "Checkpoint", "CheckpointSeries", "SeriesError",
           "checkpoint_series", "load_checkpoint"]


def load_checkpoint(checkpoint: Checkpoint):
    """One checkpoint of a series as a Model (a hub revision is downloaded first)."""
    return load_model(checkpoint.folder())
