"""Heads at long range (docs/analyses.md, "Heads at long range"): which heads need the whole
context. Retrieval heads (Wu et al. 2024) and the needles in a haystack they are found with
(needles, retrieval), masking them at long range against random heads (masking), attention
sinks (Gu et al. 2025; sinks) and what a sink + window costs, for every head at once and per
head, with the key/value cache it saves (StreamingLLM, DuoAttention; windows). The sink +
window restriction itself is the engine's exact mask (engine/windows.py)."""

from .sinks import SINK_EPSILON, SinkScores, SinkStats, repeated_ids, sink_scores

__all__ = ["SINK_EPSILON", "SinkScores", "SinkStats", "repeated_ids", "sink_scores"]
