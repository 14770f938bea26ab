"""Command line:

    python -m mha_viz trace --model minilm --text "..." [--maps on_demand] [--weights value]
        [--out trace.npz]
    python -m mha_viz generate --model smollm2 --text "..." [--max-new-tokens 20]
        [--temperature 0.7 --seed 1] [--out trace.npz]   (prompt + continuation's trace)
    python -m mha_viz corpus --model NAME (--input FILE_OR_FOLDER [--column C] | --demo)
        [--limit N | --sample N --seed S] [--seg-len 128] [--engine local|ray] [--workers N]
        [--address auto|HOST:PORT] [--checkpoint DIR] [--stats entropy,mass,...]
        [--max-segments N] [--weights value] --out r.npz   (writes r.npz and r.parquet)
    python -m mha_viz patch --model smollm2 (--pairs pairs.jsonl | --ioi N [--seed S])
        [--component head] [--direction denoise] [--method exact|attribution|path]
        [--metric logit_diff] --out patch.npz
    python -m mha_viz dynamics SERIES [--text "..." | --input FILE] [--steps 1000,2000]
        --out dyn.npz         (every checkpoint's head statistics, [step, layer, head])
        [--composition comp.npz]   (the induction head's composition at every checkpoint)
    python -m mha_viz prepare [--model smollm2] [--text "..."]
        (the app's pages for this text, kept on disk: the server's next start opens them at once)
    python -m mha_viz train-sae --model M --site hook_z --layer 1 --input F --out DIR  (SAELens's format)
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from .core.errors import InputError, MhaVizError


def layer_summary(trace) -> list[str]:
    """One line per layer: mean entropy over heads, the sharpest head, where mass goes."""
    from .analysis.entropy import entropy
    from .analysis.token_classes import token_class_mass

    ent = entropy(trace)  # a long input's trace is read a block of rows at a time
    lines = [f"{trace.model_name}: {trace.n_layer} layers x {trace.n_head} heads, "
             f"{trace.n_tokens} tokens" + (f" (truncated from {trace.n_tokens_before_truncation})"
                                           if trace.truncated else "")
             + (" (value-weighted maps: what each head moves)" if trace.value_weighted
                else "")]
    first_mass = token_class_mass(trace)["first token"]  # [L, H]
    for layer in range(trace.n_layer):
        sharpest = int(ent[layer].argmin())
        lines.append(
            f"L{layer:<2d} mean entropy {ent[layer].mean():5.2f} nats "
            f"(uniform {np.log(trace.n_tokens):.2f}); most focused head L{layer}.H{sharpest} "
            f"({ent[layer, sharpest]:.2f}); mass on first token {first_mass[layer].mean():.2f}")
    return lines


def add_weights(command) -> None:
    """--weights, as Model.trace takes it."""
    command.add_argument("--weights", default="attention", choices=["attention", "value"],
                         help="the maps' rows: the attention weights, or what each head moves "
                              "from each key (value-weighted, normalized; Kobayashi et al. "
                              "2020)")


def add_placement(command) -> None:
    """--dtype and --device, as load_model takes them (README, "Big models")."""
    command.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                         help="the weights' dtype (maps and scores stay float32)")
    command.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps")


def main(argv: list[str] | None = None) -> int:
    from .analysis import head_statistics  # the statistics --stats offers
    parser = argparse.ArgumentParser(prog="python -m mha_viz",
                                     description="Trace every attention head of a GPT-2/BERT model")
    commands = parser.add_subparsers(dest="command", required=True)
    trace_cmd = commands.add_parser("trace", help="run a text, print a per-layer summary")
    add_placement(trace_cmd)
    trace_cmd.add_argument("--model", default="minilm",
                           help="bundled name (minilm), hub id (gpt2) or checkpoint folder")
    trace_cmd.add_argument("--text", required=True)
    trace_cmd.add_argument("--text-pair", default=None, help="sentence B (BERT only)")
    trace_cmd.add_argument("--max-tokens", type=int, default=None)
    trace_cmd.add_argument("--maps", default="auto", choices=["auto", "full", "on_demand"],
                           help="hold every map, or keep what rebuilds them (long inputs); "
                                "auto: whole up to 1 GiB of maps")
    add_weights(trace_cmd)
    trace_cmd.add_argument("--out", default=None, help="save the trace as .npz")
    generate_cmd = commands.add_parser("generate", help="a causal model continues a text "
                                                        "(greedy, or sampled with --temperature)")
    add_placement(generate_cmd)
    generate_cmd.add_argument("--model", default="smollm2")
    generate_cmd.add_argument("--text", required=True, help="the prompt")
    generate_cmd.add_argument("--max-new-tokens", type=int, default=20)
    generate_cmd.add_argument("--temperature", type=float, default=0.0,
                              help="0: the most likely token each time; above: sampled")
    generate_cmd.add_argument("--seed", type=int, default=None,
                              help="the sampling seed (default: a fresh one, printed)")
    add_weights(generate_cmd)
    generate_cmd.add_argument("--out", default=None,
                              help="save the trace of prompt and continuation as .npz")
    corpus_cmd = commands.add_parser("corpus", help="head statistics over a corpus (mean and "
                                                    "spread over segments) into an .npz and a "
                                                    "Parquet table")
    add_placement(corpus_cmd)
    corpus_cmd.add_argument("--model", default="minilm")
    source = corpus_cmd.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help="a .txt (a text per line or paragraph), .csv, .jsonl, "
                                        ".parquet or .arrow file, a folder of them, or a "
                                        "dataset saved with datasets' save_to_disk; streamed")
    source.add_argument("--demo", action="store_true",
                        help="the built-in corpus: paragraphs of Python's documentation")
    corpus_cmd.add_argument("--column", default=None,
                            help="the column or JSON-lines field holding the texts")
    corpus_cmd.add_argument("--split", default=None, help="a saved DatasetDict's split")
    corpus_cmd.add_argument("--limit", type=int, default=None, help="the first N texts only")
    corpus_cmd.add_argument("--sample", type=int, default=None,
                            help="N texts drawn uniformly from the whole input (with --seed)")
    corpus_cmd.add_argument("--seed", type=int, default=0)
    corpus_cmd.add_argument("--seg-len", type=int, default=128)
    corpus_cmd.add_argument("--max-segments", type=int, default=None)
    corpus_cmd.add_argument("--engine", choices=["local", "ray"], default=None,
                            help="local: this process; ray: Ray actors (the default when "
                                 "--workers > 1 or --address is given)")
    corpus_cmd.add_argument("--workers", type=int, default=1)
    corpus_cmd.add_argument("--address", default=None,
                            help="join a Ray cluster: auto, or HOST:PORT (default: a local "
                                 "Ray instance of --workers CPUs)")
    corpus_cmd.add_argument("--checkpoint", default=None,
                            help="a folder that keeps finished shards: an interrupted run "
                                 "started again with it resumes")
    corpus_cmd.add_argument("--batch-size", type=int, default=None)
    add_weights(corpus_cmd)
    corpus_cmd.add_argument("--stats", default=",".join(head_statistics.DEFAULT),
                            help="comma-separated, some of " + ", ".join(
                                f"{name} ({s.label})" for name, s in
                                head_statistics.REGISTRY.items()))
    corpus_cmd.add_argument("--out", required=True,
                            help="the results, .npz; the per-head table goes beside it as "
                                 ".parquet")
    patch_cmd = commands.add_parser("patch", help="activation, attribution or path patching "
                                                  "over prompt pairs into an .npz")
    add_placement(patch_cmd)
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
    prepare_cmd = commands.add_parser("prepare", help="compute what the app's pages compute "
                                                      "first for a text (the pruning sweep...) "
                                                      "and keep it on disk for the server")
    prepare_cmd.add_argument("--model", default=None, help="default: the app's default model")
    prepare_cmd.add_argument("--text", default=None, help="default: the app's example text")
    dynamics_cmd = commands.add_parser(
        "dynamics", help="every checkpoint of a training run: head roles on the induction "
                         "probe, entropy, sink mass, loss and the in-context learning score")
    dynamics_cmd.add_argument("series", help="a bundled series (induction-toy, "
                              "induction-toy-mlp), a folder of step folders (step1000/, "
                              "checkpoint-2000/) or a hub id with step revisions (online)")
    dynamics_texts = dynamics_cmd.add_mutually_exclusive_group()
    dynamics_texts.add_argument("--text", action="append", default=None,
                                help="a text to measure on (repeatable); default: the run's "
                                     "held-out texts (held_out_texts.json), else 8 paragraphs "
                                     "of the demo corpus (Python's documentation)")
    dynamics_texts.add_argument("--input", default=None,
                                help="a file of texts (.txt, .csv, .jsonl, ...)")
    dynamics_cmd.add_argument("--limit", type=int, default=8, help="texts read from --input")
    dynamics_cmd.add_argument("--steps", default=None,
                              help="comma-separated steps of a hub series (default: all)")
    dynamics_cmd.add_argument("--seq-len", type=int, default=None,
                              help="the probe's repeated random tokens (default 50, or what "
                                   "the model's context holds)")
    dynamics_cmd.add_argument("--n-seqs", type=int, default=8)
    dynamics_cmd.add_argument("--seed", type=int, default=0)
    dynamics_cmd.add_argument("--out", required=True, help="the results, .npz")
    dynamics_cmd.add_argument("--composition", default=None,
                              help="also write the strongest induction head's composition "
                                   "with every earlier head at each checkpoint, on the probe's "
                                   "first sequence (.npz; what the Training page draws)")
    from .corpus import dictionary_training  # its arguments and its run
    dictionary_training.add_command(commands)
    if (args := parser.parse_args(argv)).command == "train-sae":
        return dictionary_training.run_command(args)
    if args.command == "dynamics":
        return dynamics_command(args)
    if args.command == "prepare":
        return prepare_command(args)
    if args.command == "corpus":
        return corpus_command(args)
    if args.command == "patch":
        return patch_command(args)
    if args.command == "generate":
        return generate_command(args)

    from .models.model import load_model

    try:
        model = load_model(args.model, dtype=args.dtype, device=args.device)
        trace = model.trace(args.text, text_pair=args.text_pair, max_tokens=args.max_tokens,
                            maps=args.maps, weights=args.weights)
    except MhaVizError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(layer_summary(trace)))
    print("tokens:", " ".join(trace.display_tokens[:40]) + (" ..." if trace.n_tokens > 40 else ""))
    if args.out:
        trace.save(args.out)
        print(f"saved {args.out}")
    return 0


def generate_command(args) -> int:
    """The prompt, then each token as it is written; why writing stopped; the trace."""
    from .models.model import load_model

    written: list[int] = []
    shown = {"text": ""}

    def progress(done: int, total: int, token: int) -> None:
        if not written:
            print(args.text, end="", flush=True)
        written.append(token)  # decoded with the prompt, so a leading space shows
        text = model.tokenizer.decode(prompt + written)[len(before):]
        print(text[len(shown["text"]):], end="", flush=True)
        shown["text"] = text

    try:
        model = load_model(args.model, dtype=args.dtype, device=args.device)
        prompt = model.encode(args.text).input_ids
        before = model.tokenizer.decode(prompt)
        result = model.generate(args.text, args.max_new_tokens, args.temperature, args.seed,
                                progress=progress, trace=bool(args.out), weights=args.weights)
    except MhaVizError as error:
        print(("\n" if written else "") + f"error: {error}", file=sys.stderr)
        return 2
    print()
    seed = f", seed {result.seed}" if result.seed is not None else ""
    print(f"{len(result.new_ids)} token(s) in {result.seconds:.2f} s "
          f"({result.tokens_per_second:.1f} tokens/s{seed}); stopped: "
          f"{STOPPED[result.stop_reason]}", file=sys.stderr)
    if args.out:
        result.trace.save(args.out)
        print(f"saved {args.out} ({result.trace.n_tokens} tokens: the prompt's "
              f"{result.prompt_length} and the continuation)")
    return 0


STOPPED = {"length": "the tokens asked for were written",
           "end_of_text": "the model wrote its end-of-text token",
           "context": "the text reached the model's context",
           "cancelled": "cancelled"}


def prepare_command(args) -> int:
    """The server's warm start, run ahead (e.g. when a Docker image is built, or the evening
    before a lesson): the results land in the folder the server reads when it starts."""
    import logging

    from .ui import settings, warm

    # the app's stores work outside a running server, which Streamlit's loggers (each with
    # its own level) report on every call
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("streamlit"):
            logging.getLogger(name).setLevel(logging.ERROR)

    model = args.model or settings.default_model()
    folder = settings.prepared_folder()
    if folder is None:
        print("error: MHA_VIZ_PREPARED_DIR is off: nothing would be kept", file=sys.stderr)
        return 2
    try:
        text = args.text or (settings.SEQ2SEQ_TEXT if warm.get_model(model).info.encoder_decoder
                             else settings.DEFAULT_TEXT)
        warm.prepare(model, text, progress=lambda done, total, what: print(
            f"[{done}/{total}] {what}", flush=True))
    except MhaVizError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    kept = len(list(folder.glob("*.npz"))) if folder.is_dir() else 0
    print(f"prepared {model} for {text!r}; {kept} result(s) kept in {folder}")
    return 0


def corpus_command(args) -> int:
    from pathlib import Path

    from . import corpus
    from .models.model import load_model

    bar_shown = []

    def progress(at: "corpus.Progress") -> None:
        bar_shown.append(True)
        share = at.texts_read / at.texts_total if at.texts_total else None
        bar = "#" * int(30 * share) if share is not None else ""
        left = at.seconds_left
        print(f"\r[{bar:30s}] {at.segments:,} segments ({at.shards:,} shards"
              + (f", {at.resumed} resumed" if at.resumed else "") + "), "
              f"{at.tokens_per_second:,.0f} tokens/s"
              + (f", texts {at.texts_read:,}/{at.texts_total:,}" if at.texts_total else
                 f", {at.texts_read:,} texts read")
              + (f", {left:,.0f} s left " if left is not None else " "),
              end="", file=sys.stderr, flush=True)

    try:
        if args.demo:
            texts = corpus.demo_texts()
            texts = texts[:args.limit] if args.limit else texts
            source, total, name = "the demo corpus", len(texts), "demo"
        else:
            stream = corpus.open_texts(args.input, column=args.column, limit=args.limit,
                                       sample=args.sample, seed=args.seed, split=args.split)
            texts, source, total, name = stream, stream.source, stream.total, stream.source
        engine = args.engine or ("ray" if args.workers > 1 or args.address else "local")
        model = load_model(args.model, dtype=args.dtype, device=args.device)
        print(f"{source}" + (f": {total:,} texts" if total else "") +
              f" -> segments of up to {args.seg_len} tokens, on the {engine} engine"
              + (f" ({args.workers} workers)" if engine == "ray" else ""), file=sys.stderr)
        result = corpus.run_stream(
            model, texts, args.seg_len, [s for s in args.stats.split(",") if s],
            engine=engine, workers=args.workers, address=args.address,
            checkpoint=args.checkpoint, input_name=name, max_segments=args.max_segments,
            texts_total=total, batch_size=args.batch_size, progress=progress,
            weights=args.weights)
    except MhaVizError as error:
        print(("\n" if bar_shown else "") + f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted" + (f": the finished shards are kept in {args.checkpoint}; run "
                                 f"the same command again to resume" if args.checkpoint
                                 else ""), file=sys.stderr)
        return 130
    print(file=sys.stderr)
    info = result.info
    print(f"{info['texts_read']:,} texts read ({getattr(texts, 'skipped', 0)} row(s) that were "
          f"not text skipped), {info['n_texts']:,} gave {result.n_segments:,} segments "
          f"({result.n_tokens:,} tokens; {info['n_dropped']} short piece(s) dropped) in "
          f"{info['seconds']:,.1f} s" + (f"; {info['resumed_shards']} shard(s) read back "
                                         f"from the checkpoint" if info['resumed_shards'] else ""))
    result.save(args.out)
    stem = args.out[:-4] if args.out.endswith(".npz") else args.out
    written = result.save_parquet(stem + ".parquet", model.info.n_head)
    entropy = result.mean("entropy") if "entropy" in result.names else None
    if entropy is not None:
        print(f"mean head entropy {np.nanmean(entropy):.3f} nats over "
              f"{result.n_segments:,} segments")
    print(f"saved {args.out} and {', '.join(Path(w).name for w in written)}")
    return 0


def dynamics_texts(text: list[str] | None, path: str | None, limit: int,
                   series=None) -> list[str] | None:
    """The texts a dynamics run measures on: given, read from a file, None for a series that
    keeps held-out texts of its training distribution (training_dynamics reads them), or
    the demo corpus's first paragraphs."""
    from . import corpus

    if text:
        return text
    if path:
        return list(corpus.open_texts(path, limit=limit))
    if series is not None and series.held_out is not None:
        return None
    return corpus.demo_texts(limit)


