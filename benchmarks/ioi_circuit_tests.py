"""Faithfulness and necessity of the indirect-object circuit on SmolLM2, as Wang et al. 2023
measure GPT-2 small's (faithfulness 87% of the logit difference, mean ablation over the ABC
distribution).

    python benchmarks/ioi_circuit_tests.py [--pairs 32] [--heads 27] [--threads 2]

The circuit is found by the library: activation patching of every head (denoising, the mean
over the pairs) and the heads with the largest |effect| (strongest_components); then every head
outside it is mean-ablated (faithfulness), and the circuit's heads alone (necessity), over the
ABC prompts of the same pairs (ioi_pairs(..., corruption="abc")), on every pair, with the
spread; resample and zero ablation beside it. For scale: the same number of heads drawn at
random (seeded), and Wang et al.'s figure.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from mha_viz import load_model  # noqa: E402
from mha_viz.analysis import activation_patching, circuit_test, strongest_components  # noqa: E402
from mha_viz.analysis.heads import parse_head_name  # noqa: E402
from mha_viz.analysis.prompts import ioi_pairs  # noqa: E402


def line(name, test):
    f, n = test.spread("faithfulness"), test.spread("necessity")
    return (f"  {name:<34} faithfulness {test.faithfulness:6.1%} (per pair {f['mean']:6.1%} "
            f"± {f['std']:.1%}, 95% CI {f['ci95_low']:.1%} to {f['ci95_high']:.1%})   necessity "
            f"{test.necessity:6.1%} (per pair {n['mean']:6.1%} ± {n['std']:.1%})")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--pairs", type=int, default=32)
    parser.add_argument("--heads", type=int, default=27)  # 10% of SmolLM2's 270
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    pairs = ioi_pairs(model, args.pairs, seed=0)
    abc = [p.corrupted for p in ioi_pairs(model, args.pairs, seed=0, corruption="abc")]
    start = time.perf_counter()
    patched = activation_patching(model, pairs, metric="logit_diff")
    found = [parse_head_name(name) for name, _, _ in strongest_components(patched, args.heads)]
    print(f"{model}, {args.pairs} IOI pairs (seed 0), {args.threads} threads; patching took "
          f"{time.perf_counter() - start:.0f} s")
    print(f"F(M), the model's logit difference: {patched.clean:.3f} (mean over pairs)")
    print(f"circuit: the {args.heads} heads of largest |effect| (exact head patching): "
          + ", ".join(f"L{l}.H{h}" for l, h in sorted(found)))
    info = model.info
    every = [(l, h) for l in range(info.n_layer) for h in range(info.n_head)]
    drawn = random.Random(0).sample(every, args.heads)
    for ablation in ("mean", "resample", "zero"):
        test = circuit_test(model, pairs, found, "logit_diff", ablation, reference=abc)
        print(line(f"{ablation} ablation, the circuit", test))
        if ablation == "mean":
            print(f"    F(C) {test.circuit_metric.mean():.3f}  F(M \\ C) "
                  f"{test.without_circuit.mean():.3f}  F(every head ablated) "
                  f"{test.nothing_metric.mean():.3f}")
            rand = circuit_test(model, pairs, drawn, "logit_diff", ablation, reference=abc)
            print(line(f"{ablation} ablation, {args.heads} random heads", rand))
    print("Wang et al. 2023, GPT-2 small, 26-head circuit, mean ablation over ABC: "
          "faithfulness 87% of the model's logit difference")


if __name__ == "__main__":
    main()
