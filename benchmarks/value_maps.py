"""How much of each layer goes to the first token (the attention sink): its share of the
attention weights and of the value-weighted maps (what the heads move, Kobayashi et al.
2020), averaged over every head and query, on SmolLM2 and the app's example texts (the
coreference sentence the app opens on, and the indirect-object prompt). Also the time of a
value-weighted trace against a plain one, in the same run.

    python benchmarks/value_maps.py [--model smollm2] [--text TEXT]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mha_viz import load_model  # noqa: E402
from mha_viz.analysis import context_mixing  # noqa: E402

# the app's examples (mha_viz/ui/settings.py, EXAMPLES "coreference" and "ioi")
TEXTS = ["The animal didn't cross the street because it was too tired.",
         "When Mary and John went to the store, John gave a drink to"]


def first_token_shares(model, text: str) -> tuple[np.ndarray, np.ndarray]:
    """[L] each: the first token's share (mean over heads and over the queries after it: the
    first token's own row has no other key) of the weights and of the value-weighted maps."""
    weights = model.trace(text).attentions[:, :, 1:, 0].mean(axis=(1, 2))
    moved = model.trace(text, weights="value").attentions[:, :, 1:, 0].mean(axis=(1, 2))
    return weights, moved


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--text", action="append", default=None)
    args = parser.parse_args()
    model = load_model(args.model)
    for text in args.text or TEXTS:
        weights, moved = first_token_shares(model, text)
        mixing = context_mixing(model, text).layer_means()
        print(f"\n{args.model}, {text!r}: the first token's share (mean over heads and "
              f"the queries after it), and the context-mixing ratios (mean over queries)")
        print(f"{'layer':>5} {'weights':>8} {'moved':>8}   context mixing: "
              f"{'weights':>8} {'attention':>9} {'+residual':>9}")
        for layer in range(len(weights)):
            print(f"{layer:>5} {weights[layer]:8.3f} {moved[layer]:8.3f}   {'':16}"
                  f"{mixing['weights'][layer]:8.3f} {mixing['attention'][layer]:9.3f} "
                  f"{mixing['residual'][layer]:9.3f}")
        print(f"{'all':>5} {weights.mean():8.3f} {moved.mean():8.3f}")
    text = TEXTS[0] * 20
    for label, weights in (("attention", "attention"), ("value-weighted", "value")):
        model.trace(text, weights=weights)
        started = time.perf_counter()
        trace = model.trace(text, weights=weights)
        print(f"{label} trace of {trace.n_tokens} tokens: "
              f"{time.perf_counter() - started:.3f} s")


if __name__ == "__main__":
    main()
