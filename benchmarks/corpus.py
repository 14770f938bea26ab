"""Corpus runner throughput and memory (issue 11).

Throughput: tokens per second of corpus.run (statistics streamed per segment) against a plain
batched forward of the same padded batches that keeps nothing, measured in the same process
one after the other, alternated (the median of --repeats); target ratio >= 0.9. The corpus is
the demo corpus's paragraphs joined into documents, cut into segments of --seg-len tokens (a
document's shorter last piece is left out). Memory: peak resident memory of a run over 100 and
over 1,000 segments, each in a fresh process; target: flat.

    python benchmarks/corpus.py [--models minilm smollm2] [--seg-len 128] [--segments 64]
        [--repeats 3] [--memory 100 1000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def plain_forward(model, segments, batch_size: int) -> None:
    """The same batches as corpus.run (sorted by length, padded, masked), nothing kept."""
    import torch

    ids = sorted(segments.ids, key=len)
    pad = model.tokenizer.pad_token_id or 0
    for start in range(0, len(ids), batch_size):
        batch = ids[start:start + batch_size]
        width = max(len(s) for s in batch)
        input_ids = torch.tensor([s + [pad] * (width - len(s)) for s in batch])
        mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in batch])
        with torch.inference_mode():
            model.network(input_ids, attention_mask=mask)


def documents(paragraphs: list[str], seg_len: int) -> list[str]:
    """The demo corpus's paragraphs (about 80 tokens each) joined in order into documents of
    at least 8 characters a token of seg_len, so that segments are seg_len tokens long, as a
    corpus of long documents gives them, not a paragraph's length."""
    out, current = [], []
    for paragraph in paragraphs:
        current.append(paragraph)
        if sum(len(p) + 1 for p in current) >= 8 * seg_len:
            out.append(" ".join(current))
            current = []
    return out + ([" ".join(current)] if current else [])


def throughput(name: str, seg_len: int, n_segments: int, stats: list[str],
               repeats: int = 3) -> dict:
    from mha_viz import corpus, load_model

    model = load_model(name)
    segments = corpus.segment(model, documents(corpus.demo_texts(), seg_len), seg_len,
                              min_len=seg_len, max_segments=n_segments)  # whole ones only
    batch = corpus.default_batch_size(model, seg_len)
    plain_forward(model, corpus.Segments(segments.ids[:batch], seg_len, 1, 0), batch)  # warm
    rows = {"plain forward": [], "corpus.run": []}
    for _ in range(repeats):  # alternated, so that a slower minute weighs on both alike
        for label, run in (("plain forward", lambda: plain_forward(model, segments, batch)),
                           ("corpus.run", lambda: corpus.run(model, segments, stats=stats,
                                                             batch_size=batch))):
            start = time.perf_counter()
            run()
            rows[label].append(segments.n_tokens / (time.perf_counter() - start))
    return {"model": name, "segments": len(segments.ids), "tokens": segments.n_tokens,
            "batch": batch, **{label: statistics.median(v) for label, v in rows.items()}}


def peak_memory(name: str, seg_len: int, n_segments: int) -> float:
    """Peak RSS (MB) of a fresh process that runs the corpus."""
    code = (
        "import resource, sys, json\n"
        "from mha_viz import corpus, load_model\n"
        f"model = load_model({name!r})\n"
        "texts = corpus.demo_texts()\n"
        f"segments = corpus.segment(model, texts * 4, {seg_len}, max_segments={n_segments})\n"
        "corpus.run(model, segments)\n"
        "print(json.dumps([len(segments.ids), "
        "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    count, peak = json.loads(done.stdout.strip().splitlines()[-1])
    assert count == n_segments, (count, n_segments)
    return peak


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["minilm", "smollm2"])
    parser.add_argument("--seg-len", type=int, default=128)
    parser.add_argument("--segments", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each, alternated; the median tokens/s is printed")
    parser.add_argument("--stats", nargs="+", default=["entropy,mass,roles,similarity",
                                                        "entropy,mass,roles"],
                        help="sets of statistics, each measured against its own plain forward")
    parser.add_argument("--memory", nargs=2, type=int, default=[100, 1000],
                        metavar=("SMALL", "LARGE"), help="segment counts for the memory test")
    args = parser.parse_args(argv)
    for chosen in args.stats:
        stats = [s for s in chosen.split(",") if s]
        print(f"throughput at seg-len {args.seg_len}, statistics {', '.join(stats)}")
        for name in args.models:
            row = throughput(name, args.seg_len, args.segments, stats, args.repeats)
            ratio = row["corpus.run"] / row["plain forward"]
            print(f"{name}: {row['segments']} segments, {row['tokens']:,} tokens "
                  f"({row['tokens'] / row['segments']:.0f} a segment), batch "
                  f"{row['batch']}: plain forward {row['plain forward']:,.0f} tok/s, "
                  f"corpus.run {row['corpus.run']:,.0f} tok/s, ratio {ratio:.2f} "
                  f"(target >= 0.9, issue 59)", flush=True)
    small, large = args.memory
    name = args.models[0]
    low, high = (peak_memory(name, args.seg_len, n) for n in (small, large))
    print(f"{name} peak RSS: {small} segments {low:,.0f} MB, {large} segments {high:,.0f} MB "
          f"(ratio {high / low:.2f}; target: flat)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
