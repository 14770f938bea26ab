"""Command line: python -m mha_viz trace --model minilm --text "..." [--out trace.npz]"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from .errors import MhaVizError


def layer_summary(trace) -> list[str]:
    """One line per layer: mean entropy over heads, the sharpest head, where mass goes."""
    from .analysis.entropy import entropy

    ent = entropy(trace.attentions)
    lines = [f"{trace.model_name}: {trace.n_layers} layers x {trace.n_heads} heads, "
             f"{trace.n_tokens} tokens" + (f" (truncated from {trace.n_tokens_before_truncation})"
                                           if trace.truncated else "")]
    first_mass = trace.attentions[..., 0].mean(-1)  # [L, H]: mass on the first token
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
    trace_cmd.add_argument("--out", default=None, help="save the trace as .npz")
    args = parser.parse_args(argv)

    from .model import load_model

    try:
        model = load_model(args.model)
        trace = model.trace(args.text, text_pair=args.text_pair, max_tokens=args.max_tokens)
    except MhaVizError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(layer_summary(trace)))
    print("tokens:", " ".join(trace.display_tokens[:40]) + (" ..." if trace.n_tokens > 40 else ""))
    if args.out:
        trace.save(args.out)
        print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
