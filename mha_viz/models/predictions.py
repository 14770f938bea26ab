"""What a model predicts at each position: Predictions and the Predicting mixin."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from ..core.errors import InputError
from .encoding import Encoding


@dataclass
class Predictions:
    """What the model predicts at each position (docs/analyses.md, "Predictions, target
    metrics and direct logit attribution").

    Causal models: row i is the prediction made at position i, of token i + 1;
    next_logprob[i] = log p(token i + 1 | tokens 0..i), minus the per-token loss.
    Masked-LM models: one row per masked position, the fillers of that position.
    Encoder-decoders ("target"): row i is decoder position i's prediction of target token
    i (tokens are the target's); next_logprob [T]: log p of each target token."""
    kind: str  # "next_token" | "masked" | "target"
    tokens: list[str]  # the input's display tokens
    token_ids: list[int]
    positions: np.ndarray  # [R] the positions the rows are about
    top_ids: np.ndarray  # [R, k]
    top_probs: np.ndarray  # [R, k]
    top_tokens: list[list[str]]  # [R][k] display text of the top ids
    next_logprob: np.ndarray | None  # [T - 1] (causal only)

    @property
    def loss(self) -> np.ndarray | None:
        """Per-token cross-entropy of the text (nats), [T - 1]; its mean is model.score."""
        return None if self.next_logprob is None else -self.next_logprob

    @property
    def token_loss(self) -> np.ndarray | None:
        """[T] each token's loss (nats), aligned with ``tokens``: a causal model's first token
        is NaN (nothing predicts it); an encoder-decoder's target tokens all have one."""
        if self.loss is None:
            return None
        loss = np.asarray(self.loss, dtype=np.float64)
        return np.concatenate([[np.nan], loss]) if self.kind == "next_token" else loss

    @property
    def token_probability(self) -> np.ndarray | None:
        """[T] the probability the model gave each token, aligned as token_loss (NaN where
        nothing predicts the token)."""
        loss = self.token_loss
        return None if loss is None else np.exp(-loss)

    @property
    def max_loss(self) -> float | None:
        """The largest per-token loss (nats)."""
        return None if self.loss is None else float(np.max(self.loss))

    @property
    def mean_loss(self) -> float | None:
        """The mean per-token loss (nats), model.score's next-token loss; None when masked."""
        return None if self.loss is None else float(np.mean(self.loss))

    @property
    def perplexity(self) -> float | None:
        """exp(mean loss): the number of equally likely tokens the model is as unsure as."""
        loss = self.mean_loss
        return None if loss is None else float(np.exp(loss))

    def runner_up(self, row: int) -> int:
        """Row ``row``'s best guess other than the token the text holds there (the next
        token, the masked one, or the target's), the natural contrast for a logit
        difference; its top guess when it has no other."""
        position = int(self.positions[row]) + (self.kind == "next_token")
        actual = self.token_ids[position] if position < len(self.token_ids) else None
        others = [int(i) for i in self.top_ids[row] if int(i) != actual]
        return others[0] if others else int(self.top_ids[row][0])


class Predicting:
    """predict() for a model with self.network, self.info and TextInput's encode()."""

    def predict(self, text: str, k: int = 5, masked_positions=None,
                max_tokens: int | None = None) -> Predictions:
        """The k most likely tokens at each position, with their probabilities.

        Causal models: every position's next-token prediction, and next_logprob [T - 1].
        Masked-LM models (BERT with its MLM head): the fillers of masked_positions (each
        replaced by [MASK] first), or of the [MASK] tokens already in the text."""
        if not self.info.has_lm_head:
            raise InputError(f"'{self.info.name}' has no language-model head: it gives "
                             f"embeddings, not token predictions")
        k = self._check_k(k)
        enc = self.encode(text, max_tokens=max_tokens)
        ids, types = self.network_inputs(enc)
        n = ids.shape[1]
        if self.info.causal:
            positions = np.arange(n)
        else:
            mask_id = self.tokenizer.mask_token_id
            if masked_positions is None:
                positions = np.flatnonzero(np.array(enc.input_ids) == mask_id)
            else:
                positions = np.array(sorted({int(p) + (n if int(p) < 0 else 0)
                                             for p in masked_positions}), dtype=int)
            if positions.size == 0:
                raise InputError("pick the positions to mask (or put [MASK] in the text): a "
                                 "masked-LM model predicts the tokens it cannot see")
            if positions.min() < 0 or positions.max() >= n or any(
                    enc.special_mask[p] for p in positions):
                raise InputError(f"masked positions must be ordinary tokens of the text "
                                 f"(0..{n - 1}, not [CLS]/[SEP])")
            ids = ids.clone()
            ids[0, positions] = mask_id
        with torch.inference_mode():
            last_hidden, _ = self.network(ids, types)
        return self._predictions(enc, last_hidden, positions, k)

    def _check_k(self, k) -> int:
        k = int(k)
        if not 1 <= k <= self.info.vocab_size:
            raise InputError(f"k must be between 1 and {self.info.vocab_size}")
        return k

    def _predictions(self, enc: Encoding, last_hidden: torch.Tensor, positions: np.ndarray,
                     k: int) -> Predictions:
        """Top-k at ``positions`` from a [1, T, d] last hidden state (and, for a causal
        model, the log-probability of every next token)."""
        k = self._check_k(k)
        with torch.inference_mode():
            logits = self.network.lm_logits(
                last_hidden[0, torch.as_tensor(positions, device=last_hidden.device)])
            logprobs = F.log_softmax(logits.float(), dim=-1)  # float32 whatever the weights
            top = logprobs.topk(k, dim=-1)
            next_logprob = None
            if self.info.causal:
                following = torch.tensor(enc.input_ids[1:], dtype=torch.long,
                                         device=logprobs.device)
                next_logprob = logprobs[:-1].gather(1, following[:, None])[:, 0].cpu().numpy()
        top_ids = top.indices.cpu().numpy()
        return Predictions(
            kind="next_token" if self.info.causal else "masked",
            tokens=self.display_tokens(enc.input_ids), token_ids=enc.input_ids,
            positions=positions, top_ids=top_ids, top_probs=top.values.exp().cpu().numpy(),
            top_tokens=[self.display_tokens(row.tolist()) for row in top_ids],
            next_logprob=next_logprob)
