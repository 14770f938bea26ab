"""The continuation a page shows (issue 49, item 3 in the app): where the model's writing
starts in the text traced again, the trace whose written positions carry a mark, and the
induction probe read as what heads move (issue 49, item 2 on Head roles), each against a
reference written here: the token ids the generation itself wrote, and Olsson et al.'s
score over value-weighted maps computed by a plain loop from transformers' own GPT-2."""

from __future__ import annotations

import numpy as np
import pytest

from mha_viz import analysis as A
from mha_viz.models.generation import mark_written, written_from
from tests.support.value_weighted import gpt2_parts, hf_run, loop_value_weighted

PROMPT = "the cat sat on the mat and the dog"
MARK = "✎"


def test_written_from_counts_the_prompts_own_leading_ids():
    assert written_from([5, 6, 7], [5, 6, 7, 8, 9]) == 3
    assert written_from([5, 6, 7], [5, 6, 70, 9]) == 2  # the last prompt token joined
    assert written_from([], [1, 2]) == 0
    assert written_from([5, 6], [5, 6]) == 2


@pytest.mark.parametrize("maps", ["full", "on_demand"])
def test_the_written_positions_carry_the_mark(gpt2_model, maps):
    """The whole text (prompt + what generate wrote) traced again: the positions past the
    prompt's ids, and only those, begin with the mark; the maps are the same arrays."""
    written = gpt2_model.generate(PROMPT, max_new_tokens=6, trace=False)
    trace = gpt2_model.trace(PROMPT + written.text, maps=maps)
    n_prompt = len(gpt2_model.encode(PROMPT).input_ids)
    assert trace.token_ids[:n_prompt] == written.prompt_ids  # the reference: its own ids
    marked = mark_written(trace, written.prompt_ids, MARK)
    expected = [t if i < n_prompt else MARK + t for i, t in enumerate(trace.display_tokens)]
    assert marked.display_tokens == expected
    assert sum(t.startswith(MARK) for t in marked.display_tokens) == trace.n_tokens - n_prompt > 0
    assert marked.extra["prompt_length"] == n_prompt
    assert marked.on_demand == trace.on_demand
    if maps == "full":
        assert marked.attentions is trace.attentions  # nothing copied
    else:
        assert marked.maps_source is trace.maps_source
    np.testing.assert_array_equal(marked.head_map(1, 0), trace.head_map(1, 0))
    assert trace.display_tokens[-1][:1] != MARK  # the cached trace itself is untouched
    assert "prompt_length" not in trace.extra
    # another input to stored results than the same text typed in
    assert marked.identity() != trace.identity()


def test_the_induction_probe_reads_what_heads_move(gpt2_model, gpt2_folder):
    """weights="value": Olsson et al.'s score over the normalized value-weighted maps of each
    probe sequence, the maps from a loop over transformers' own GPT-2 (weights and inputs)."""
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(gpt2_folder, attn_implementation="eager").eval()
    s = 6
    probe = A.induction_probe(gpt2_model, seq_len=s, n_seqs=2, seed=3, weights="value")
    assert probe.trace.value_weighted
    per_sequence = []
    for ids in probe.ids:
        alpha, x, layers = hf_run(hf, gpt2_parts, list(ids))
        maps = loop_value_weighted(alpha, x, layers)
        maps /= maps.sum(-1, keepdims=True)
        start = probe.offset
        picked = [maps[..., start + s + k, start + k + 1] for k in range(s - 1)]
        per_sequence.append(np.mean(picked, axis=0))
    expected = np.mean(per_sequence, axis=0)
    np.testing.assert_allclose(probe.scores(), expected, rtol=1e-4, atol=1e-6)
    weights = A.induction_probe(gpt2_model, seq_len=s, n_seqs=2, seed=3)
    assert not weights.trace.value_weighted
    assert np.abs(weights.scores() - expected).max() > 1e-3  # the switch changes the numbers
