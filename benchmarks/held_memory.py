"""Peak memory of the computations that hold whole [T, T] arrays while they run, against the
bytes per squared token the library says they take (what the pages refuse past the budget
with): gradient importance (a backward pass keeps every head's attention) and Inside one
head (one layer's weights for every head, one head's scores). Each measurement runs in a
fresh process: its peak RSS (a high-water mark) after the computation, less its resident
memory before it (after loading the model and a short warm-up forward). The model's load
may itself peak higher than a small computation: then the figure is a floor.

    python benchmarks/held_memory.py [--model smollm2] [--tokens 512 1024]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

ONE = r"""
import resource, sys, time
from mha_viz import corpus, load_model
from mha_viz.analysis import pruning
from mha_viz.analysis.one_head.steps import inside_one_head
name, n, what = sys.argv[1], int(sys.argv[2]), sys.argv[3]
model = load_model(name)
text = ""
for paragraph in corpus.demo_texts() * 50:
    text += paragraph + "\n\n"
    if len(model.encode(text).input_ids) > n:
        break
ids = model.encode(text).input_ids[:n]
text = model.tokenizer.decode(ids)
model.trace("warm up", maps="full")
import gc, os
gc.collect()
with open("/proc/self/statm") as statm:  # resident now (the high-water mark is the load's)
    before = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
started = time.perf_counter()
if what == "gradient":
    pruning.gradient_importance(model, text, metric=None)
else:
    inside_one_head(model, text, layer=model.info.n_layer // 2, head=0)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(model.encode(text).input_ids), (after - before) * 1024, time.perf_counter() - started)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 1024])
    parser.add_argument("--what", nargs="+", default=["gradient", "inside"],
                        choices=["gradient", "inside"])
    args = parser.parse_args()
    from mha_viz import load_model
    from mha_viz.analysis.one_head.steps import inside_bytes_per_squared_token
    from mha_viz.analysis.pruning import gradient_bytes_per_squared_token

    info = load_model(args.model).info
    said = {"gradient": gradient_bytes_per_squared_token(info.n_layer, info.n_head),
            "inside": inside_bytes_per_squared_token(info.n_head)}
    print(f"{args.model}: {info.n_layer} layers x {info.n_head} heads")
    print(f"{'what':<9} {'tokens':>6} {'peak +MB':>9} {'said MB':>8} {'peak/said':>9} {'s':>6}")
    for what in args.what:
        for n in args.tokens:
            out = subprocess.run([sys.executable, "-c", ONE, args.model, str(n), what],
                                 capture_output=True, text=True, check=True).stdout.split()
            tokens, peak, seconds = int(out[-3]), float(out[-2]), float(out[-1])
            expected = said[what] * tokens ** 2
            print(f"{what:<9} {tokens:>6} {peak / 2**20:>9.0f} {expected / 2**20:>8.0f} "
                  f"{peak / expected:>9.2f} {seconds:>6.1f}")


if __name__ == "__main__":
    main()
