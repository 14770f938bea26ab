"""Patching speed against the way patching libraries run it (one whole forward per patched
head, as TransformerLens's patching.py does), measured in the same process.

    python benchmarks/patching.py [--threads 2] [--model smollm2]

Prints, for the indirect-object prompt (14 tokens on SmolLM2) and for a 128-token pair:
- every head patched (activation_patching, component="head") against L*H + 2 forwards, each
  a whole forward of the corrupted prompt with one head's z replaced through the same
  engine hooks (timed in full for the short pair; for the long pair on a sample of heads,
  scaled to L*H + 2, and said so);
- attribution patching of every head against one plain forward (target: <= 3 forwards);
- 16 IOI pairs in one call against each of them patched alone, summed (the pairs differ in
  length, so 16 x one pair would compare with the cheapest);
- the process's peak resident memory.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from engine import median_seconds, text_of  # noqa: E402  (median: a warm-up, then the median)

from mha_viz import TargetMetric, load_model  # noqa: E402
from mha_viz.analysis.patching import (activation_patching, attribution_patching,  # noqa: E402
                                       metric_of, prepare_pairs)
from mha_viz.analysis.prompts import ioi_pairs  # noqa: E402
from mha_viz.engine.interventions import Interventions, run_with_hooks  # noqa: E402

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
LONG_TOKENS = 128  # the long pair: prose, then the indirect-object sentence


def naive_per_head(model, clean, corrupted, metric, heads=None):
    """One whole forward of the corrupted prompt per head (z replaced by its clean value),
    plus the clean and corrupted forwards: -> seconds (for `heads` heads only, if given)."""
    prepared = prepare_pairs(model, clean, corrupted, metric)
    batch = next(prepared.batches(1))
    info = model.info
    all_heads = [(l, h) for l in range(info.n_layer) for h in range(info.n_head)]
    chosen = all_heads if heads is None else all_heads[:: max(1, len(all_heads) // heads)][:heads]
    start = time.perf_counter()
    with torch.inference_mode():
        source = Interventions(capture=["z"])
        metric_of(model, run_with_hooks(model.network, batch.clean, source), batch, "logit_diff")
        metric_of(model, run_with_hooks(model.network, batch.corrupted), batch, "logit_diff")
        for layer, head in chosen:
            mask = torch.zeros(1, info.n_head, 1, 1, dtype=torch.bool)
            mask[0, head] = True
            patch = Interventions().replace("z", layer, source.captured[("z", layer)], mask)
            metric_of(model, run_with_hooks(model.network, batch.corrupted, patch), batch,
                      "logit_diff")
    return time.perf_counter() - start, len(chosen), len(all_heads)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    print(f"{model}, {args.threads} torch threads")
    metric = TargetMetric(-1, " Mary", " John")
    prose = text_of(model, LONG_TOKENS - len(model.encode(CLEAN).input_ids)) + " "
    long_clean, long_corrupted = prose + CLEAN, prose + CORRUPTED
    for label, clean, corrupted in (("IOI", CLEAN, CORRUPTED),
                                    ("prose + IOI", long_clean, long_corrupted)):
        n = len(model.encode(clean).input_ids)
        ours = median_seconds(lambda: activation_patching(model, clean, corrupted, metric),
                              repeats=3 if n < 50 else 1)
        sample = None if n < 50 else 30
        seconds, done, total = naive_per_head(model, clean, corrupted, metric, sample)
        naive = seconds * (total + 2) / (done + 2)
        how = "timed" if sample is None else f"{done} heads timed, scaled to {total + 2}"
        print(f"\n{label} ({n} tokens): every head patched")
        print(f"  ours: {ours:.2f} s   one forward per head: {naive:.2f} s ({how})   "
              f"ratio {ours / naive:.3f} (target <= 0.15)")
        forward = median_seconds(lambda: model.logits(clean), repeats=5)
        attribution = median_seconds(
            lambda: attribution_patching(model, clean, corrupted, metric), repeats=3)
        print(f"  attribution patching: {attribution:.3f} s = {attribution / forward:.2f} "
              f"forwards (one forward {forward * 1000:.0f} ms; target <= 3)")
    pairs = ioi_pairs(model, 16, seed=0)
    lengths = sorted({len(model.encode(p.clean).input_ids) for p in pairs})
    # medians of 3: the two sides differ by a few per cent, less than one run's noise
    alone = sum(median_seconds(lambda p=p: activation_patching(model, [p], metric="logit_diff"),
                               repeats=3) for p in pairs)
    sixteen = median_seconds(lambda: activation_patching(model, pairs, metric="logit_diff"),
                             repeats=3)
    print(f"\n16 IOI pairs ({len(lengths)} token lengths, {lengths[0]}-{lengths[-1]}): "
          f"{sixteen:.2f} s together against {alone:.2f} s for each pair alone, summed "
          f"(ratio {sixteen / alone:.2f}; target < 1)")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory of the process: {peak:,.0f} MB")


if __name__ == "__main__":
    main()
