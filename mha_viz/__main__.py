"""Command line:

    python -m mha_viz trace --model minilm --text "..." [--maps on_demand] [--out trace.npz]
    python -m mha_viz corpus --model NAME (--input FILE [--column C] | --demo) --seg-len 128
        [--workers N] [--stats entropy,mass,roles,similarity] [--max-segments N] --out r.npz
    python -m mha_viz patch --model smollm2 (--pairs pairs.jsonl | --ioi N [--seed S])
        [--component head] [--direction denoise] [--method exact|attribution|path]
        [--metric logit_diff] --out patch.npz
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from .errors import InputError, MhaVizError


def layer_summary(trace) -> list[str]:
    """One line per layer: mean entropy over heads, the sharpest head, where mass goes."""
    from .analysis.entropy import entropy
    from .analysis.token_classes import token_class_mass

    ent = entropy(trace)  # a long input's trace is read a block of rows at a time
    lines = [f"{trace.model_name}: {trace.n_layers} layers x {trace.n_heads} heads, "
             f"{trace.n_tokens} tokens" + (f" (truncated from {trace.n_tokens_before_truncation})"
                                           if trace.truncated else "")]
    first_mass = token_class_mass(trace)["first token"]  # [L, H]
    for layer in range(trace.n_layers):
        sharpest = int(ent[layer].argmin())
        lines.append(
            f"L{layer:<2d} mean entropy {ent[layer].mean():5.2f} nats "
            f"(uniform {np.log(trace.n_tokens):.2f}); most focused head L{layer}.H{sharpest} "
            f"({ent[layer, sharpest]:.2f}); mass on first token {first_mass[layer].mean():.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_viz",
                                     description="Trace every attention head of a GPT-2/BERT model")
    commands = parser.add_subparsers(dest="command", required=True)
    trace_cmd = commands.add_parser("trace", help="run a text, print a per-layer summary")
    trace_cmd.add_argument("--model", default="minilm",
                           help="bundled name (minilm), hub id (gpt2) or checkpoint folder")
    trace_cmd.add_argument("--text", required=True)
    trace_cmd.add_argument("--text-pair", default=None, help="sentence B (BERT only)")
    trace_cmd.add_argument("--max-tokens", type=int, default=None)
    trace_cmd.add_argument("--maps", default="auto", choices=["auto", "full", "on_demand"],
                           help="hold every map, or keep what rebuilds them (long inputs); "
                                "auto: whole up to 1 GiB of maps")
    trace_cmd.add_argument("--out", default=None, help="save the trace as .npz")
    corpus_cmd = commands.add_parser("corpus", help="head statistics over a corpus (mean and "
                                                    "spread over segments) into an .npz")
    corpus_cmd.add_argument("--model", default="minilm")
    source = corpus_cmd.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help=".txt (a text per line or paragraph), .csv or .jsonl")
    source.add_argument("--demo", action="store_true",
                        help="the built-in corpus: paragraphs of Python's documentation")
    corpus_cmd.add_argument("--column", default=None,
                            help="the CSV column or JSON-lines field holding the texts")
    corpus_cmd.add_argument("--seg-len", type=int, default=128)
    corpus_cmd.add_argument("--max-segments", type=int, default=None)
    corpus_cmd.add_argument("--workers", type=int, default=1)
    corpus_cmd.add_argument("--batch-size", type=int, default=None)
    corpus_cmd.add_argument("--stats", default=",".join(("entropy", "mass", "roles",
                                                         "similarity")))
    corpus_cmd.add_argument("--out", required=True, help="the results, .npz")
    patch_cmd = commands.add_parser("patch", help="activation, attribution or path patching "
                                                  "over prompt pairs into an .npz")
    patch_cmd.add_argument("--model", default="smollm2")
    pairs_from = patch_cmd.add_mutually_exclusive_group(required=True)
    pairs_from.add_argument("--pairs", help=".csv or .jsonl with clean, corrupted, target, "
                                            "contrast (and optionally position)")
    pairs_from.add_argument("--ioi", type=int, metavar="N",
                            help="N generated indirect-object pairs")
    patch_cmd.add_argument("--seed", type=int, default=0)
    patch_cmd.add_argument("--component", default="head")
    patch_cmd.add_argument("--direction", default="denoise", choices=["denoise", "noise"])
    patch_cmd.add_argument("--method", default="exact", choices=["exact", "attribution", "path"])
    patch_cmd.add_argument("--metric", default="logit_diff",
                           choices=["logit_diff", "logit", "logprob"])
    patch_cmd.add_argument("--out", required=True, help="the results, .npz")
    args = parser.parse_args(argv)
    if args.command == "corpus":
        return corpus_command(args)
    if args.command == "patch":
        return patch_command(args)

    from .model import load_model

    try:
        model = load_model(args.model)
        trace = model.trace(args.text, text_pair=args.text_pair, max_tokens=args.max_tokens,
                            maps=args.maps)
    except MhaVizError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(layer_summary(trace)))
    print("tokens:", " ".join(trace.display_tokens[:40]) + (" ..." if trace.n_tokens > 40 else ""))
    if args.out:
        trace.save(args.out)
        print(f"saved {args.out}")
    return 0


def corpus_command(args) -> int:
    import time
    from pathlib import Path

    from . import corpus
    from .model import load_model

    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        elapsed = time.monotonic() - started
        left = elapsed / done * (total - done) if done else 0
        bar = "#" * int(30 * done / max(total, 1))
        print(f"\r[{bar:30s}] {done}/{total} segments, {tokens * done / total / elapsed:,.0f} "
              f"tokens/s, {left:.0f} s left ", end="", file=sys.stderr, flush=True)

    try:
        if args.demo:
            texts, source, skipped = corpus.demo_texts(), "the demo corpus", 0
        else:
            path = Path(args.input)
            try:
                data = path.read_bytes()
            except OSError as error:
                raise InputError(f"cannot read '{path}': {error.strerror}") from None
            read = corpus.read_corpus(data, path.name, args.column)
            texts, source, skipped = read.texts, read.source, read.skipped
        model = load_model(args.model)
        segments = corpus.segment(model, texts, args.seg_len, max_segments=args.max_segments)
        tokens = segments.n_tokens
        print(f"{source}: {len(texts):,} texts ({skipped} line(s) skipped) -> "
              f"{len(segments.ids):,} segments of up to {segments.seg_len} tokens "
              f"({tokens:,} tokens; {segments.n_dropped} short piece(s) dropped)")
        result = corpus.run(model, segments, stats=[s for s in args.stats.split(",") if s],
                            batch_size=args.batch_size, workers=args.workers,
                            progress=progress)
    except MhaVizError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(file=sys.stderr)
    result.save(args.out)
    entropy = result.mean("entropy") if "entropy" in result.names else None
    if entropy is not None:
        print(f"mean head entropy {np.nanmean(entropy):.3f} nats over "
              f"{result.n_segments:,} segments")
    print(f"saved {args.out} ({', '.join(sorted(result.arrays()))[:200]}...)")
    return 0


def patch_command(args) -> int:
    from pathlib import Path

    from .analysis import patching
    from .model import load_model
    from .prompts import ioi_pairs, read_pairs

    def progress(done: int, total: int) -> None:
        bar = "#" * int(30 * done / max(total, 1))
        print(f"\r[{bar:30s}] {done}/{total} ", end="", file=sys.stderr, flush=True)

    try:
        model = load_model(args.model)
        if args.pairs:
            path = Path(args.pairs)
            try:
                data = path.read_bytes()
            except OSError as error:
                raise InputError(f"cannot read '{path}': {error.strerror}") from None
            pairs = read_pairs(data, path.name)
        else:
            pairs = ioi_pairs(model, args.ioi, seed=args.seed)
        if args.method == "path":
            if args.component != "head":
                raise InputError("path patching patches heads: --component head")
            result = patching.path_patching(model, pairs, metric=args.metric,
                                            direction=args.direction, progress=progress)
        else:
            run = (patching.activation_patching if args.method == "exact"
                   else patching.attribution_patching)
            result = run(model, pairs, metric=args.metric, component=args.component,
                         direction=args.direction, progress=progress)
    except MhaVizError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(file=sys.stderr)
    print(f"{len(pairs)} pair(s), {result.metric}: clean {result.clean:.3f}, corrupted "
          f"{result.corrupted:.3f} (means over pairs); {patching.DIRECTIONS[result.direction]}")
    for note in result.notes:
        print(f"note: {note}")
    flat = np.nan_to_num(np.abs(result.normalized)).ravel()
    rows, cols = result.normalized.shape[0], result.normalized.shape[-1]
    print("strongest (normalised, 0 = corrupted, 1 = clean; ± std over pairs):")
    for index in np.argsort(flat)[::-1][:10]:
        where = np.unravel_index(index, result.normalized.shape)
        label = (f"{result.row_labels[where[0]]} {result.col_labels[where[-1]]}"
                 if result.normalized.ndim == 2 and where[0] < rows and where[-1] < cols
                 else str(tuple(int(i) for i in where)))
        print(f"  {label:24s} {result.normalized[where]: .3f} ± {result.std[where]:.3f}")
    np.savez(args.out, **result.to_npz_dict())
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
