"""The memory a server keeps for results: a byte budget, caches bounded by it, and the check
that refuses one input whose attention maps alone would not fit.

A trace holds L x H x T x T float32 weights: SmolLM2 at 1,024 tokens is 1.1 GB, and entry
counts say nothing about that. Results are kept in a ByteLRU, which evicts the least
recently used until the bytes it holds are under its share of the budget.

MHA_VIZ_MEMORY_MB sets the budget (default 2,560 MB, for a 4 GB container that also holds
the Python process and the models, about 1.2 GB with SmolLM2 and MiniLM loaded).
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

import numpy as np

from .errors import InputError

DEFAULT_MB = 2560
# How the budget is spent: half on kept results (traces, runs, sweeps), and a quarter on each
# of the (by default two, MHA_VIZ_MAX_JOBS) forward passes that may run at once. So one
# input's maps may take at most a quarter of it.
RESULTS_SHARE = 0.5
ONE_INPUT_SHARE = 0.25


def budget_bytes() -> int:
    """The server's memory budget for results, in bytes (MHA_VIZ_MEMORY_MB)."""
    try:
        mb = float(os.environ.get("MHA_VIZ_MEMORY_MB", DEFAULT_MB))
    except ValueError:
        mb = DEFAULT_MB
    return int(max(mb, 64) * 2**20)


