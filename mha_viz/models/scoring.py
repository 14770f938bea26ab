"""The pruning score and target metrics: what score() feeds the network (ScoreInputs), the
target metrics (TargetMetric, METRIC_KINDS) and the Scoring mixin that computes them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from ..core.errors import InputError
from ..engine.windows import AttentionWindow, attention_window
from .encoding import Encoding

MLM_MASK_FRACTION = 0.15



@dataclass
class ScoreInputs:
    """What score() feeds the network, prepared once so many masks can be scored cheaply."""
    kind: str
    input_ids: torch.Tensor  # [1, T] (with [MASK]s for the MLM score)
    token_type_ids: torch.Tensor | None
    targets: torch.Tensor | None  # next tokens, or the original ids at masked positions
    positions: torch.Tensor | None  # masked positions (MLM)
    reference: torch.Tensor | None  # unmasked mean-pooled embedding (embedding shift)
    metric: "ResolvedMetric | None" = None  # a target metric instead of the model's score


METRIC_KINDS = {
    "logit_diff": "logit difference: logit(target) - logit(contrast)",
    "logit": "logit of the target",
    "logprob": "log-probability of the target (nats)",
}


@dataclass(frozen=True)
class TargetMetric:
    """What to measure instead of the whole-text score: at token position ``position`` (the
    prediction made there, i.e. of the token that follows; for a masked-LM model, the filler
    of that position, which is masked), the target's log-probability, its logit, or the
    logit difference target - contrast (Wang et al. 2023 measure " Mary" vs " John").
    target / contrast: a token id, or a string that is one token (" Paris")."""
    position: int
    target: int | str
    contrast: int | str | None = None
    kind: str = "logit_diff"  # "logit_diff" | "logit" | "logprob"


@dataclass(frozen=True)
class ResolvedMetric:
    position: int  # non-negative
    target: int
    contrast: int | None
    kind: str
    description: str  # in words, for figure titles and captions

    @property
    def higher_is_better(self) -> bool:
        return True


class Scoring:
    """score(), score_tensor() and resolve_metric() for a model with self.network, self.info
    and a tokenizer (Tokenizing)."""

    # --- the pruning score (docs/analyses.md, "Pruning impact") ---------------------------

    def score_inputs(self, text: str | Encoding, mlm_seed: int = 0,
                     metric: TargetMetric | None = None) -> ScoreInputs:
        """What the score needs for a text, or for an Encoding (encoding_of_ids)."""
        enc = text if isinstance(text, Encoding) else self.encode(text)
        ids, types = self.network_inputs(enc)
        if metric is not None:
            resolved = self.resolve_metric(metric, len(enc.input_ids))
            if not self.info.causal:  # the masked-LM metric reads a masked position
                ids = ids.clone()
                ids[0, resolved.position] = self.tokenizer.mask_token_id
            return ScoreInputs("target", ids, types, None, None, None, resolved)
        kind = self.info.score_kind
        if kind == "next_token_loss":
            if ids.shape[1] < 2:
                raise InputError("the next-token loss needs at least two tokens")
            return ScoreInputs(kind, ids, types, ids[0, 1:], None, None)
        if kind == "mlm_loss":
            candidates = np.flatnonzero(~np.array(enc.special_mask))
            count = max(1, int(round(MLM_MASK_FRACTION * len(candidates))))
            rng = np.random.default_rng(mlm_seed)
            positions = torch.tensor(np.sort(rng.choice(candidates, count, replace=False)),
                                     device=ids.device)
            masked = ids.clone()
            masked[0, positions] = self.tokenizer.mask_token_id
            return ScoreInputs(kind, masked, types, ids[0, positions], positions, None)
        with torch.no_grad():
            reference = self.network(ids, types)[0].mean(1)[0]
        return ScoreInputs(kind, ids, types, None, None, reference)

    def network_inputs(self, enc: Encoding) -> tuple[torch.Tensor, torch.Tensor]:
        """An encoding's ids and token types as the network takes them, [1, T] each, on its
        device."""
        device = self.network.device
        return (torch.tensor([enc.input_ids], dtype=torch.long, device=device),
                torch.tensor([enc.token_type_ids], dtype=torch.long, device=device))

    def score_from_last_hidden(self, last_hidden: torch.Tensor, inputs: ScoreInputs):
        """[B, T, d] last hidden states -> [B] scores, float32 whatever the weights' dtype
        (a loss or a log-probability over a vocabulary would round in bfloat16)."""
        if inputs.kind == "target":
            metric = inputs.metric
            final = last_hidden[:, metric.position]  # [B, d]
            if metric.kind == "logprob":  # needs every logit, at one position
                return F.log_softmax(self.network.lm_logits(final).float(),
                                     dim=-1)[:, metric.target]
            if metric.kind == "logit":
                return self.network.token_logits(final, [metric.target])[:, 0].float()
            both = self.network.token_logits(final, [metric.target, metric.contrast]).float()
            return both[:, 0] - both[:, 1]
        if inputs.kind == "next_token_loss":
            logits = self.network.lm_logits(last_hidden[:, :-1]).float()
            targets = inputs.targets.expand(logits.shape[0], -1)
            return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none").mean(1)
        if inputs.kind == "mlm_loss":
            logits = self.network.lm_logits(last_hidden[:, inputs.positions]).float()
            targets = inputs.targets.expand(logits.shape[0], -1)
            return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none").mean(1)
        pooled = last_hidden.float().mean(1)
        return 1.0 - F.cosine_similarity(pooled, inputs.reference.float()[None, :], dim=-1)

    def check_head_mask(self, head_mask) -> torch.Tensor:
        """[L, H] or [B, L, H] array-like of gates in [0, 1] -> float32 tensor (grad kept)."""
        mask = head_mask if isinstance(head_mask, torch.Tensor) else torch.as_tensor(
            np.asarray(head_mask, dtype=np.float32), device=self.network.device)
        shape = (self.info.n_layer, self.info.n_head)
        if mask.dim() not in (2, 3) or tuple(mask.shape[-2:]) != shape:
            raise InputError(f"head_mask must have shape {list(shape)} (layers x heads), "
                             f"got {list(mask.shape)}")
        return mask.to(torch.float32)

    def check_attention_window(self, spec) -> AttentionWindow | None:
        """A sink + window restriction ({"sink": s, "window": w, "heads": None | [L, H]
        bools | [(layer, head), ...]}) checked against this model (engine.windows)."""
        return attention_window(spec, self.info.n_layer, self.info.n_head, self.info.causal,
                                self.network.device)

    def score_tensor(self, inputs: ScoreInputs, head_mask=None, ablation: str = "zero",
                     attention_window=None):
        """Differentiable score: [B] for a [B, L, H] mask, else a 0-d tensor."""
        mask = None if head_mask is None else self.check_head_mask(head_mask)
        window = self.check_attention_window(attention_window)
        batch = 1 if mask is None or mask.dim() == 2 else mask.shape[0]
        ids = inputs.input_ids.expand(batch, -1)
        types = inputs.token_type_ids.expand(batch, -1)
        last_hidden, _ = self.network(ids, types, head_mask=mask, ablation=ablation,
                                      attention_window=window)
        scores = self.score_from_last_hidden(last_hidden, inputs)
        return scores if mask is not None and mask.dim() == 3 else scores[0]

    def score(self, text: str, head_mask=None, ablation: str = "zero",
              metric: TargetMetric | None = None, attention_window=None) -> float:
        """The scalar the pruning page measures (info.score_name says which): a causal
        model's next-token loss, BERT's MLM loss, or the embedding shift of an encoder
        without an LM head; or, with ``metric``, that target metric (higher = the target is
        more likely). head_mask [L, H]: 1 keeps a head, 0 removes it (ablation="mean":
        replaces it by its mean output over positions). attention_window: {"sink": s,
        "window": w, "heads": None or [L, H] bools or [(layer, head), ...]}: each restricted
        head's query i reads keys j < s and i - w < j <= i only (an exact mask; a causal
        model's; engine/windows.py)."""
        window = self.check_attention_window(attention_window)  # refused before the text
        with torch.no_grad():
            return float(self.score_tensor(self.score_inputs(text, metric=metric), head_mask,
                                           ablation, window))

    # --- target metrics (docs/analyses.md, "Predictions, target metrics and ...") ----------

    def resolve_metric(self, metric: TargetMetric, n_tokens: int) -> ResolvedMetric:
        if not self.info.has_lm_head:
            raise InputError(f"'{self.info.name}' has no language-model head, so it has no "
                             f"target metric; its score is the {self.info.score_name}")
        if metric.kind not in METRIC_KINDS:
            raise InputError(f"metric kind must be one of {', '.join(METRIC_KINDS)}, got "
                             f"{metric.kind!r}")
        position = int(metric.position)
        position = position + n_tokens if position < 0 else position
        if not 0 <= position < n_tokens:
            raise InputError(f"position {metric.position} is outside the text's {n_tokens} tokens")
        target = self.token_id(metric.target)
        contrast = None if metric.contrast is None else self.token_id(metric.contrast)
        if metric.kind == "logit_diff" and contrast is None:
            raise InputError("the logit difference needs a contrast token")
        shown = self.display_tokens([target] + ([] if contrast is None else [contrast]))
        what = {"logit_diff": f"logit('{shown[0]}') − logit('{shown[-1]}')",
                "logit": f"logit('{shown[0]}')",
                "logprob": f"log p('{shown[0]}')"}[metric.kind]
        return ResolvedMetric(position, target, contrast, metric.kind,
                              f"{what} at position {position}")
