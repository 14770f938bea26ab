"""Head-role scores (docs/analyses.md, "Where attention goes"; Olsson et al. 2022,
TransformerLens head_detector, the ARENA course).

All score functions take attentions [..., T, T] (normally [L, H, T, T]) or an AttentionTrace,
or a list of them (several texts), and return the leading shape ([L, H]); with a list, the
mean over inputs. Layers and heads are numbered from 0. Nothing here assumes a causal map.

Options shared by the scores computed on a text (previous, next, duplicate token and the
shifted-duplicate induction score):

- ``exclude``: bool [T], True = leave that position out (one mask per input, or one for
  all); ``drop_special=True`` leaves out the trace's special tokens (trace.special_mask:
  [CLS], [SEP], <|endoftext|>, ...). Left-out positions are removed as queries and as keys
  and every remaining row is renormalized to sum to 1 (special.drop_positions); "previous"
  and "next" then mean the previous / next position that is kept. A row whose whole mass
  was on left-out keys stays all 0 (it counts 0 towards the score).
- every input, maps held whole or rebuilt on demand, is read a block of query rows at a
  time (mha_viz.maps.streaming), the left-out positions removed from each block as
  drop_positions removes them from the whole maps.
- ``normalization``: "ours" (the default) averages over the query rows that have the key
  in question; "transformer_lens" divides the summed mass by all T query rows, as
  TransformerLens's ``detect_head`` does with ``error_measure="mul"`` (score =
  sum(A * P) / sum(A), P the 0/1 detection pattern, sum(A) = T since rows sum to 1). Each
  function's docstring gives the exact relation. (TransformerLens's own ``exclude_bos``
  is another operation: it zeroes column 0 and divides by the mass left, without
  renormalizing rows or removing the BOS row.)

The package: scores (on a text), probe (repeated random tokens), naming (every score at
once, and each head's strongest role).
"""

from .naming import (BROAD_THRESHOLD, FOCUSED_THRESHOLD, PATTERN_ROLES, ROLE_KEYS, ROLE_THRESHOLD,
                     SINK_ROLES, TEXT_PROBE, HeadRole, role_scores, role_support, roles_of,
                     strongest_roles)
from .probe import (InductionProbe, induction_probe, induction_scores, longest_probe,
                    probe_description, repeated_random_tokens)
from .scores import (NORMALIZATIONS, TEXT_SCORE_KEYS, TextScores, duplicate_token_scores,
                     induction_pattern_scores, next_token_scores, previous_token_scores,
                     shifted_duplicate_scores)

__all__ = ["previous_token_scores", "next_token_scores", "duplicate_token_scores",
           "induction_pattern_scores", "induction_scores", "shifted_duplicate_scores",
           "repeated_random_tokens", "induction_probe", "InductionProbe", "probe_description",
           "longest_probe",
           "role_scores", "role_support", "strongest_roles", "HeadRole", "NORMALIZATIONS",
           "TextScores", "TEXT_SCORE_KEYS", "roles_of",
           "ROLE_KEYS", "PATTERN_ROLES", "SINK_ROLES", "ROLE_THRESHOLD", "BROAD_THRESHOLD",
           "FOCUSED_THRESHOLD", "TEXT_PROBE"]