def dynamics_command(args) -> int:
    from .analysis.dynamics import training_dynamics
    from .checkpoints.series import checkpoint_series

    series = None

    def progress(done: int, total: int) -> None:
        bar = "#" * int(30 * done / max(total, 1))
        print(f"\r[{bar:30s}] {done}/{total} checkpoints (step {series.steps[done - 1]:,}) ",
              end="", file=sys.stderr, flush=True)

    try:
        steps = None if args.steps is None else [
            int(s) for s in args.steps.split(",") if s.strip()]
        series = checkpoint_series(args.series, steps=steps)
        texts = dynamics_texts(args.text, args.input, args.limit, series)
        print(f"{series.name}: {len(series)} checkpoints, steps {series.steps[0]:,} to "
              f"{series.steps[-1]:,}; " + ("its held-out texts" if texts is None else
                                           f"{len(texts)} text(s)"), file=sys.stderr)
        result = training_dynamics(series, texts, seq_len=args.seq_len, n_seqs=args.n_seqs,
                                   seed=args.seed, progress=progress)
    except ValueError as error:  # --steps that are not numbers
        print(f"error: {error}", file=sys.stderr)
        return 2
    except MhaVizError as error:
        print(f"\nerror: {error}", file=sys.stderr)
        return 2
    print(file=sys.stderr)
    best = result.strongest_heads("induction", 1)[0]
    induction = result.heads["induction"][:, best[0], best[1]]
    print(f"strongest induction head L{best[0]}.H{best[1]}: {induction[0]:.3f} at step "
          f"{result.steps[0]:,}, {induction[-1]:.3f} at step {result.steps[-1]:,}")
    change = result.phase_change()
    if change is not None:
        repeated = result.curves["probe_loss_repeated"]
        print(f"steepest fall of the loss on the probe's repeated copy: up to step "
              f"{result.steps[change]:,} (from {repeated[change - 1]:.3f} to "
              f"{repeated[change]:.3f} nats)")
    result.save(args.out)
    print(f"saved {args.out}")
    return 0 if args.composition is None else composition_command(args, series, result)


