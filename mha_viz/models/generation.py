"""A causal model writing text: Model.generate (the Generating mixin) and what it returns.

The prompt runs once, filling a key/value cache (engine.kv_cache); each new token then runs
one forward over that token alone, reading every earlier position's keys and values from the
cache. The trace of prompt + continuation is collected on the way: the prompt's rows from
its forward, each new token's row from its own step (its attention over every key so far is
the row a fresh trace of the whole text computes), and one last step for the last token's row.
So the trace costs no second pass over the text; a long text's trace keeps each layer's input
instead (on-demand maps, rebuilt from the stream entering each layer, which the steps
computed too).
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import torch

from ..core.errors import InputError
from ..engine.kv_cache import KVCache
from ..engine.transformer import QUERY_CHUNK
from ..maps.ondemand import LayerInputMaps
from ..maps.trace import AttentionTrace
from ..maps.value_weighted import check_weights, value_output_norms, weigh_maps

# why writing stopped: the tokens asked for were written, the model wrote its end-of-text
# token, the text reached the model's context, or the caller cancelled
STOP_REASONS = ("length", "end_of_text", "context", "cancelled")


@dataclass
class Generation:
    """What Model.generate wrote after a prompt."""
    prompt_ids: list[int]
    new_ids: list[int]  # the tokens written (the end-of-text token included, when written)
    text: str  # the continuation's text
    stop_reason: str  # one of STOP_REASONS
    trace: AttentionTrace | None  # prompt + continuation (trace.prompt_length)
    temperature: float
    seed: int | None  # the sampling seed used (None when greedy): the same seed writes again
    seconds: float  # time spent writing (the prompt's forward and every step)

    @property
    def prompt_length(self) -> int:
        return len(self.prompt_ids)

    @property
    def ids(self) -> list[int]:
        """Prompt and continuation."""
        return [*self.prompt_ids, *self.new_ids]

    @property
    def tokens_per_second(self) -> float:
        return len(self.new_ids) / self.seconds if self.seconds > 0 else float("nan")


def _check_request(max_new_tokens, temperature, seed) -> tuple[int, float, int | None]:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
        raise InputError(f"max_new_tokens must be a whole number, got {max_new_tokens!r}")
    if max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be at least 1, got {max_new_tokens}: ask for "
                         f"one token or more")
    try:
        temperature = float(temperature)
    except (TypeError, ValueError):
        raise InputError(f"temperature must be a number, got {temperature!r}") from None
    if not math.isfinite(temperature) or temperature < 0:
        raise InputError(f"temperature must be 0 (greedy) or more, got {temperature}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise InputError(f"seed must be a whole number or None, got {seed!r}")
    return int(max_new_tokens), temperature, None if seed is None else int(seed)


def written_from(prompt_ids, ids) -> int:
    """Where the model's writing starts in ids, the tokens of a prompt's text followed by
    the text the model wrote, tokenized again: how many leading ids are the prompt's own.
    Tokenizing the whole text again can join the prompt's last token with the first one
    written (a prompt ending in a space, then "Paris": " Paris"); the written part then starts
    at the joined token."""
    start = 0
    for prompt_id, token_id in zip(prompt_ids, ids):
        if int(prompt_id) != int(token_id):
            break
        start += 1
    return start


def mark_written(trace: AttentionTrace, prompt_ids, mark: str) -> AttentionTrace:
    """The trace of a prompt and what a model wrote after it, with the written positions'
    display tokens beginning with ``mark`` (every figure and table that labels tokens shows
    it) and prompt_length saying where the writing starts (written_from), as
    Model.generate's own trace records it. The maps are the trace's own, not copied; the
    mark and prompt_length make it another input to stored results than the same text
    typed in."""
    start = written_from(prompt_ids, trace.token_ids)
    labels = [token if position < start else f"{mark}{token}"
              for position, token in enumerate(trace.display_tokens)]
    return replace(trace, attentions=trace.maps, display_tokens=labels, prompt_length=start)


class Generating:
    """Model.generate: a causal model continues a text."""

    def _prompt_ids(self, text) -> list[int]:
        if isinstance(text, str):
            enc = self.encode(text)
            if enc.truncated:
                raise InputError(
                    f"the prompt has {enc.n_tokens_before_truncation:,} tokens, more than the "
                    f"model's context of {self.info.max_positions:,}: nothing can be written "
                    f"after it")
            return enc.input_ids
        return self._check_ids(text)

    def generate(self, text, max_new_tokens: int = 20, temperature: float = 0.0,
                 seed: int | None = None, *, progress: Callable | None = None,
                 cancel: threading.Event | None = None, trace: bool = True, maps="auto",
                 weights: str = "attention") -> Generation:
        """Continue text (a string, or token ids) by up to max_new_tokens tokens: greedy at
        temperature 0 (the most likely token each time), else sampled from softmax(logits /
        temperature) with a seeded generator (seed None: a fresh seed, recorded). Writing
        stops at the model's end-of-text token, at the model's context (stop_reason
        "context": fewer tokens than asked) or when cancelled.

        One forward per new token, over that token alone (a key/value cache holds the
        earlier positions'). progress(done, total, token_id) is told each token written; it
        returns False to stop (as cancel.set() does, checked before each token).
        trace: also return the trace of prompt + continuation (maps, weights: as
        Model.trace takes them; maps are held whole, or on demand for a long text)."""
        if not self.info.causal:
            raise InputError(f"'{self.info.name}' reads the whole text at once (bidirectional "
                             f"attention): it has no next token to write. Generation needs a "
                             f"causal model (GPT-2, SmolLM2, ...)")
        if not self.info.has_lm_head:
            raise InputError(f"'{self.info.name}' has no language-model head: it gives "
                             f"embeddings, not tokens")
        n_asked, temperature, seed = _check_request(max_new_tokens, temperature, seed)
        check_weights(weights)
        prompt = self._prompt_ids(text)
        room = self.info.max_positions - len(prompt)
        if room < 1:
            raise InputError(f"the prompt's {len(prompt):,} tokens fill the model's context "
                             f"of {self.info.max_positions:,}: nothing can be written after it")
        limit = min(n_asked, room)
        kind = self.maps_kind(len(prompt) + limit, maps) if trace else "none"
        if trace and kind == "none":
            raise InputError("a trace holds maps: use maps='full', 'on_demand' or 'auto'")
        if temperature > 0 and seed is None:
            seed = secrets.randbits(63)
        writer = _Writer(self.network, len(prompt), limit, kind)
        started = time.perf_counter()
        new, reason = writer.write(prompt, limit, temperature, seed, self.tokenizer.eos_token_id,
                                   progress, cancel)
        if reason == "length" and limit < n_asked:
            reason = "context"
        found = writer.finish([*prompt, *new]) if trace else None
        seconds = time.perf_counter() - started
        written = self._continuation_text(prompt, new)
        shown = None
        if found is not None:
            if weights == "value":
                found = weigh_maps(found, writer.value_norms())
            prompt_text = text if isinstance(text, str) else ""
            shown = self._make_trace(self.encoding_of_ids([*prompt, *new]), found,
                                     prompt_text + written, None, weights,
                                     prompt_length=len(prompt))
        return Generation(prompt, new, written, reason, shown, temperature,
                          seed if temperature > 0 else None, seconds)

    def _continuation_text(self, prompt: list[int], new: list[int]) -> str:
        """The text the new tokens add to the prompt's (decoded together, so a token that
        starts with a space keeps it)."""
        with self._tokenizer_lock:
            before = self.tokenizer.decode(prompt)
            whole = self.tokenizer.decode([*prompt, *new])
            return whole[len(before):] if whole.startswith(before) else \
                self.tokenizer.decode(new)


class _Writer:
    """The forwards of one generation: the prompt's, then one per token, with the cache and
    what the trace keeps (the rows of the maps, or each layer's input)."""

    def __init__(self, network, n_prompt: int, limit: int, kind: str):
        self.net = network
        self.n_layer = network.config.n_layer
        size = n_prompt + limit
        self.cache = KVCache(self.n_layer, capacity=size)
        self.maps = None
        self.inputs = None
        if kind == "full":
            self.maps = torch.zeros(self.n_layer, network.config.n_head, size, size,
                                    device=network.device)
        elif kind == "on_demand":
            self.inputs = [[] for _ in range(self.n_layer)]
        self.length = 0  # positions run so far

    def _run(self, ids: list[int]) -> torch.Tensor:
        """Positions length.. hold ids: run them, reading and extending the cache -> the
        stream after the last layer at the last position, [1, 1, d]."""
        net, start = self.net, self.length
        h = net.embed(torch.tensor([ids], device=net.device), offset=start)
        inputs = None if self.inputs is None else []
        if start == 0:  # the prompt: a block of query rows at a time
            out = None if self.maps is None else self.maps[:, :, :len(ids), :len(ids)]
            final, kept = net.run_layers(h, 0, None, None, attentions_out=out,
                                         layer_inputs=inputs, query_chunk=QUERY_CHUNK,
                                         past_kv=self.cache)
        else:  # one new row over every key so far: no mask (it sees them all)
            final, kept = net.run_layers(h, 0, None, None, keep_attentions=self.maps is not None,
                                         layer_inputs=inputs, offset=start,
                                         past_kv=self.cache)
            for layer, weights in enumerate(kept):
                self.maps[layer, :, start, :start + 1] = weights[0, :, 0]
        if inputs is not None:
            for layer, stream in enumerate(inputs):
                self.inputs[layer].append(stream)
        self.length += len(ids)
        return final[:, -1:]

    def write(self, prompt, limit, temperature, seed, eos, progress, cancel):
        """-> (the new ids, why writing stopped)."""
        net = self.net
        generator = None
        if temperature > 0:
            generator = torch.Generator(device=net.device).manual_seed(seed)
        new: list[int] = []
        with torch.inference_mode():
            last = self._run(prompt)
            while True:
                if cancel is not None and cancel.is_set():
                    return new, "cancelled"
                logits = net.lm_logits(net.finish(last))[0, -1].float()
                if generator is None:
                    token = int(logits.argmax())
                else:
                    probs = torch.softmax(logits / temperature, dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=generator))
                new.append(token)
                stopped = progress is not None and progress(len(new), limit, token) is False
                if token == eos:
                    return new, "end_of_text"
                if len(new) == limit:
                    return new, "length"
                if stopped:
                    return new, "cancelled"
                last = self._run([token])

    def finish(self, ids: list[int]):
        """The maps of every position of ids (prompt and continuation; the last token's row
        computed now, when no step ran it) -> float32 [L, H, T, T] or on-demand maps."""
        with torch.inference_mode():
            if self.length < len(ids):
                self._run(ids[self.length:])
            n = self.length
            if self.maps is not None:
                maps = self.maps[:, :, :n, :n]
                return (maps if maps.is_contiguous() else maps.contiguous()).cpu().numpy()
            return LayerInputMaps(self.net, [torch.cat(parts, dim=1) for parts in self.inputs])

    def value_norms(self) -> np.ndarray:
        """||f_h(x_j)|| [L, H, T] from the cached values of every position."""
        with torch.inference_mode():
            return np.stack([value_output_norms(block.attn, self.cache[layer].values_so_far())
                             [0].cpu().numpy() for layer, block in enumerate(self.net.blocks)])
