"""Heads restricted to a sink and a window (StreamingLLM, Xiao et al. 2023; per head,
DuoAttention, Xiao et al. 2024): a restricted head's query i reads the keys j < sink and
i - window < j <= i only; every other head reads what it reads anyway.

The restriction is an exact mask inside the one score kernel (attention.attention_scores):
the hidden keys get -inf before the softmax, as a causal or a sliding-window mask does, so a
restricted head's map, the values it mixes and every later layer are what a model with that
mask computes (tests/unit/test_attention_window.py: transformers with the same 4-D mask).

    AttentionWindow  the model's restriction: sink, window, heads [L, H] (or [B, L, H]: a
                     restriction per sequence of a batch, one head each in a sweep)
    HeadWindow       one layer's share of it, which the kernel reads
    attention_window(spec, n_layer, n_head, causal): a caller's dict checked into one
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core.errors import InputError

SPEC_KEYS = ("sink", "window", "heads")


@dataclass(frozen=True, eq=False)
class HeadWindow:
    """One layer's restriction: heads [H] (the same for every sequence) or [B, H] bools."""
    sink: int
    window: int
    heads: torch.Tensor

    def far_keys(self, rows: torch.Tensor, n_keys: int) -> torch.Tensor:
        """[r, S] True where query position rows[i] may not read key j: past the sink and
        a window or more tokens back."""
        keys = torch.arange(n_keys, device=rows.device)[None, :]
        return (keys >= self.sink) & (keys <= rows[:, None] - self.window)

    def hide(self, scores: torch.Tensor, rows: torch.Tensor) -> None:
        """-inf in place on the far keys of the restricted heads' scores [B, H, r, S] (rows:
        the absolute positions of the r query rows)."""
        far = self.far_keys(rows.to(scores.device), scores.shape[-1])
        if not bool(far.any()):  # the rows are all within sink + window
            return
        shared = self.heads.dim() == 1
        for found in self.heads.nonzero().tolist():
            target = scores[:, found[0]] if shared else scores[found[0], found[1]]
            target.masked_fill_(far, float("-inf"))

    def of_heads(self, chosen: torch.Tensor) -> "HeadWindow":
        """The restriction of some of the layer's heads, in the order of chosen (indices):
        what a map rebuilt for those heads reads."""
        return HeadWindow(self.sink, self.window, self.heads[..., chosen.to(self.heads.device)])


@dataclass(frozen=True, eq=False)
class AttentionWindow:
    """sink, window and the heads restricted: a bool tensor [L, H] or [B, L, H]."""
    sink: int
    window: int
    heads: torch.Tensor

    def layer(self, layer: int) -> HeadWindow | None:
        """This layer's restriction, or None when none of its heads is restricted."""
        heads = self.heads[layer] if self.heads.dim() == 2 else self.heads[:, layer]
        if not bool(heads.any()):
            return None
        return HeadWindow(self.sink, self.window, heads)

    def described(self) -> dict:
        """Plain values naming the restriction (what a trace records, and its key)."""
        return {"sink": self.sink, "window": self.window,
                "heads": self.heads.cpu().numpy().astype(bool).tolist()}

    def kept_keys(self, n_tokens: int) -> int:
        """Keys a restricted head's last query reads out of n_tokens: sink + window at most."""
        return min(int(n_tokens), self.sink + self.window)


def _whole(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"the attention window's {name} must be a whole number, got "
                         f"{value!r}")
    return int(value)


def _is_pairs(items) -> bool:
    return all(isinstance(pair, (list, tuple)) and len(pair) == 2
               and not any(isinstance(v, (bool, np.bool_)) for v in pair) for pair in items)


def _heads_mask(heads, n_layer: int, n_head: int) -> np.ndarray:
    """None (every head), a [L, H] or [B, L, H] array of bools, or (layer, head) pairs."""
    if heads is None:
        return np.ones((n_layer, n_head), dtype=bool)
    if isinstance(heads, torch.Tensor):
        heads = heads.detach().cpu().numpy()
    if isinstance(heads, (list, tuple)) and _is_pairs(heads):
        mask = np.zeros((n_layer, n_head), dtype=bool)
        for pair in heads:
            layer, head = (_whole(v, "heads") for v in pair)
            if not 0 <= layer < n_layer or not 0 <= head < n_head:
                raise InputError(f"head ({layer}, {head}) is out of range: layers 0.."
                                 f"{n_layer - 1}, heads 0..{n_head - 1}")
            mask[layer, head] = True
        return mask
    array = np.asarray(heads)
    if array.ndim not in (2, 3) or tuple(array.shape[-2:]) != (n_layer, n_head):
        raise InputError(f"the attention window's heads must be None, a [{n_layer}, {n_head}] "
                         f"array of bools (layers x heads) or a list of (layer, head) pairs, "
                         f"got {heads!r:.80}")
    if array.dtype != bool and not np.isin(array, (0, 1)).all():
        raise InputError("the attention window's heads array must hold True/False or 1/0")
    return array.astype(bool)


def attention_window(spec, n_layer: int, n_head: int, causal: bool = True,
                     device=None) -> AttentionWindow | None:
    """A caller's restriction checked: {"sink": s, "window": w, "heads": None | [L, H]
    bools | [(layer, head), ...]} (sink defaults to 0: window only; heads to None: every
    head), or an AttentionWindow, or None (no restriction). Raises InputError, in words,
    on a window under 1 (a query would not read even itself), a negative sink, an unknown
    key, heads out of range, and on a bidirectional model, whose queries read the keys
    after them as well: a sink and a trailing window is a causal model's restriction."""
    if spec is None:
        return None
    if isinstance(spec, AttentionWindow):
        return spec
    if not isinstance(spec, dict):
        raise InputError("attention_window must be a dict {'sink': s, 'window': w, 'heads': "
                         f"None or [[layer, head], ...]}}, got a {type(spec).__name__}")
    unknown = sorted(set(spec) - set(SPEC_KEYS), key=str)
    if unknown:
        raise InputError(f"attention_window takes the keys sink, window and heads, not "
                         f"{', '.join(map(repr, unknown))}")
    if "window" not in spec:
        raise InputError("attention_window needs a 'window': the recent keys each "
                         "restricted query reads (itself included)")
    sink, window = _whole(spec.get("sink", 0), "sink"), _whole(spec["window"], "window")
    if window < 1:
        raise InputError(f"the attention window must be at least 1 token (the query itself), "
                         f"got {window}")
    if sink < 0:
        raise InputError(f"the attention sink must be 0 or more tokens, got {sink}")
    if not causal:
        raise InputError("a sink and a window restrict a causal model's queries to earlier "
                         "keys; this model is bidirectional (each query reads the keys after "
                         "it too), so the restriction would change what the model is")
    heads = _heads_mask(spec.get("heads"), n_layer, n_head)
    return AttentionWindow(sink, window, torch.as_tensor(heads, device=device))
