"""trace() of the new families against transformers' eager forward with output_attentions, in
the same run, on random checkpoints of real models' shapes (scaled down in depth so that a
run takes minutes, not hours): Pythia-160M (GPT-NeoX: 12 heads of 64, parallel attention
and MLP, a quarter of each head rotating), Gemma-2-2B (8 heads of 256 sharing 4 key/value
heads, soft-caps, a sliding window on every other layer, norms after each sub-layer) and
Qwen3-0.6B (16 heads of 128 sharing 8, QK-norm), at 128 and 512 tokens. Prints the median
time of each side, timed in turn, and their ratio (ours / reference; issue 39's target: <= 1.0).

Both sides take token ids and hand back every layer's maps as one numpy array [L, H, T, T].

    python benchmarks/families.py [--repeats 5] [--layers 4] [--threads 2]
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

from engine import interleaved_medians  # noqa: E402  (benchmarks/engine.py's timing)

from mha_viz import load_model  # noqa: E402
from mha_viz.testing import make_decoder_checkpoint  # noqa: E402

# the real models' widths; depth is --layers
SHAPES = {
    "pythia-160m": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(
        num_attention_heads=12, hidden_size=768, intermediate_size=3072,
        max_position_embeddings=2048, rotary_pct=0.25, use_parallel_residual=True)),
    "gemma-2-2b": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        num_attention_heads=8, num_key_value_heads=4, hidden_size=2304, head_dim=256,
        intermediate_size=9216, max_position_embeddings=8192, query_pre_attn_scalar=256,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0, sliding_window=4096)),
    "qwen3-0.6b": ("Qwen3Config", "Qwen3ForCausalLM", dict(
        num_attention_heads=16, num_key_value_heads=8, hidden_size=1024, head_dim=128,
        intermediate_size=3072, max_position_embeddings=40960)),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    print(f"{'model':<13} {'tokens':>6} {'ours s':>8} {'transformers s':>15} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (config_class, model_class, config) in SHAPES.items():
            folder = make_decoder_checkpoint(Path(tmp) / name, config_class, model_class,
                                             init_std=0.02, num_hidden_layers=args.layers,
                                             **config)
            ours = load_model(folder)
            ref = AutoModelForCausalLM.from_pretrained(str(folder),
                                                       attn_implementation="eager").eval()
            rng = np.random.default_rng(0)
            for n in (128, 512):
                ids = [int(i) for i in rng.integers(3, ours.info.vocab_size, n)]

                def reference():
                    with torch.inference_mode():
                        out = ref(torch.tensor([ids]), output_attentions=True)
                    return np.stack([a[0].numpy() for a in out.attentions])

                maps = ours.trace_ids(ids).attentions
                gap = float(np.abs(maps - reference()).max())
                mine, theirs = interleaved_medians(lambda: ours.trace_ids(ids).attentions,
                                                   reference, args.repeats)
                print(f"{name:<13} {n:>6} {mine:>8.3f} {theirs:>15.3f} {mine / theirs:>6.2f}"
                      f"   (max |maps - reference| {gap:.1e})")


if __name__ == "__main__":
    main()
