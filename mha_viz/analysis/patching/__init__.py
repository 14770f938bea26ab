"""Causal interventions between a clean and a corrupted prompt: activation patching, path
patching and attribution patching (docs/analyses.md, "Causal interventions"; Meng et al.
2022, Wang et al. 2023, Heimersheim & Nanda 2024, Nanda 2023, Syed et al. 2023).

    from mha_viz.analysis import activation_patching
    r = activation_patching(model, clean, corrupted, TargetMetric(-1, " Mary", " John"))
    r.values        # [L, H]: the metric with each head's output patched
    r.normalized    # (values - corrupted) / (clean - corrupted): 0 corrupted, 1 clean

How it is fast, exactly: patching a component of layer l changes nothing below l, so each
patched run starts from the residual stream entering layer l, cached from the unpatched run,
and the patched copies of one layer (every head, every position, every pair of one token
length) run as one batch; the metric reads the final norm and the unembedding at its one
position only. A patch that puts back the value already there (a position before the first
token where the prompts differ, in a causal model) changes nothing and is not run.

Every intervention goes through the engine's named points (mha_viz.engine.interventions).

The metric is any function of the logits at the read position (metrics: the built-in kinds
are ready-made ones); components are named as run_with_cache names its points (z, q, k, v,
pattern, resid_pre, attn_out, mlp_out, ...), as TransformerLens names its hooks, or by
patching's own names ("head" is z).

run_with_interventions applies a set of entries (Intervention: a component at a layer, a head
or a position, and what replaces it: the other prompt's activation, a mean or a resampled
activation over reference prompts, zero or a value) together in one run and reads the metric.

The package: metrics, interventions, common (results, pairs, batches, the metric), activation, attribution,
paths, noise (an effect too small to tell from none).
"""

from .activation import activation_patching
from .attribution import attribution_patching, estimate_error
from .common import (CAPTURE_BYTES, COMPONENT_ALIASES, COMPONENT_HELP, COMPONENTS, DEGENERATE,
                     DIRECTIONS, PairBatch, PatchingResult, component_name, metric_of,
                     prepare_pairs, rows_per_batch, strongest_components)
from .interventions import (REPLACEMENTS, Intervention, InterventionRun, heads_replaced,
                            run_with_interventions)
from .metrics import (BUILT_IN_METRICS, Metric, as_metric, kl_divergence, logit, logit_diff,
                      logprob, probability)
from .noise import NOISE_FLOOR, noise_level, within_noise
from .paths import path_patching

__all__ = ["COMPONENTS", "DIRECTIONS", "PatchingResult", "activation_patching",
           "attribution_patching", "path_patching", "prepare_pairs", "strongest_components",
           "estimate_error", "metric_of", "COMPONENT_HELP", "CAPTURE_BYTES", "DEGENERATE",
           "PairBatch", "rows_per_batch", "COMPONENT_ALIASES", "component_name", "Metric",
           "as_metric", "BUILT_IN_METRICS", "logit_diff", "logit", "logprob", "probability",
           "kl_divergence", "Intervention", "InterventionRun", "REPLACEMENTS",
           "heads_replaced", "run_with_interventions", "NOISE_FLOOR", "noise_level",
           "within_noise"]
