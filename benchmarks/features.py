"""Features at the head: the speed of one query row of feature score attribution (a head's
score split into query-feature x key-feature terms of the bundled residual dictionary), and
of one feature's sources, against one plain forward of the same text, in the same process.

    python benchmarks/features.py [--threads 2] [--tokens 30] [--layer 23] [--head 0]
        [--sae smollm2/L23.resid_pre] [--hook-z smollm2/L23.hook_z]

Prints, on prose cut to --tokens tokens (30 by default):
- one plain forward (model.logits), the reference;
- feature_score_attribution for the last query over every key (target <= 2 s);
- feature_sources of the strongest hook_z feature at the last query.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from engine import median_seconds, text_of  # noqa: E402  (median: a warm-up, then the median)

from mha_viz import load_model, load_sae  # noqa: E402
from mha_viz.analysis import feature_firing, feature_score_attribution, feature_sources  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--sae", default="smollm2/L23.resid_pre")
    parser.add_argument("--hook-z", default="smollm2/L23.hook_z")
    for name, default in (("--layer", 23), ("--head", 0), ("--threads", 2), ("--tokens", 30),
                          ("--repeats", 5)):
        parser.add_argument(name, type=int, default=default)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    resid, hook_z = load_sae(args.sae, model=model), load_sae(args.hook_z, model=model)
    n = len(model.encode(text := text_of(model, args.tokens)).input_ids)
    print(f"{model}, {args.threads} torch threads, {n} tokens, head L{args.layer}.H{args.head},"
          f" {resid.d_sae:,}-feature residual and {hook_z.d_sae:,}-feature hook_z dictionaries")
    forward = median_seconds(lambda: model.logits(text), args.repeats)
    row = median_seconds(lambda: feature_score_attribution(
        model, text, args.layer, args.head, n - 1, sae=resid), args.repeats)
    feature = feature_firing(model, hook_z, text).at(n - 1, 1)[0][0]
    sources = median_seconds(lambda: feature_sources(model, hook_z, text, n - 1, feature),
                             args.repeats)
    print(f"one plain forward                               {forward * 1000:8.0f} ms")
    print(f"feature score attribution, one query, every key {row * 1000:8.0f} ms  "
          f"({row / forward:.1f} forwards; target <= 2 s)")
    print(f"one feature's sources at one query              {sources * 1000:8.0f} ms  "
          f"({sources / forward:.1f} forwards)")


if __name__ == "__main__":
    main()
