"""A billion parameters on a 2-core, 24 GB machine: a random checkpoint of Llama-3.2-1B's shape
(16 layers, 32 query heads sharing 8 key/value heads, d_model 2048, d_ff 8192, a 128,256-token
vocabulary, llama3 RoPE scaling, tied embeddings), written once as bfloat16 safetensors (about
2.5 GB; not in CI), then loaded and run by mha-viz and by transformers on the same file and
dtype, each in a process of its own (so each peak is its own):

- load: seconds, and the process's peak resident memory beside the weights' bytes and what
  the interpreter held before loading (issue 40: peak <= 1.3 x weights + interpreter);
- a 512-token trace with every map, the median of three (ours: model.trace; transformers: eager
  forward with output_attentions, the maps stacked into one float32 array);
- every head patched for an 18-token prompt pair differing early and one differing late
  (ours: activation_patching), against one forward of the pair's tokens times the number of
  heads (issue 40: <= 0.15).

Also SmolLM2 (the bundled GGUF) loaded in float32 and in bfloat16: the peak of each.

    python benchmarks/billion.py [--folder /tmp/llama-1b] [--threads 2] [--skip-smollm2]
                                 [--device cuda]

With --device cuda both sides run on the GPU (the timings wait for it: torch.cuda.synchronize)
and the GPU's own peak (torch.cuda.max_memory_allocated) is printed beside the process's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPE = dict(num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
             hidden_size=2048, intermediate_size=8192, vocab_size=128256, head_dim=64,
             max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=True,
             rms_norm_eps=1e-5, rope_scaling=dict(rope_type="llama3", factor=32.0,
                                                  low_freq_factor=1.0, high_freq_factor=4.0,
                                                  original_max_position_embeddings=8192))
TRACE_REPEATS = 3
WORDS = ("the cat sat on a mat while a dog ran to the door and back again under the old "
         "tree near the river").split()


def _status_mb(key: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_mb() -> float:
    """The process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the
    parent that wrote the checkpoint)."""
    return _status_mb("VmHWM")


def resident_mb() -> float:
    return _status_mb("VmRSS")


def write_checkpoint(folder: Path) -> None:
    """config.json, a byte-level tokenizer and random bfloat16 weights, a tensor at a time
    into one safetensors file (never a float32 copy of the model)."""
    import torch
    from safetensors.torch import save_file

    sys.path.insert(0, str(ROOT))
    from mha_viz.testing.checkpoints import build_gpt2_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_gpt2_tokenizer(folder)
    config = dict(SHAPE, model_type="llama", architectures=["LlamaForCausalLM"],
                  bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                  torch_dtype="bfloat16", hidden_act="silu", attention_bias=False,
                  mlp_bias=False)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    d, f, kv = SHAPE["hidden_size"], SHAPE["intermediate_size"], 8 * 64
    generator = torch.Generator().manual_seed(0)

    def random(*shape, std=0.02):
        return (torch.randn(*shape, generator=generator) * std).to(torch.bfloat16)

    tensors = {"model.embed_tokens.weight": random(SHAPE["vocab_size"], d),
               "model.norm.weight": torch.ones(d, dtype=torch.bfloat16)}
    for i in range(SHAPE["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors.update({
            p + "self_attn.q_proj.weight": random(d, d), p + "self_attn.k_proj.weight":
            random(kv, d), p + "self_attn.v_proj.weight": random(kv, d),
            p + "self_attn.o_proj.weight": random(d, d), p + "mlp.gate_proj.weight":
            random(f, d), p + "mlp.up_proj.weight": random(f, d),
            p + "mlp.down_proj.weight": random(d, f),
            p + "input_layernorm.weight": torch.ones(d, dtype=torch.bfloat16),
            p + "post_attention_layernorm.weight": torch.ones(d, dtype=torch.bfloat16)})
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def texts(tokenizer, n_tokens: int) -> list[int]:
    words = " ".join(WORDS[i % len(WORDS)] + ("s" if i % 7 == 0 else "") for i in range(4000))
    return tokenizer(words)["input_ids"][:n_tokens]


def prompt_pairs(tokenizer) -> dict[str, tuple[str, str]]:
    """Two texts of 18 tokens that differ in one word, early (token 2: hardly any prefix the
    patched runs can reuse) and late (token 13, where an indirect-object pair differs)."""
    clean = "the cat sat on a mat while a dog ran to the"
    pairs = {"early": (clean, clean.replace(" cat ", " dog ", 1)),
             "late": (clean, clean.replace(" dog ", " cat ", 1))}
    for name, (a, b) in pairs.items():
        if len(tokenizer(a)["input_ids"]) != len(tokenizer(b)["input_ids"]):
            raise RuntimeError(f"the {name} pair's texts differ in length")
    return pairs


def run_side(side: str, folder: Path, threads: int, device: str = "cpu") -> dict:
    """One side, in this process: what the parent prints."""
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    on_gpu = device.startswith("cuda")

    def now() -> float:  # a GPU's work is queued: wait for it before reading the clock
        if on_gpu:
            torch.cuda.synchronize()
        return time.perf_counter()

    def tensor(ids):
        return torch.tensor([ids], device=device)

    sys.path.insert(0, str(ROOT))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if side == "ours":
        from mha_viz import TargetMetric, load_model
        from mha_viz.analysis import activation_patching
    base = resident_mb()
    start = now()
    if side == "ours":
        model = load_model(folder, dtype="bfloat16", device=device)
        tokenizer = model.tokenizer
    else:
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.bfloat16,
                                                     attn_implementation="eager").eval()
        model = model.to(device)
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    load_s = now() - start
    load_peak = peak_mb()
    ids = texts(tokenizer, 512)
    with torch.no_grad():  # first calls set up their kernels: not what is measured
        if side == "ours":
            model.trace_ids(ids[:16], maps="full")
        else:
            model(tensor(ids[:16]), output_attentions=True)
    times = []
    for _ in range(TRACE_REPEATS):  # the median: a first run also pays for fresh memory
        start = now()
        if side == "ours":
            maps = model.trace_ids(ids, maps="full").attentions
        else:
            with torch.no_grad():
                out = model(tensor(ids), output_attentions=True)
            maps = torch.stack(out.attentions)[:, 0].float().cpu().numpy()
            del out
        times.append(now() - start)
        if len(times) < TRACE_REPEATS:
            del maps
    trace_s = sorted(times)[len(times) // 2]
    assert maps.shape == (16, 32, 512, 512) and maps.dtype == np.float32
    pairs = prompt_pairs(tokenizer)
    pair = tokenizer(pairs["early"][0])["input_ids"]
    found = {"load_s": load_s, "load_peak_mb": load_peak, "base_mb": base,
             "trace_s": trace_s}
    if side == "ours":
        metric = TargetMetric(len(pair) - 1, pair[-1], pair[2])
        for name, (clean_text, corrupted_text) in pairs.items():
            start = now()
            values = activation_patching(model, clean_text, corrupted_text, metric).values
            found[f"patch_{name}_s"] = now() - start
            assert values.shape == (16, 32)
    else:
        with torch.no_grad():
            model(tensor(pair))  # warm
            start = now()
            for _ in range(3):
                model(tensor(pair))
        found["forward20_s"] = (now() - start) / 3
    found["peak_mb"] = peak_mb()
    if on_gpu:
        found["gpu_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return found


def smollm2_peak(dtype: str) -> dict:
    sys.path.insert(0, str(ROOT))
    from mha_viz import load_model

    base = resident_mb()
    start = time.perf_counter()
    model = load_model("smollm2", dtype=dtype)
    seconds = time.perf_counter() - start
    weights = sum(p.numel() * p.element_size() for p in model.network.parameters())
    return {"base_mb": base, "peak_mb": peak_mb(), "weights_mb": weights / 2**20,
            "load_s": seconds}


def child(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                         env=dict(os.environ, TOKENIZERS_PARALLELISM="false"))
    if out.returncode:
        sys.exit(f"{args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", default="/tmp/mha-viz-llama-1b")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-smollm2", action="store_true")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--smollm2", help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = Path(args.folder)
    if args.side:
        print(json.dumps(run_side(args.side, folder, args.threads, args.device)))
        return
    if args.smollm2:
        print(json.dumps(smollm2_peak(args.smollm2)))
        return
    if not (folder / "model.safetensors").is_file():
        print(f"writing the checkpoint to {folder} ...", flush=True)
        write_checkpoint(folder)
    weights_mb = (folder / "model.safetensors").stat().st_size / 2**20
    print(f"Llama-3.2-1B shape, bfloat16, {weights_mb:,.0f} MB of weights, "
          f"{args.threads} threads, on {args.device}")
    side_args = ("--folder", str(folder), "--threads", str(args.threads), "--device",
                 args.device)
    ours = child("--side", "ours", *side_args)
    theirs = child("--side", "transformers", *side_args)
    print(f"{'':34}{'mha-viz':>12}{'transformers':>14}{'ratio':>8}")
    rows = [("load (s)", "load_s"), ("peak after load (MB)", "load_peak_mb"),
            ("512-token trace, every map (s)", "trace_s"), ("peak of the run (MB)", "peak_mb")]
    if "gpu_peak_mb" in ours:
        rows.append(("GPU peak of the run (MB)", "gpu_peak_mb"))
    for label, key in rows:
        print(f"{label:34}{ours[key]:>12,.1f}{theirs[key]:>14,.1f}"
              f"{ours[key] / theirs[key]:>8.2f}")
    for name, side in (("mha-viz", ours), ("transformers", theirs)):
        over = (side["load_peak_mb"] - side["base_mb"]) / weights_mb
        print(f"{name}: peak after load = interpreter {side['base_mb']:,.0f} MB + "
              f"{over:.2f} x the weights")
    heads = 16 * 32
    for name in ("early", "late"):
        seconds = ours[f"patch_{name}_s"]
        print(f"every head patched ({heads} heads, prompts differing {name}): {seconds:.1f} s "
              f"= {seconds / (heads * theirs['forward20_s']):.3f} x one forward per head "
              f"({theirs['forward20_s'] * 1000:.0f} ms)")
    if not args.skip_smollm2:
        for dtype in ("float32", "bfloat16"):
            found = child("--smollm2", dtype)
            print(f"SmolLM2 in {dtype}: peak {found['peak_mb']:,.0f} MB (interpreter "
                  f"{found['base_mb']:,.0f} MB, weights {found['weights_mb']:,.0f} MB, "
                  f"loaded in {found['load_s']:.1f} s)")


if __name__ == "__main__":
    main()
