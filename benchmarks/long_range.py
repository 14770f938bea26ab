"""Heads at long range on SmolLM2 (issue 56), the figures docs/analyses.md reports:

- memory: one needle case of 4,096 tokens, every head's retrieval score from one forward
  (each layer's input kept, the answer rows rebuilt), in a fresh process: seconds and peak
  memory (the high-water mark after it, less the resident memory before it) against the
  server's share for one input (core.budget);
- retrieval: needle cases by length x depth, the copy accuracy grid and the share of heads
  whose retrieval score passes 0.1;
- masking: the copy accuracy with the top-k retrieval heads off against k random other
  heads (several seeded draws);
- windows: StreamingLLM's table on a long text (full, sink + window, window only);
- costs: every head restricted alone (the Long range page's defaults: 512 tokens, window
  64), the costliest heads against the retrieval heads, and the cache saved and the loss
  when the costliest tenth keeps the whole context;
- sinks: the share of sink heads (epsilon 0.3) on a text and on one repeated token.

    python benchmarks/long_range.py [--what memory retrieval masking windows costs sinks]
        [--model smollm2] [--tokens 4096] [--lengths 256 512 1024 2048] [--threads 2]

Times are wall-clock seconds on whatever the machine is doing: compare them within a run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

MEMORY = r"""
import gc, os, resource, sys, time
import torch
torch.set_num_threads(int(sys.argv[3]))
from mha_viz import load_model
from mha_viz.analysis import needle_cases, retrieval_counts
from mha_viz.core import budget
model = load_model(sys.argv[1])
n = int(sys.argv[2])
case = needle_cases(model, lengths=[n], depths=[0.5], seed=0)[0]
retrieval_counts(model, needle_cases(model, lengths=[128], depths=[0.5]), correct_only=False)
gc.collect()
with open("/proc/self/statm") as statm:
    before = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
started = time.perf_counter()
counts = retrieval_counts(model, [case], correct_only=False)
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
share = budget.ONE_INPUT_SHARE * budget.budget_bytes()
print(f"{case.n_tokens} tokens: {seconds:.1f} s, peak {max(0, peak - before) / 2**20:.0f} MiB "
      f"over the {before / 2**20:.0f} MiB held before (one input's share of the budget: "
      f"{share / 2**20:.0f} MiB); {counts.counted} answer tokens counted, "
      f"{int((counts.scores > 0.1).sum())} heads over 0.1")
