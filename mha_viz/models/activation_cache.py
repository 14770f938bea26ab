"""model.run_with_cache: one forward that keeps the named activations (mha_viz.engine.interventions),
addressed as ``cache["z", 20]`` or by TransformerLens's hook names
(``cache["blocks.20.attn.hook_z"]``), in TransformerLens's layouts, so notebooks port:

    resid_pre, resid_mid, resid_post, attn_out, mlp_out   [batch, pos, d_model]
    q, k, v, z, rot_q, rot_k                              [batch, pos, head, d_head]
    result                                                [batch, pos, head, d_model]
    pattern                                               [batch, head, query_pos, key_pos]
    scale (final norm; cache["scale"])                    [batch, pos, 1]

k and v have the model's key/value heads (fewer than the query heads on a grouped-query
model) unless ungroup_kv=True gives each query head its copy, as TransformerLens's
ungroup_grouped_query_attention does.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from ..core.errors import InputError
from ..engine.interventions import FINAL_POINTS, Interventions, point_width, run_with_hooks
from ..engine.placement import to_numpy

CACHE_POINTS = ("resid_pre", "q", "k", "v", "rot_q", "rot_k", "scores", "pattern", "z",
                "result", "attn_out", "resid_mid", "mlp_out", "resid_post")
# result is H times the stream's size; rot_q and rot_k repeat q and k but for the rotation;
# scores are the pattern before its softmax
DEFAULT_POINTS = tuple(p for p in CACHE_POINTS
                       if p not in ("result", "rot_q", "rot_k", "scores")) + ("scale",)
HOOK_NAMES = {
    "resid_pre": "hook_resid_pre", "resid_mid": "hook_resid_mid",
    "resid_post": "hook_resid_post", "attn_out": "hook_attn_out", "mlp_out": "hook_mlp_out",
    "q": "attn.hook_q", "k": "attn.hook_k", "v": "attn.hook_v", "z": "attn.hook_z",
    "rot_q": "attn.hook_rot_q", "rot_k": "attn.hook_rot_k",
    "scores": "attn.hook_attn_scores", "pattern": "attn.hook_pattern",
    "result": "attn.hook_result",
}
_BY_HOOK = {hook: name for name, hook in HOOK_NAMES.items()}
# the engine's [B, H, T, d_k] -> TransformerLens's [B, T, H, d_k]
_HEAD_FIRST = ("q", "k", "v", "rot_q", "rot_k", "z")


class ActivationCache(Mapping):
    """Activations of one forward, read-only. Keys: (name, layer), ("scale", None), or a
    TransformerLens hook name; iteration gives the hook names."""

    def __init__(self, values: dict[tuple[str, int | None], torch.Tensor], tokens: list[str]):
        self._values = values
        self.tokens = tokens

    @classmethod
    def from_captured(cls, captured: dict, tokens: list[str], row: int | None = None
                      ) -> "ActivationCache":
        """A cache from an Interventions' captured values (the engine's layouts), in
        TransformerLens's layouts; row: keep that row of the batch only (as a batch of 1)."""
        values = {}
        for (name, layer), value in captured.items():
            if row is not None:
                value = value[row:row + 1]
            values[(name, layer)] = value.transpose(1, 2) if name in _HEAD_FIRST else value
        return cls(values, tokens)

    def _key(self, key) -> tuple[str, int | None]:
        if isinstance(key, tuple) and len(key) == 2:
            return key[0], None if key[1] is None else int(key[1])
        if key == "scale" or key == "ln_final.hook_scale":
            return "scale", None
        if isinstance(key, str) and key.startswith("blocks."):
            _, layer, rest = key.split(".", 2)
            if rest in _BY_HOOK and layer.isdigit():
                return _BY_HOOK[rest], int(layer)
        raise KeyError(key)

    def __getitem__(self, key) -> torch.Tensor:
        found = self._values.get(self._key(key))
        if found is None:
            raise KeyError(f"{key!r} was not kept: run_with_cache(names=[...]) chooses what is")
        return found

    def __iter__(self):
        for name, layer in self._values:
            yield "ln_final.hook_scale" if layer is None else f"blocks.{layer}.{HOOK_NAMES[name]}"

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key) -> bool:
        try:
            return self._key(key) in self._values
        except (KeyError, ValueError):
            return False

    def nbytes(self) -> int:
        return sum(t.element_size() * t.nelement() for t in self._values.values())

    def numpy(self) -> dict[str, np.ndarray]:
        return {key: to_numpy(self[key]) for key in self}


def cache_bytes(model, n_tokens: int, names, ungroup_kv: bool = False) -> dict[str, int]:
    """Bytes each name would take over every layer (float32)."""
    info = model.info
    return {name: 4 * n_tokens * (1 if name in FINAL_POINTS else info.n_layer)
            * point_width(info, name, n_tokens, ungroup_kv) for name in names}


def run_with_cache(model, text_or_ids, names=None, ungroup_kv: bool = False,
                   max_bytes: int | None = None):
    """-> (logits [1, T, vocab] (the last hidden state [1, T, d] for a model without an LM
    head), ActivationCache). names: which points to keep (default every one but result,
    which is H times the stream's size); max_bytes: what the cache may take (default: one
    input's share of the server's memory budget); a cache that would not fit is refused,
    naming what it would take."""
    from ..core.budget import ONE_INPUT_SHARE, budget_bytes

    names = DEFAULT_POINTS if names is None else tuple(names)
    unknown = [n for n in names if n not in CACHE_POINTS + FINAL_POINTS]
    if unknown:
        raise InputError(f"unknown activation name(s) {', '.join(map(repr, unknown))}: choose "
                         f"from {', '.join(CACHE_POINTS + FINAL_POINTS)}")
    if isinstance(text_or_ids, str):
        enc = model.encode(text_or_ids)
        ids = enc.input_ids
    else:
        ids = model._check_ids(text_or_ids)
    sizes = cache_bytes(model, len(ids), names, ungroup_kv)
    limit = int(ONE_INPUT_SHARE * budget_bytes()) if max_bytes is None else int(max_bytes)
    if sum(sizes.values()) > limit:
        largest = sorted(sizes.items(), key=lambda item: -item[1])[:3]
        raise InputError(
            f"the cache would take {sum(sizes.values()) / 2**20:,.0f} MB, more than the "
            f"{limit / 2**20:,.0f} MB allowed ("
            + ", ".join(f"{n} {b / 2**20:,.0f} MB" for n, b in largest)
            + "): keep fewer names, or a shorter text")
    hooks = Interventions(capture=names, ungroup_kv=ungroup_kv)
    net = model.network
    with torch.inference_mode():
        final = run_with_hooks(net, torch.tensor([ids], dtype=torch.long, device=net.device),
                               hooks)
        last_hidden = net.finish(final, hooks)
        out = net.lm_logits(last_hidden) if model.info.has_lm_head else last_hidden
    return out, ActivationCache.from_captured(hooks.captured, model.display_tokens(ids))
