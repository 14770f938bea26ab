"""model.generate against transformers' generate on the same model, in the same run: greedy,
the same prompt ids, the same number of new tokens. Prints each side's tokens per second
(median of --repeats runs, the two timed in turn), their ratio (ours / transformers; issue
49's goal: >= 1.0) and whether both wrote the same ids. Ours is timed without the trace
(what transformers returns: the ids) and with it (maps of prompt and continuation, the
default).

    python benchmarks/generate.py [--model smollm2] [--tokens 20] [--repeats 5]
                                  [--threads 2] [--attention sdpa|eager] [--prompt TEXT]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import interleaved_medians  # noqa: E402  (benchmarks/engine.py's timing)

from mha_viz import load_model  # noqa: E402

PROMPT = "The animal didn't cross the street because it was too tired. The next morning,"


def reference_lm(source, attention: str):
    """transformers' causal LM on the same weights (a folder, or the bundled GGUF)."""
    from transformers import AutoModelForCausalLM

    from mha_viz.checkpoints import resolve

    resolved = resolve(source)
    if resolved.is_gguf:
        return AutoModelForCausalLM.from_pretrained(
            str(resolved.path.parent), gguf_file=resolved.path.name,
            attn_implementation=attention, dtype=torch.float32).eval()
    return AutoModelForCausalLM.from_pretrained(str(resolved.path),
                                                attn_implementation=attention).eval()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--attention", default="sdpa", choices=["sdpa", "eager"],
                        help="transformers' attention (sdpa: its default)")
    parser.add_argument("--prompt", default=PROMPT)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    ref = reference_lm(args.model, args.attention)
    ids = model.encode(args.prompt).input_ids
    eos = model.tokenizer.eos_token_id
    written = {}

    def ours(trace):
        def run():
            written["ours"] = model.generate(ids, args.tokens, trace=trace).new_ids
        return run

    def theirs():
        with torch.inference_mode():
            out = ref.generate(torch.tensor([ids]), max_new_tokens=args.tokens, do_sample=False,
                               eos_token_id=eos, pad_token_id=eos)
        written["theirs"] = out[0, len(ids):].tolist()

    print(f"{args.model}: {len(ids)} prompt tokens, {args.tokens} new, {args.threads} "
          f"thread(s), transformers with {args.attention} attention")
    for label, trace in (("ours (ids only)", False), ("ours (with the trace)", True)):
        ours_s, ref_s = interleaved_medians(ours(trace), theirs, args.repeats)
        n_ours, n_ref = len(written["ours"]), len(written["theirs"])
        ours_rate, ref_rate = n_ours / ours_s, n_ref / ref_s
        print(f"{label:<22} {ours_rate:7.1f} tokens/s   transformers {ref_rate:7.1f} tokens/s"
              f"   ratio {ours_rate / ref_rate:5.2f}   same ids: "
              f"{written['ours'] == written['theirs']}")


if __name__ == "__main__":
    main()
