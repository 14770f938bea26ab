"""Why a head attends where it does: its scores split into the sources that made them
(scores.py: score attribution, on the layer's input split by source in stream.py) and how
much of a head's scores and output pass through each earlier head (composition.py: on a
text, and in the weights as Elhage et al. 2021 define it; training.py: at every checkpoint
of a training run; induction.py: the textbook case found on a text, an induction head and
the previous-token head it reads).
"""

from .induction import InductionExample, induction_example, key_side_writers
from .composition import (CompositionScores, composition_scores, random_baseline,
                          text_composition, weight_composition)
from .scores import ScoreAttribution, ScoreParts, score_attribution
from .stream import why_no_split
from .training import CompositionOverTraining, composition_over_training

__all__ = ["InductionExample", "induction_example", "key_side_writers", "CompositionOverTraining", "CompositionScores", "ScoreAttribution",
           "ScoreParts", "composition_over_training", "composition_scores", "random_baseline",
           "score_attribution", "text_composition", "weight_composition", "why_no_split"]
