"""Heads at long range (docs/analyses.md, "Heads at long range"): which heads need the whole
context. Retrieval heads (Wu et al. 2024) and the needles in a haystack they are found with
(needles, retrieval), masking them at long range against random heads (masking), attention
sinks (Gu et al. 2025; sinks) and what a sink + window costs, for every head at once and per
head, with the key/value cache it saves (StreamingLLM, DuoAttention; windows). The sink +
window restriction itself is the engine's exact mask (engine/windows.py)."""

from .masking import MaskingResult, retrieval_masking
from .needles import (NeedleCase, NeedleGrid, haystack_ids, haystack_text, needle_cases,
                      needle_depths, needle_length_options, needle_lengths, shortest_prompt,
                      text_lengths)
from .retrieval import (RETRIEVAL_THRESHOLD, NeedleStudy, RetrievalCounts, copy_accuracy,
                        needle_grid, needle_study, retrieval_counts, retrieval_scores)
from .sinks import SINK_EPSILON, SinkScores, SinkStats, repeated_ids, sink_scores
from .windows import (KVSaving, WindowCosts, WindowLosses, kv_cache_saved, streaming_heads,
                      window_costs, window_losses)

__all__ = ["MaskingResult", "retrieval_masking", "NeedleCase", "NeedleGrid", "haystack_ids",
           "haystack_text", "needle_cases", "needle_depths", "needle_length_options",
           "needle_lengths", "shortest_prompt", "text_lengths", "RETRIEVAL_THRESHOLD", "NeedleStudy", "RetrievalCounts",
           "copy_accuracy", "needle_grid", "needle_study", "retrieval_counts",
           "retrieval_scores", "SINK_EPSILON", "SinkScores", "SinkStats", "repeated_ids",
           "sink_scores", "KVSaving", "WindowCosts", "WindowLosses", "kv_cache_saved",
           "streaming_heads", "window_costs", "window_losses"]