"""

TEXT_CHARS = 60_000


def long_text(model, n_tokens: int) -> str:
    from mha_viz.analysis.long_range.needles import haystack_text

    ids = model.encode(haystack_text()[:TEXT_CHARS * max(1, n_tokens // 8192 + 1)]).input_ids
    return model.tokenizer.decode(ids[:n_tokens])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--what", nargs="+", default=["memory", "retrieval", "masking",
                                                      "windows", "sinks"])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tokens", type=int, default=4096, help="the memory case's length")
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--depths", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 1.0])
    parser.add_argument("--mask-length", type=int, default=1024)
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--window-tokens", type=int, default=2048)
    parser.add_argument("--sink", type=int, default=4)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--costs-tokens", type=int, default=512)
    parser.add_argument("--costs-window", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if "memory" in args.what:
        print("== memory: one needle case, every head's retrieval score", flush=True)
        subprocess.run([sys.executable, "-c", MEMORY, args.model, str(args.tokens),
                        str(args.threads)], check=True)
    rest = [w for w in args.what if w != "memory"]
    if not rest:
        return
    import numpy as np
    import torch

    from mha_viz import load_model
    from mha_viz.analysis import (haystack_ids, kv_cache_saved, needle_cases, needle_study,
                                  rank_heads, retrieval_masking, sink_scores, streaming_heads,
                                  window_costs, window_losses)

    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    scores = None
    if "retrieval" in rest or "masking" in rest:
        print(f"== retrieval: needle cases, lengths {args.lengths} x depths {args.depths}",
              flush=True)
        started = time.perf_counter()
        cases = needle_cases(model, lengths=args.lengths, depths=args.depths, seed=0)
        study = needle_study(model, cases)
        counts = study.retrieval
        scores = counts.scores
        print(f"{len(cases)} cases in {time.perf_counter() - started:.0f} s; copy accuracy "
              f"(rows: lengths, columns: depths):\n{np.round(study.grid.accuracy, 2)}")
        print(f"{counts.right} of {counts.tokens} answer tokens predicted right, "
              f"{counts.counted} counted; heads over 0.1: {int((scores > 0.1).sum())} of "
              f"{scores.size} ({(scores > 0.1).mean():.1%}); top 5: "
              f"{np.round(np.sort(scores.ravel())[::-1][:5], 2)}", flush=True)
    if "masking" in rest:
        print(f"== masking at {args.mask_length} tokens", flush=True)
        started = time.perf_counter()
        cases = needle_cases(model, lengths=[args.mask_length], depths=args.depths, seed=1)
        result = retrieval_masking(model, cases, scores, draws=args.draws, seed=0)
        print(f"k = {result.k}: copy accuracy {result.full:.3f} with every head, "
              f"{result.top:.3f} with the top {result.k} retrieval heads off, "
              f"{np.round(result.random, 3)} with {result.k} random heads off (mean "
              f"{result.random_mean:.3f}); {time.perf_counter() - started:.0f} s", flush=True)
    if "windows" in rest:
        print(f"== windows: {args.window_tokens} tokens, sink {args.sink}, window "
              f"{args.window}", flush=True)
        started = time.perf_counter()
        table = window_losses(model, long_text(model, args.window_tokens), args.sink,
                              args.window)
        print(f"loss (nats/token): full {table.full:.3f}, sink + window "
              f"{table.sink_window:.3f}, window only {table.window_only:.3f}; "
              f"{time.perf_counter() - started:.0f} s", flush=True)
    if "costs" in rest:
        print(f"== costs: each head restricted alone, {args.costs_tokens} tokens, sink "
              f"{args.sink}, window {args.costs_window}", flush=True)
        started = time.perf_counter()
        ids = haystack_ids(model, args.costs_tokens)
        found = window_costs(model, ids, args.sink, args.costs_window)
        costs = found.costs
        top = rank_heads(costs)[:10]
        print(f"full loss {found.full:.3f}; {time.perf_counter() - started:.0f} s; costliest: "
              + ", ".join(f"L{l}.H{h} {costs[l, h]:+.3f}" for l, h in top), flush=True)
        print(f"heads costing over 0.01 nats: {int((costs > 0.01).sum())}; median cost "
              f"{np.median(costs):+.4f}", flush=True)
        if scores is not None:
            over = scores > 0.1
            print(f"mean cost of the retrieval heads {costs[over].mean():+.4f}, of the others "
                  f"{costs[~over].mean():+.4f}", flush=True)
        keep = max(1, costs.size // 10)
        restricted = streaming_heads(costs, keep)
        saving = kv_cache_saved(model, model.info.max_positions, args.sink, args.costs_window,
                                heads=restricted)
        kept = window_losses(model, ids, args.sink, args.costs_window, heads=restricted)
        print(f"keeping the {keep} costliest whole: {saving.streaming_kv_heads} of "
              f"{saving.kv_heads} key/value heads stream, cache at "
              f"{model.info.max_positions} tokens {saving.full_bytes / 2**20:.0f} -> "
              f"{saving.restricted_bytes / 2**20:.0f} MiB; loss {kept.sink_window:.3f} against "
              f"full {kept.full:.3f}", flush=True)
    if "sinks" in rest:
        print("== sinks: 1,024 tokens of the documentation, and one token repeated", flush=True)
        found = sink_scores(model, long_text(model, 1024))
        for name in ("natural", "repeated"):
            stats = getattr(found, name)
            print(f"{name}: sink heads {int(stats.sink_heads.sum())} of "
                  f"{stats.sink_heads.size} ({stats.share:.1%}); mean attention to the first "
                  f"token {stats.first_attention.mean():.3f}; first key norm / other "
                  f"{np.mean(stats.first_key_norm / stats.other_key_norm):.2f}; cosine with "
                  f"the first key {stats.first_cosine.mean():.3f} vs the others "
                  f"{stats.other_cosine.mean():.3f}", flush=True)


if __name__ == "__main__":
    main()
