"""Layer 6, plots: Plotly figures from arrays and labels, no computing, and their layout for
the screen they are shown on (fit).

May import: core, maps, analysis.

Plotly figure builders: numpy arrays in, ``plotly.graph_objects.Figure`` out.

No Streamlit here, so every figure also works in a notebook. Conventions shared by all
builders:

- layers and heads count from 0; a head is named "L5.H1";
- token axes use integer positions with tickvals/ticktext, never the token strings as
  categories, because Plotly merges equal categories ("the" twice would become one row);
- every string that reaches the browser goes through ``_esc``: Plotly reads text as a small
  HTML dialect and typesets ``$...$`` with MathJax (fetched from a CDN), so '$', '<', '>'
  and '&' are written as entities, which Plotly turns back into the plain characters.

One module per view: ``maps`` (one head, the all-heads grid, heads side by side, the line
view), ``layer_head`` (layer x head heatmaps, per-query values, token-class mass),
``similarity``, ``pruning``, ``matrices`` (inside one head), ``predictions``,
``circuits`` (patching effects, attribution against exact, the circuit graph), ``cross``
(an encoder-decoder's target x source cross-attention), ``training`` (curves and every
head's score over training steps), ``why`` (a score's parts by source), ``long_range`` (the
needle grid by length x depth, labelled bars), ``features`` (a dictionary's features at a
head: where one fires, its sources, a head's strongest), ``tokens`` (a text as a strip of
coloured tokens), ``picking`` (maps whose cells a click picks); ``_style``
holds the template, colours and helpers they share.
"""

from ..analysis.heads import head_name
from ._style import (DIVERGING_SCALE, FIGURE_CONFIG, GRID_SCALE, HIGHLIGHT, MASK_GREY, WEIGHT_SCALE,
                     columns_at_bottom)
from .circuits import (attribution_scatter, circuit_graph, circuit_point_to_node, node_to_head,
                       patching_heatmap, position_patching_map)
from .cross import cross_attention_heatmap, cross_attention_over_image
from .features import feature_sources_map, feature_strip, head_features_bars, signed_bars
from .layer_head import class_mass_by_layer, layer_head_heatmap, per_query_line
from .lines import line_view
from .long_range import labelled_bars, needle_grid_figure
from .maps import grid_point_to_head, head_heatmap, head_heatmap_row, model_view_grid
from .matrices import kv_cache_figure, matrix_figure, tensor_figure
from .picking import camera_only, can_pick, cell_of_point, index_of_point
from .predictions import strip_point_to_token, token_loss_strip
from .pruning import kept_heads_figure, pruning_curve_figure
from .similarity import distance_heatmap, head_scatter
from .training import composition_over_steps, head_scores_over_steps, training_curves
from .why import source_bars, source_matrix

__all__ = [
    "training_curves", "head_scores_over_steps", "composition_over_steps",
    "FIGURE_CONFIG",
    "camera_only",
    "can_pick",
    "cell_of_point",
    "index_of_point",
    "feature_strip", "feature_sources_map", "head_features_bars", "signed_bars",
    "source_bars", "source_matrix",
    "DIVERGING_SCALE",
    "GRID_SCALE",
    "HIGHLIGHT",
    "MASK_GREY",
    "WEIGHT_SCALE",
    "attribution_scatter",
    "cross_attention_heatmap",
    "cross_attention_over_image",
    "circuit_graph",
    "circuit_point_to_node",
    "class_mass_by_layer",
    "distance_heatmap",
    "grid_point_to_head",
    "head_heatmap",
    "head_heatmap_row",
    "head_name",
    "head_scatter",
    "layer_head_heatmap",
    "line_view",
    "labelled_bars",
    "needle_grid_figure",
    "matrix_figure",
    "model_view_grid",
    "node_to_head",
    "patching_heatmap",
    "per_query_line",
    "position_patching_map",
    "pruning_curve_figure",
    "kept_heads_figure",
    "tensor_figure", "kv_cache_figure",
    "columns_at_bottom",
    "token_loss_strip",
    "strip_point_to_token",
]
