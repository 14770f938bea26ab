"""ForwardRun: one forward pass, kept, that the trace, predictions, target metrics and direct
logit attribution all read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..core.errors import InputError
from ..maps.trace import AttentionTrace
from .encoding import Encoding
from .predictions import Predictions
from .scoring import ScoreInputs, TargetMetric


@dataclass
class ForwardRun:
    """One forward pass, kept: every head's map (the trace), the hidden state the predictions
    and target metrics read, and the pieces a pre-norm residual stream is the sum of (for
    direct logit attribution). A page that shows all of them runs the model once.

    Tensors are [1, T, ...] (a batch of one); treat them as read-only."""
    model: Any  # the mha_viz.models.model.Model that ran (typed loosely: model.py imports this module)
    text: str
    encoding: Encoding
    trace: AttentionTrace | None  # None when run(maps=False)
    embedded: torch.Tensor  # [1, T, d]: the residual stream entering layer 0
    records: list[dict]  # per layer: "context" [1, H, T, d_k] (heads before W_O), "mlp_out"
    final_residual: torch.Tensor  # [1, T, d]: after the last layer, before the final norm
    last_hidden: torch.Tensor  # [1, T, d]: after the final norm, what the LM head reads
    head_mask: np.ndarray | None = None  # [L, H] the run switched heads off by, if any

    def identity(self) -> tuple:
        """What names this run in a stored result's key (core.digest): the model and the
        input it read."""
        return (self.model, self.text, self.encoding.input_ids, self.encoding.token_type_ids,
                self.head_mask)

    @property
    def n_tokens(self) -> int:
        return len(self.encoding.input_ids)

    def _require_causal(self, what: str) -> None:
        if not self.model.info.has_lm_head:
            raise InputError(f"'{self.model.info.name}' has no language-model head: it gives "
                             f"embeddings, not token predictions")
        if not self.model.info.causal:  # a masked-LM reads positions it cannot see: new input
            raise InputError(f"{what} of a masked-LM model needs the masked text's own forward: "
                             f"use model.{'predict' if what == 'predictions' else 'score'}()")

    def predict(self, k: int = 5) -> Predictions:
        """model.predict(text, k) of a causal model, from this pass."""
        self._require_causal("predictions")
        return self.model._predictions(self.encoding, self.last_hidden,
                                       np.arange(self.n_tokens), k)

    def score(self, metric: "TargetMetric") -> float:
        """model.score(text, metric=metric) of a causal model, from this pass."""
        self._require_causal("a target metric")
        resolved = self.model.resolve_metric(metric, self.n_tokens)
        inputs = ScoreInputs("target", self.model.network_inputs(self.encoding)[0], None, None,
                             None, None, resolved)
        with torch.no_grad():
            return float(self.model.score_from_last_hidden(self.last_hidden, inputs)[0])
