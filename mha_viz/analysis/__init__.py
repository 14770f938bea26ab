"""Layer 4, analysis: numbers from traces and models. Statistics over maps (entropy, distance,
similarity, roles, rollout), what heads move (value_weighted: value-weighted maps and the
residual's share), interventions that run the model (pruning, attribution,
patching, circuits), the prompt sets they run on (prompts), one head's steps for the
classroom (one_head/), why a head attends where it does (why/: its scores split by
source, composition between heads), a dictionary's features at a head (features/: which
heads write them and from where, a score split into feature pairs, training a dictionary)
and heads at long range (long_range/: retrieval heads, needles, sinks, what a sink + window
costs). Each quantity is defined in docs/analyses.md.

May import: core, engine, maps, models, dictionaries.

Pure analyses over attention arrays: numpy in, numpy out (no Streamlit, no plotting).

Definitions follow docs/analyses.md; layers and heads are numbered from 0. Most functions take
attentions [L, H, T, T] (rows are queries, columns keys, rows sum to 1), an AttentionTrace, or
a list of them (several texts: the mean over them).

Every statistic reads its input a bounded block of query rows at a time, whether the trace
holds its maps or rebuilds them on demand (a long input): entropy, row_entropy,
token_class_mass, the text role scores, role_scores and role_support as accumulators over
row blocks (mha_viz.maps.streaming, docs/streaming.md), head_distances from the compared rows
gathered, head_mean / head_max / rollout a block of rows at a time. Memory: O(T) per head
plus one block. The probes (induction_pattern_scores) and drop_positions read whole maps of
short inputs.
"""

from .alignment import alignment_agreement, mean_cross_attention, strongest_source
from .attribution import (Attribution, attribute_run, attribution_parts, direct_logit_attribution,
                          direct_logit_attribution_seq2seq)
from .circuit_tests import CircuitTest, circuit_heads, circuit_test
from .circuits import Circuit, Edge, EdgeScores, circuit, edge_attribution_patching
from .distance import mean_attention_distance, uniform_attention_distance
from .dynamics import (CURVES, HEAD_ARRAYS, ProbeInduction, TrainingDynamics,
                       checkpoint_statistics, probe_induction, training_dynamics)
from .encoder_decoder_ablation import (ablation_effects_seq2seq, gradient_importance_seq2seq,
                                       head_shapes, importance_agreement, kept_fractions,
                                       pair_score, pruning_curve_seq2seq, total_heads)
from .encoder_decoder_patching import Seq2SeqPatching, activation_patching_seq2seq, first_divergence
from .entropy import (entropy, entropy_scales, head_row_entropy, max_row_entropy, mean_over_rows,
                      row_entropy, uniform_entropy, visible_keys)
from .head_outputs import closest_across, head_outputs_seq2seq, output_similarity, outputs_of_kinds
from .heads import (attention_change, head_at, head_index, head_name, head_names,
                    layers_and_heads, mask_to_names, names_to_mask, nearest_heads,
                    normalize_layers, opening_view, parse_head_name, positions_in_order,
                    rank_heads)
from .long_range import (RETRIEVAL_THRESHOLD, SINK_EPSILON, KVSaving, MaskingResult, NeedleCase,
                         NeedleGrid, NeedleStudy, RetrievalCounts, SinkScores, SinkStats,
                         WindowCosts, WindowLosses, copy_accuracy, haystack_ids, kv_cache_saved,
                         needle_cases, needle_depths, needle_grid, needle_length_options,
                         needle_lengths, shortest_prompt, text_lengths,
                         needle_study, retrieval_counts, retrieval_masking, retrieval_scores,
                         sink_scores, streaming_heads, window_costs, window_losses)
from .map_cosine import map_cosine_distances, map_cosine_similarity
from .overview import thumbnails
from .patching import (COMPONENTS, Intervention, InterventionRun, Metric, PatchingResult,
                       activation_patching, attribution_patching, kl_divergence, path_patching,
                       run_with_interventions, strongest_components)
from .pruning import (PruningCurve, ablation_effects, embedding_jacobian_norms, gradient_importance,
                      pruning_curve)
from .roles import (BROAD_THRESHOLD, FOCUSED_THRESHOLD, NORMALIZATIONS, PATTERN_ROLES, ROLE_KEYS,
                    ROLE_THRESHOLD, SINK_ROLES, HeadRole, InductionProbe, duplicate_token_scores,
                    induction_pattern_scores, induction_probe, induction_scores, longest_probe,
                    next_token_scores, previous_token_scores, probe_description,
                    repeated_random_tokens, role_scores, role_support, shifted_duplicate_scores,
                    strongest_roles)
from .rollout import aggregate_bytes_per_token, head_max, head_mean, rollout
from .similarity import (cluster_linkage, cluster_order, head_distances, head_labels, mds_2d,
                         rows_within_work)
from .special import drop_positions, kept_positions, shown_trace, special_keep_mask
from .token_classes import (CLS_CLASS, SEP_CLASS, TOKEN_CLASSES, entropy_and_mass,
                            is_punctuation, strip_token_markers, token_class_masks,
                            token_class_mass, window_mass)
