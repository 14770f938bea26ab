"""The pruning analyses against their naive equivalents, in the same run.

- ablation_effects (reuse of the hidden states below each layer, a layer's heads batched)
  against the naive L*H + 1 model.score() calls; target ratio <= 0.5.
- gradient_importance against one model.score() call; target <= 4x. For MiniLM, whose score
  is the embedding shift, gradient_importance is the forward-mode Taylor estimate (about one
  forward per head), so it is also reported for score kinds with a true one-backward gradient
  (a random GPT-2-shaped and a BERT-with-MLM-head checkpoint).

    python benchmarks/analysis.py [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mha_viz import load_model  # noqa: E402
from mha_viz.analysis.pruning import ablation_effects, gradient_importance  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from engine import text_of  # noqa: E402


def best_of(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def naive_sweep(model, text):
    n_layer, n_head = model.info.n_layer, model.info.n_head
    base = model.score(text)
    effects = np.zeros((n_layer, n_head))
    for layer in range(n_layer):
        for head in range(n_head):
            mask = np.ones((n_layer, n_head), dtype=np.float32)
            mask[layer, head] = 0
            effects[layer, head] = model.score(text, mask) - base
    return effects


def report(label, model, n_tokens, repeats, sweep=True):
    text = text_of(model, n_tokens)
    n = len(model.encode(text).input_ids)
    score_s, _ = best_of(lambda: model.score(text), repeats * 3)
    grad_s, _ = best_of(lambda: gradient_importance(model, text), repeats)
    print(f"{label:<36} T={n:<4} score() {score_s * 1e3:7.1f} ms   gradient_importance "
          f"{grad_s * 1e3:7.1f} ms = {grad_s / score_s:4.1f}x score()  [{model.info.score_kind}]")
    if sweep:
        fast = ablation_effects(model, text)
        slow = naive_sweep(model, text)
        fast_s, _ = best_of(lambda: ablation_effects(model, text), repeats)
        slow_s, _ = best_of(lambda: naive_sweep(model, text), max(1, repeats - 1))
        print(f"{'':<36} full ablation sweep {fast_s:6.2f} s vs naive "
              f"{model.info.n_layer * model.info.n_head + 1} score() calls {slow_s:6.2f} s: "
              f"ratio {fast_s / slow_s:4.2f}   max|diff| {np.abs(fast - slow).max():.1e}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's choice); 1 is steadier on a "
                             "shared machine")
    args = parser.parse_args()
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    from mha_viz.testing import make_bert_checkpoint, make_gpt2_checkpoint

    report("MiniLM (6x12, d=384)", load_model("minilm"), 64, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        gpt2 = load_model(make_gpt2_checkpoint(Path(tmp) / "g", n_layer=12, n_head=12,
                                               d_model=768, n_positions=1024, init_std=0.02))
        report("GPT-2-small shape, random (12x12)", gpt2, 64, args.repeats)
        bert = load_model(make_bert_checkpoint(Path(tmp) / "b", n_layer=6, n_head=12,
                                               d_model=384, n_positions=512, mlm_head=True))
        report("BERT+MLM head, MiniLM shape, random", bert, 64, args.repeats)


if __name__ == "__main__":
    main()
