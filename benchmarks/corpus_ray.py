"""The corpus on Ray against one process (issue 23): tokens per second of run_stream on the
local engine, and on a local Ray instance with 1 and 2 workers, on the same texts in the same
run; and what Ray costs before the first shard (starting the instance, the actors loading the
model).

    python benchmarks/corpus_ray.py [--model minilm] [--seg-len 128] [--segments 256]

On this project's 2-core machine two workers share the two cores that one process already
uses (torch's own threads), so the figure to read is the ratio, not a speed-up: it says what
sharding, shipping results between processes and merging cost. On a cluster each worker has
its own cores, and throughput grows with the workers as long as shards keep them busy.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--seg-len", type=int, default=128)
    parser.add_argument("--segments", type=int, default=256)
    parser.add_argument("--stats", default="entropy,mass,roles")
    args = parser.parse_args()

    import ray
    import torch

    from mha_viz import corpus, load_model
    from mha_viz.corpus.ray_engine import connect

    model = load_model(args.model)
    stats = args.stats.split(",")
    texts = corpus.demo_texts()
    segments = corpus.segment(model, texts, args.seg_len, max_segments=args.segments)
    print(f"{args.model}: {len(segments.ids)} segments, {segments.n_tokens:,} tokens; "
          f"statistics {', '.join(stats)}; {os.cpu_count()} cores, torch threads "
          f"{torch.get_num_threads()}")

    def timed(**options) -> tuple[float, object]:
        started = time.perf_counter()
        result = corpus.run_stream(model, texts, args.seg_len, stats,
                                   max_segments=args.segments, **options)
        return time.perf_counter() - started, result

    corpus.run_shard(model, segments.ids[:8], stats)  # warm: first-call costs out of the way
    seconds, single = timed()
    rows = [("one process (local engine)", seconds, None)]

    started = time.perf_counter()
    connect(ray, None, 2)
    start_up = time.perf_counter() - started
    for workers in (1, 2):
        first = {}

        def note_first(progress, first=first, started=time.perf_counter()):
            if "seconds" not in first:
                first.update(seconds=time.perf_counter() - started, tokens=progress.tokens)

        seconds, result = timed(engine="ray", workers=workers, progress=note_first)
        assert result.n_segments == single.n_segments
        worst = max(float(abs(result.mean(n) - single.mean(n)).max()) for n in result.names)
        steady = (segments.n_tokens - first["tokens"]) / max(seconds - first["seconds"], 1e-9)
        rows.append((f"Ray, {workers} worker{'s' if workers > 1 else ''}", seconds,
                     (first["seconds"], worst, steady)))
    ray.shutdown()

    print(f"\nRay instance start (2 CPUs): {start_up:.2f} s")
    print(f"{'engine':28s} {'seconds':>8s} {'tokens/s':>9s} {'vs one':>7s} "
          f"{'first shard':>12s} {'after it, tokens/s':>19s} {'max |diff|':>11s}")
    base = rows[0][1]
    for label, seconds, extra in rows:
        line = (f"{label:28s} {seconds:8.2f} {segments.n_tokens / seconds:9,.0f} "
                f"{base / seconds:7.2f}")
        if extra:
            first, worst, steady = extra
            one_rate = segments.n_tokens / base
            line += f" {first:11.2f}s {steady:10,.0f} ({steady / one_rate:.2f}x) {worst:11.1e}"
        print(line)


if __name__ == "__main__":
    main()
