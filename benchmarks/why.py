"""Why a head attends: the speed of score attribution and of a head's composition map,
against one plain forward of the same text, measured in the same process.

    python benchmarks/why.py [--threads 2] [--model smollm2] [--tokens 30]

Prints, on prose cut to --tokens tokens (30: the issue's figure) for the last layer's head
0 (on SmolLM2: 270 upstream heads and 30 MLPs on each side):
- one query's full decomposition over every key (score_attribution; target <= 1 s);
- that head's composition map on the text (composition_scores with a text; target <= 3 s);
- one plain forward (model.logits), the reference;
- that head's weight-based composition with every earlier head, and every pair's (once).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from engine import median_seconds, text_of  # noqa: E402  (median: a warm-up, then the median)

from mha_viz import load_model  # noqa: E402
from mha_viz.analysis import composition_scores, score_attribution  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    info = model.info
    text = text_of(model, args.tokens)
    n = len(model.encode(text).input_ids)
    layer = info.n_layer - 1
    print(f"{model}, {args.threads} torch threads, {n} tokens, head L{layer}.H0 "
          f"({layer * info.n_head} upstream heads and {layer} MLPs on each side)")
    forward = median_seconds(lambda: model.logits(text), args.repeats)
    attribution = median_seconds(lambda: score_attribution(model, text, layer, 0, n - 1),
                                 args.repeats)
    composition = median_seconds(lambda: composition_scores(model, text, layer, 0),
                                 args.repeats)
    one_head = median_seconds(lambda: composition_scores(model, layer=layer, head=0), 1)
    start = time.perf_counter()
    composition_scores(model)
    every_pair = time.perf_counter() - start
    print(f"one plain forward                         {forward * 1000:8.0f} ms")
    print(f"score attribution, one query, every key   {attribution * 1000:8.0f} ms  "
          f"({attribution / forward:.1f} forwards; target <= 1 s)")
    print(f"composition map of one head on the text   {composition * 1000:8.0f} ms  "
          f"({composition / forward:.1f} forwards; target <= 3 s)")
    print(f"weight composition, one head's row        {one_head * 1000:8.0f} ms")
    print(f"weight composition, every pair (once)     {every_pair * 1000:8.0f} ms")


if __name__ == "__main__":
    main()
