"""A dictionary's features at a head (docs/analyses.md, "Features at the head"): which heads
write a hook_z dictionary's features and from which source tokens (heads.py: Kissane et al.
2024), a head's score split into query-feature x key-feature terms of a residual dictionary
(scores.py: Kamath et al. 2025, on score attribution's frozen stream), a feature's dashboard
on a text (dashboard.py), and training a dictionary on a model's activations (training.py,
read from the engine by activations.py).
"""

from .dashboard import (FeatureFiring, HeadFeatures, OutputTokens, feature_firing,
                        feature_output_tokens, head_features)
from .heads import FeatureSources, feature_from_source, feature_heads, feature_sources
from .scores import (FeaturePairs, FeatureScoreAttribution, feature_index, feature_name,
                     feature_score_attribution)
from .training import (Quality, TrainedDictionary, TrainProgress, dictionary_quality, train_sae,
                       train_saes)

__all__ = ["FeatureFiring", "HeadFeatures", "OutputTokens", "feature_firing",
           "feature_output_tokens", "head_features", "FeaturePairs", "FeatureScoreAttribution",
           "feature_index", "feature_name", "feature_score_attribution",
           "FeatureSources", "feature_from_source", "feature_heads", "feature_sources", "Quality", "TrainedDictionary",
           "TrainProgress", "dictionary_quality", "train_sae", "train_saes"]
