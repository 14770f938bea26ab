"""Encoder-decoder capture against transformers' eager forward with output_attentions, in the
same run (issue 27).

A random T5 of t5-small's shape (6 + 6 layers, 8 heads, d_model 512, d_ff 2,048, a 32,128-token
vocabulary), built offline. Ours: model.trace(source, target=target), which tokenizes, runs the
encoder and the teacher-forced decoder and returns the encoder, decoder and cross-attention
maps as numpy arrays. The reference: the same tokenization, T5ForConditionalGeneration's
forward with output_attentions=True, and the three kinds stacked into numpy arrays. Sources of
128 and 512 tokens, a 32-token target; medians of --repeats runs; target ratio <= 1.0.

    python benchmarks/encoder_decoder.py [--repeats 7] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import median_seconds, text_of  # noqa: E402  (benchmarks/engine.py)
from mha_viz import load_model  # noqa: E402
from mha_viz.testing import make_seq2seq_checkpoint  # noqa: E402

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForSeq2SeqLM

    with tempfile.TemporaryDirectory() as folder:
        make_seq2seq_checkpoint(folder, "t5", n_layer=6, n_head=8, d_model=512, d_ff=2048,
                                vocab_size=32128, n_positions=1024, init_std=0.02,
                                buckets=32, max_distance=128)
        model = load_model(folder)
        reference = AutoModelForSeq2SeqLM.from_pretrained(
            folder, attn_implementation="eager").eval()
    target = text_of(model, 32)
    print(f"random T5 of t5-small's shape, {args.threads} threads, medians of {args.repeats}")
    for n in (128, 512):
        source = text_of(model, n)

        def theirs():
            ids = model.encode_source(source)[0]
            labels = model.encode_target(target)
            with torch.inference_mode():
                out = reference(input_ids=torch.tensor([ids]),
                                decoder_input_ids=torch.tensor([model.decoder_input(labels)]),
                                output_attentions=True)
            return [np.stack([a[0].numpy() for a in kind]) for kind in (
                out.encoder_attentions, out.decoder_attentions, out.cross_attentions)]

        def ours():
            return model.trace(source, target=target)

        trace, expected = ours(), theirs()
        worst = max(float(np.abs(trace.attentions(k) - e).max())
                    for k, e in zip(("encoder", "decoder", "cross"), expected))
        a, b = median_seconds(ours, args.repeats), median_seconds(theirs, args.repeats)
        print(f"source {len(trace.source_ids)} tokens, target {len(trace.target_ids)}: ours "
              f"{a * 1000:.1f} ms, transformers {b * 1000:.1f} ms, ratio {a / b:.2f} "
              f"(target <= 1.0); largest map difference {worst:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