def composition_command(args, series, dynamics) -> int:
    """The strongest induction head's composition over the checkpoints (--composition)."""
    from .analysis import composition_over_training

    head = dynamics.induction_head()
    if head is None:
        print("error: a model of one layer has no head that reads another", file=sys.stderr)
        return 2

    def progress(done: int, total: int) -> None:
        print(f"\rcomposition of L{head[0]}.H{head[1]}: {done}/{total} checkpoints ",
              end="", file=sys.stderr, flush=True)

    try:
        found = composition_over_training(series, *head, seq_len=dynamics.info["seq_len"],
                                          seed=dynamics.info["seed"], progress=progress)
    except MhaVizError as error:
        print(f"\nerror: {error}", file=sys.stderr)
        return 2
    print(file=sys.stderr)
    source = dynamics.previous_token_head(head[0])
    share = found.share("k", *source)
    print(f"K-composition of L{head[0]}.H{head[1]} with L{source[0]}.H{source[1]} (the "
          f"strongest previous-token head): {share[0]:.2f} at step {found.steps[0]:,}, "
          f"{share[-1]:.2f} at step {found.steps[-1]:,}")
    found.save(args.composition)
    print(f"saved {args.composition}")
    return 0


def patch_command(args) -> int:
    from pathlib import Path

    from .analysis import patching
    from .analysis.prompts import ioi_pairs, read_pairs
    from .models.model import load_model

    def progress(done: int, total: int) -> None:
        bar = "#" * int(30 * done / max(total, 1))
        print(f"\r[{bar:30s}] {done}/{total} ", end="", file=sys.stderr, flush=True)

    try:
        model = load_model(args.model, dtype=args.dtype, device=args.device)
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
    print("strongest (normalized, 0 = corrupted, 1 = clean; ± std over pairs):")
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
