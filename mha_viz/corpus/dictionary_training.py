"""`mha-viz train-sae`: a dictionary trained on a model's activations over a corpus read from
files as the corpus command reads them (sources.open_texts: .txt, .csv, .jsonl, Parquet,
Arrow, folders), written in SAELens's format (analysis.features.train_saes).

    python -m mha_viz train-sae --model induction-toy --site hook_z --layer 1
        --input windows.jsonl [--held-out held.jsonl] [--d-sae 256] [--k 8] [--seed 0]
        [--seg-len 64] [--max-tokens N] [--passes 1] [--epochs N --cache DIR]
        [--held-out-cache DIR] [--dtype bfloat16] [--checkpoint DIR]
        --out saes/        (writes saes/L1.hook_z/cfg.json + sae_weights.safetensors)
"""

from __future__ import annotations

import sys

from ..core.errors import MhaVizError
from .sources import open_texts


def add_command(commands) -> None:
    """The train-sae sub-command's arguments, on the command line's sub-parsers."""
    command = commands.add_parser("train-sae", help="train a sparse dictionary (TopK) on a "
                                  "model's activations over a corpus; SAELens's format")
    command.add_argument("--model", required=True, help="a bundled name, folder or hub id")
    command.add_argument("--site", action="append", required=True,
                         help="hook_z, attn_out, resid_pre, resid_post or mlp_out "
                              "(repeatable: several sites train from one forward)")
    command.add_argument("--layer", type=int, required=True)
    command.add_argument("--input", required=True, help="the training texts (file or folder)")
    command.add_argument("--column", default=None, help="a CSV's column, a JSON lines field")
    command.add_argument("--held-out", default=None,
                         help="texts the quality figures (FVU, L0, dead) are measured on")
    command.add_argument("--held-out-limit", type=int, default=None)
    command.add_argument("--d-sae", type=int, default=None, help="features (default 8 x width)")
    command.add_argument("--k", type=int, default=32, help="active features per token")
    command.add_argument("--architecture", default="topk", choices=("topk", "standard"))
    command.add_argument("--seed", type=int, default=0)
    command.add_argument("--seg-len", type=int, default=128)
    command.add_argument("--max-tokens", type=int, default=None)
    command.add_argument("--passes", type=int, default=1,
                         help="times each buffer of activations is trained on")
    command.add_argument("--epochs", type=int, default=1,
                         help="passes over the texts; more than one needs --cache")
    command.add_argument("--cache", default=None,
                         help="a folder keeping the activations (float16) for later epochs "
                              "and runs")
    command.add_argument("--held-out-cache", default=None,
                         help="the same for the held-out texts' activations")
    command.add_argument("--batch-tokens", type=int, default=4096)
    command.add_argument("--buffer-tokens", type=int, default=65536,
                         help="the shuffle buffer's rows (half is trained on when full)")
    command.add_argument("--lr", type=float, default=None)
    command.add_argument("--dtype", default="float32", help="the dtype written (bfloat16: "
                                                              "half the bytes)")
    command.add_argument("--checkpoint", default=None,
                         help="a folder keeping the run's state: a run given it resumes")
    command.add_argument("--threads", type=int, default=None, help="torch's CPU threads")
    command.add_argument("--out", required=True, help="a folder: one sub-folder per site")


def run_command(args) -> int:
    import torch

    from ..analysis.features import train_saes
    from ..models.model import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        model = load_model(args.model)
        texts = open_texts(args.input, column=args.column)
        held = (None if args.held_out is None else
                open_texts(args.held_out, column=args.column, limit=args.held_out_limit))

        def progress(at) -> None:
            if at.step % 50 == 0:
                figures = ", ".join(f"{name} {value:.3f}" for name, value in at.fvu.items())
                print(f"step {at.step:,}: {at.tokens:,} tokens, {at.seconds:,.0f} s; batch "
                      f"FVU {figures}", flush=True)

        trained = train_saes(
            model, [(site, args.layer) for site in args.site], texts, d_sae=args.d_sae,
            k=args.k, architecture=args.architecture, held_out_texts=held, out=args.out,
            seed=args.seed, seg_len=args.seg_len, max_tokens=args.max_tokens,
            passes=args.passes, batch_tokens=args.batch_tokens, lr=args.lr,
            buffer_tokens=args.buffer_tokens,
            save_dtype=args.dtype, checkpoint=args.checkpoint, epochs=args.epochs,
            cache=args.cache, held_out_cache=args.held_out_cache, progress=progress)
    except MhaVizError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for result in trained:
        quality = result.quality
        figures = ("" if quality is None else f"; held-out: FVU {quality.fvu:.4f}, L0 "
                   f"{quality.l0:.1f}, dead {quality.dead_fraction:.4f} over "
                   f"{quality.tokens:,} tokens")
        print(f"{result.sae.hook_name}: {result.sae.d_sae:,} features, {result.steps:,} "
              f"steps on {result.tokens:,} tokens in {result.seconds:,.0f} s{figures}; "
              f"wrote {result.folder}")
    return 0
