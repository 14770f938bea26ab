"""What the long-range analyses share: prompts as ids, one forward that keeps what they read
(the last hidden state of chosen rows, the maps on demand) in memory that grows with the
text, not its square, and the next-token loss a block of positions at a time (a logits
array of 8,192 positions x 49,152 words would take 1.6 GB)."""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from ...core.errors import InputError
from ...engine.attention import causal_rows_bias
from ...engine.interventions import Interventions
from ...engine.transformer import CHUNKED_FROM, QUERY_CHUNK

LOGIT_BYTES = 128 << 20  # one block of the loss's logits, float32


def check_causal(model, what: str) -> None:
    """Long-range analyses read a causal language model: refused otherwise, in words."""
    info = model.info
    if getattr(info, "encoder_decoder", False) or not info.causal or not info.has_lm_head:
        raise InputError(f"{what} needs a causal language model (it reads the text left to "
                         f"right and predicts the next token); '{info.name}' is not one")


def tokenized(model, text: str, special: bool) -> list[int]:
    """text's ids as the model's tokenizer writes them, with or without special tokens, not
    cut to the context (one caller at a time: a fast tokenizer is not thread-safe)."""
    with model._tokenizer_lock:
        return [int(i) for i in model.tokenizer(text, add_special_tokens=special,
                                                verbose=False)["input_ids"]]


def prompt_ids(model, prompt, name: str = "a prompt") -> list[int]:
    """A prompt as the model reads it: a text encoded with its special tokens (not cut), or
    token ids given as they are."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise InputError(f"{name} is empty")
        return tokenized(model, prompt, True)
    ids = [int(i) for i in np.asarray(prompt, dtype=np.int64).reshape(-1)]
    if not ids:
        raise InputError(f"{name} has no tokens")
    if min(ids) < 0 or max(ids) >= model.info.vocab_size:
        raise InputError(f"{name}'s token ids must lie in [0, {model.info.vocab_size})")
    return ids


def piece_ids(model, piece) -> list[int]:
    """Text that continues another (an answer after its prompt), without special tokens; or
    token ids as they are."""
    if isinstance(piece, str):
        return tokenized(model, piece, False)
    return prompt_ids(model, piece, "an answer")


def check_context(model, n_tokens: int, what: str) -> None:
    if n_tokens > model.info.max_positions:
        raise InputError(f"{what} takes {n_tokens:,} tokens, more than the model's context of "
                         f"{model.info.max_positions:,}")


def run_stack(network, h, start: int = 0, head_mask=None, attention_window=None,
              layer_inputs=None, offset: int = 0, past_kv=None):
    """Layers start.. on h [B, T, d] (the stream entering layer start) as the model's own
    forward runs them: past CHUNKED_FROM tokens, a block of query rows at a time. offset,
    past_kv: h holds positions offset.. and past_kv[layer] the keys and values of the
    positions before them (Network.run_layers)."""
    length = h.shape[1]
    if length > CHUNKED_FROM:
        return network.run_layers(h, start, None, None, head_mask=head_mask,
                                  layer_inputs=layer_inputs, query_chunk=QUERY_CHUNK,
                                  attention_window=attention_window, offset=offset,
                                  past_kv=past_kv)[0]
    bias = causal_rows_bias(offset, offset + length, device=h.device) if offset else \
        network.attention_bias(length)
    return network.run_layers(h, start, None, bias, head_mask=head_mask,
                              layer_inputs=layer_inputs, attention_window=attention_window,
                              offset=offset, past_kv=past_kv)[0]


def last_hidden(model, ids: list[int], head_mask=None, attention_window=None,
                layer_inputs=None) -> torch.Tensor:
    """[1, T, d] the last hidden state of ids (after the final norm)."""
    net = model.network
    mask = None if head_mask is None else model.check_head_mask(head_mask)
    with torch.inference_mode():
        h = net.embed(torch.tensor([ids], dtype=torch.long, device=net.device))
        return net.finish(run_stack(net, h, 0, mask, attention_window, layer_inputs))


def predicted(model, hidden: torch.Tensor, rows) -> np.ndarray:
    """The model's top token at rows of a last hidden state [1, T, d]: [len(rows)]."""
    with torch.inference_mode():
        logits = model.network.lm_logits(hidden[0, torch.as_tensor(rows, dtype=torch.long,
                                                                  device=hidden.device)])
        return logits.float().argmax(-1).cpu().numpy()


def next_token_losses(model, hidden: torch.Tensor, ids: list[int]) -> np.ndarray:
    """[B] the mean next-token cross-entropy (nats) of ids under each of B last hidden
    states [B, T, d], the logits made a block of positions at a time."""
    return (next_token_loss_sums(model, hidden, ids) / (len(ids) - 1)).cpu().numpy()


def next_token_loss_sums(model, hidden: torch.Tensor, ids: list[int],
                         first: int = 0) -> torch.Tensor:
    """[B] float64: the sum of the next-token cross-entropies (nats) that B last hidden states
    [B, r, d] of positions first..first + r - 1 of ids give the tokens after them."""
    net = model.network
    batch, length = hidden.shape[0], min(hidden.shape[1], len(ids) - 1 - first)
    targets = torch.tensor(ids[first + 1:first + 1 + length], dtype=torch.long,
                           device=hidden.device)
    step = max(1, LOGIT_BYTES // (4 * batch * model.info.vocab_size))
    total = torch.zeros(batch, dtype=torch.float64, device="cpu")  # MPS has no float64
    with torch.inference_mode():
        for start in range(0, length, step):
            stop = min(start + step, length)
            logits = net.lm_logits(hidden[:, start:stop]).float()  # [B, n, V]
            # one row per (state, position), the vocabulary contiguous: the log-softmax
            # across a [B, V, n] view read its numbers strided (1.5x the time)
            n = stop - start
            losses = F.cross_entropy(logits.reshape(batch * n, -1),
                                     targets[start:stop].repeat(batch), reduction="none")
            total += losses.view(batch, n).sum(1).cpu().double()
    return total


def hidden_and_maps(model, ids: list[int]):
    """(last hidden [1, T, d], maps rebuilt on demand): one forward that keeps each layer's
    input (L x T x d floats), from which any row of any head's map is rebuilt."""
    last = model.info.n_layer - 1
    kept = Interventions(capture=[("resid_post", last)])
    _, maps = model.run_hooked(ids, kept, maps="on_demand")
    with torch.inference_mode():
        hidden = model.network.finish(kept.captured[("resid_post", last)])
    return hidden, maps