def nbytes(value: Any, _seen: set | None = None) -> int:
    """The bytes of the arrays and tensors a result holds (containers and dataclasses are
    walked; a model it refers to is shared, not owned, and is not counted)."""
    if isinstance(value, (str, bytes)):
        return len(value)
    seen = _seen if _seen is not None else set()
    if value is None or isinstance(value, (int, float, bool)) or id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    try:
        import torch

        if isinstance(value, torch.Tensor):
            return int(value.element_size() * value.nelement())
        if isinstance(value, torch.nn.Module):
            return 0
    except ImportError:  # pragma: no cover - torch is a requirement
        pass
    if getattr(value, "shared_by_results", False):  # a loaded model: its weights are no input's
        return 0
    if hasattr(value, "held_bytes"):  # a trace, or on-demand maps: never computes maps
        return int(value.held_bytes())
    if isinstance(value, dict):
        return sum(nbytes(v, seen) for v in value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        return sum(nbytes(v, seen) for v in value)
    if dataclasses.is_dataclass(value):
        return sum(nbytes(getattr(value, f.name), seen) for f in dataclasses.fields(value))
    if hasattr(value, "__dict__"):
        return sum(nbytes(v, seen) for v in vars(value).values())
    return 0


def maps_bytes(n_layer: int, n_head: int, n_tokens: int) -> int:
    """Bytes of one input's attention maps (float32)."""
    return 4 * n_layer * n_head * n_tokens * n_tokens


def check_fits(n_layer: int, n_head: int, n_tokens: int, budget: int | None = None) -> None:
    """InputError when one input's maps would take more than ONE_INPUT_SHARE of the budget,
    saying how long a text would fit."""
    budget = budget_bytes() if budget is None else budget
    allowed = ONE_INPUT_SHARE * budget
    need = maps_bytes(n_layer, n_head, n_tokens)
    if need <= allowed:
        return
    fits = tokens_within(4 * n_layer * n_head, budget)
    raise InputError(
        f"this text has {n_tokens:,} tokens: its attention maps ({n_layer} layers × {n_head} "
        f"heads × {n_tokens:,} × {n_tokens:,}) need {need / 2**30:.1f} GB, more than this "
        f"server keeps for one input ({allowed / 2**30:.1f} GB of its {budget / 2**30:.1f} GB "
        f"budget). Shorten it to {fits:,} tokens or fewer (Max tokens, in the sidebar).")


def maps_fit(n_layer: int, n_head: int, n_tokens: int, budget: int | None = None) -> bool:
    """Whether one input's maps, all at once, fit ONE_INPUT_SHARE of the budget: whether the
    store keeps a trace's maps whole (choose_maps)."""
    return fits_one_input(maps_bytes(n_layer, n_head, n_tokens), budget)


def fits_one_input(n_bytes: int, budget: int | None = None) -> bool:
    """Whether a result of n_bytes fits ONE_INPUT_SHARE of the budget."""
    budget = budget_bytes() if budget is None else budget
    return n_bytes <= ONE_INPUT_SHARE * budget


def tokens_within(bytes_per_squared_token: float, budget: int | None = None) -> int:
    """The most tokens T for which a result of bytes_per_squared_token x T^2 bytes fits
    ONE_INPUT_SHARE of the budget."""
    budget = budget_bytes() if budget is None else budget
    return int(math.sqrt(ONE_INPUT_SHARE * budget / bytes_per_squared_token))


def too_long(what: str, n_tokens: int, bytes_per_squared_token: float,
             budget: int | None = None) -> str | None:
    """Why ``what``, which holds bytes_per_squared_token x T^2 bytes while computed on a
    T-token input, is not computed for this one: it would take more than ONE_INPUT_SHARE of
    the budget (the sentence says how many tokens would fit). None when it fits."""
    budget = budget_bytes() if budget is None else budget
    need = bytes_per_squared_token * int(n_tokens) ** 2
    if fits_one_input(need, budget):
        return None
    return (f"{what} over {int(n_tokens):,} tokens would hold {size_text(need)} at once, "
            f"more than this server keeps for one input "
            f"({size_text(ONE_INPUT_SHARE * budget)}): it runs on up to "
            f"{tokens_within(bytes_per_squared_token, budget):,} tokens.")


def size_text(n_bytes: float) -> str:
    """Bytes in words: "1.3 GB", "250 MB"."""
    return f"{n_bytes / 2**30:.1f} GB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:,.0f} MB"


# Weights one pass over every map may compute and still be a short wait (about 2 s on 2
# cores for maps rebuilt on demand; maps held whole are read far faster).
QUICK_PASS_WEIGHTS = 1 << 27


def one_pass_is_quick(n_layer: int, n_head: int, n_tokens: int) -> bool:
    """Whether reading every weight of one input's maps once is a short wait: a view that
    needs a pass of its own over them (the grid of every head) runs by itself, else on a
    click."""
    return n_layer * n_head * n_tokens * n_tokens <= QUICK_PASS_WEIGHTS


def check_held(trace, budget: int | None = None) -> None:
    """InputError when what an opened trace holds (its maps, or what rebuilds them) would take
    more than ONE_INPUT_SHARE of the budget."""
    budget = budget_bytes() if budget is None else budget
    if trace.held_bytes() > ONE_INPUT_SHARE * budget:
        check_fits(trace.n_layer, trace.n_head, trace.n_tokens, budget)
        raise InputError(f"this trace holds {trace.held_bytes() / 2**30:.1f} GB, more than "
                         f"this server keeps for one input")


def on_demand_bytes(n_layer: int, d_model: int, n_tokens: int) -> int:
    """Bytes of one input's on-demand trace: the hidden state entering each layer."""
    return 4 * n_layer * d_model * n_tokens


def choose_maps(n_layer: int, n_head: int, d_model: int, n_tokens: int,
                budget: int | None = None, bytes_per_token: int = 0) -> str:
    """How one input's trace is kept within ONE_INPUT_SHARE of the budget: "full" (every
    map held, fastest) while the maps fit, else "on_demand" (maps recomputed when looked at;
    memory grows with T, not T squared). InputError when even that would not fit.
    bytes_per_token: what else the result keeps per token (a ForwardRun's per-layer pieces)."""
    budget = budget_bytes() if budget is None else budget
    allowed = ONE_INPUT_SHARE * budget
    extra = bytes_per_token * n_tokens
    if maps_bytes(n_layer, n_head, n_tokens) + extra <= allowed:
        return "full"
    per_token = 4 * n_layer * d_model + bytes_per_token
    need = per_token * n_tokens
    if need <= allowed:
        return "on_demand"
    raise InputError(
        f"this text has {n_tokens:,} tokens: even with its attention maps computed on demand, "
        f"what the model keeps for it needs {need / 2**30:.1f} GB, more than this server keeps "
        f"for one input ({allowed / 2**30:.1f} GB of its {budget / 2**30:.1f} GB budget). "
        f"Shorten it to {int(allowed // per_token):,} tokens or fewer (Max tokens, in the "
        f"sidebar).")


class ByteLRU:
    """A thread-safe least-recently-used store bounded by the bytes its values hold.

    A value larger than the whole bound is returned to its caller but not kept.
    ``get_or_compute`` computes a missing key once however many threads ask at the same time.
    """

    def __init__(self, max_bytes: int, size: Callable[[Any], int] = nbytes):
        self.max_bytes = int(max_bytes)
        self.size = size
        self.data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.bytes = 0
        self.lock = threading.Lock()
        self._computing: dict[Hashable, threading.Lock] = {}

    def get(self, key: Hashable) -> tuple[bool, Any]:
        with self.lock:
            if key in self.data:
                self.data.move_to_end(key)
                return True, self.data[key][0]
        return False, None

    def put(self, key: Hashable, value: Any) -> None:
        size = self.size(value)
        with self.lock:
            if key in self.data:
                self.bytes -= self.data.pop(key)[1]
            if size > self.max_bytes:
                return
            self.data[key] = (value, size)
            self.bytes += size
            while self.bytes > self.max_bytes and self.data:
                _, (_, evicted) = self.data.popitem(last=False)
                self.bytes -= evicted

    def get_or_compute(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        found, value = self.get(key)
        if found:
            return value
        with self.lock:
            key_lock = self._computing.setdefault(key, threading.Lock())
        with key_lock:
            found, value = self.get(key)
            if not found:
                value = compute()
                self.put(key, value)
        with self.lock:
            self._computing.pop(key, None)
        return value

    def clear(self) -> None:
        with self.lock:
            self.data.clear()
            self.bytes = 0

    def __len__(self) -> int:
        return len(self.data)