from .value_weighted import (ContextMixing, SinkShares, context_mixing, sink_shares, value_norms,
                             value_weighted_maps, why_no_mixing)
from .why import (CompositionOverTraining, CompositionScores, InductionExample,
                  ScoreAttribution, ScoreParts, composition_over_training, composition_scores,
                  induction_example, score_attribution,
                  text_composition, weight_composition, why_no_split)
from .features import (FeatureFiring, FeaturePairs, FeatureScoreAttribution, FeatureSources,
                       HeadFeatures, OutputTokens, feature_firing, feature_from_source,
                       feature_heads, feature_output_tokens, feature_score_attribution,
                       feature_sources, head_features, train_sae, train_saes)

__all__ = [
    "training_dynamics", "checkpoint_statistics", "TrainingDynamics", "HEAD_ARRAYS", "CURVES",
    "probe_induction", "ProbeInduction",
    "mean_cross_attention", "strongest_source", "alignment_agreement",
    "ablation_effects_seq2seq",
    "gradient_importance_seq2seq",
    "kept_fractions",
    "importance_agreement",
    "pair_score",
    "head_outputs_seq2seq",
    "activation_patching_seq2seq",
    "Seq2SeqPatching",
    "first_divergence",
    "head_shapes",
    "total_heads",
    "output_similarity",
    "outputs_of_kinds",
    "closest_across",
    "pruning_curve_seq2seq",
    "mean_attention_distance", "uniform_attention_distance", "map_cosine_similarity",
    "map_cosine_distances",
    "row_entropy", "head_row_entropy", "entropy", "entropy_scales", "uniform_entropy",
    "max_row_entropy",
    "visible_keys",
    "mean_over_rows", "window_mass", "positions_in_order",
    "token_class_mass", "token_class_masks", "TOKEN_CLASSES", "CLS_CLASS", "SEP_CLASS",
    "is_punctuation",
    "strip_token_markers", "entropy_and_mass",
    "previous_token_scores", "next_token_scores", "duplicate_token_scores",
    "induction_pattern_scores", "induction_scores", "shifted_duplicate_scores",
    "repeated_random_tokens", "induction_probe", "InductionProbe", "probe_description",
    "longest_probe",
    "role_scores", "role_support", "strongest_roles", "HeadRole", "NORMALIZATIONS", "ROLE_KEYS",
    "PATTERN_ROLES", "SINK_ROLES", "ROLE_THRESHOLD", "BROAD_THRESHOLD", "FOCUSED_THRESHOLD",
    "head_distances", "cluster_order", "cluster_linkage", "mds_2d", "head_labels",
    "rows_within_work",
    "rollout", "head_mean", "head_max", "thumbnails", "aggregate_bytes_per_token",
    "drop_positions", "special_keep_mask", "shown_trace", "kept_positions",
    "ablation_effects", "gradient_importance", "pruning_curve", "PruningCurve",
    "embedding_jacobian_norms",
    "head_name", "head_names", "head_index", "head_at", "layers_and_heads", "names_to_mask",
    "mask_to_names", "attention_change",
    "opening_view", "direct_logit_attribution", "direct_logit_attribution_seq2seq",
    "Attribution", "attribute_run", "attribution_parts", "parse_head_name", "rank_heads",
    "nearest_heads", "normalize_layers",
    "activation_patching", "attribution_patching", "path_patching", "PatchingResult",
    "COMPONENTS", "circuit", "edge_attribution_patching", "Circuit", "Edge", "EdgeScores",
    "strongest_components", "Metric", "kl_divergence", "Intervention", "InterventionRun",
    "run_with_interventions", "circuit_test", "CircuitTest", "circuit_heads",
    "score_attribution", "ScoreAttribution", "ScoreParts", "induction_example", "InductionExample", "composition_scores", "CompositionScores",
    "text_composition", "weight_composition", "composition_over_training",
    "CompositionOverTraining", "why_no_split",
    "value_weighted_maps", "value_norms", "context_mixing", "ContextMixing", "why_no_mixing",
    "sink_shares", "SinkShares", "FeatureScoreAttribution", "FeatureSources", "feature_heads",
    "feature_from_source", "feature_score_attribution", "feature_sources", "train_sae", "train_saes", "FeatureFiring",
    "OutputTokens", "feature_firing", "feature_output_tokens", "FeaturePairs", "HeadFeatures",
    "head_features",
    "retrieval_scores", "retrieval_counts", "RetrievalCounts", "RETRIEVAL_THRESHOLD",
    "needle_cases", "NeedleCase", "needle_grid", "NeedleGrid", "needle_study", "NeedleStudy",
    "copy_accuracy", "retrieval_masking", "MaskingResult", "sink_scores", "SinkScores",
    "SinkStats", "SINK_EPSILON", "window_costs", "WindowCosts", "window_losses",
    "WindowLosses", "kv_cache_saved", "KVSaving", "haystack_ids", "needle_depths",
    "needle_lengths", "streaming_heads", "needle_length_options", "shortest_prompt",
    "text_lengths",
]
