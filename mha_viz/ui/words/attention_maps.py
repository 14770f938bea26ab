"""The words of the Attention maps page: what it shows and how to read a map (weights, or what
heads move), the names and headings of a head or a layer's mean, the aggregates over heads
and layers, the first token both ways, the strongest heads of a link, and cross-attention's
notes. (What states a size of the page, a window's or the grid's, is with those sizes, in the
view's sizes module.)"""

from __future__ import annotations

import numpy as np

from ... import plots
from ...analysis.heads import head_name, rank_heads
from ..settings import md_escape

INTRO = ("Each head spreads every token's attention (a row, the *query*) over the tokens it can "
         "see (the columns, the *keys*). Pick a head in the grid or with the selectors, then "
         "read its map as a heatmap or as lines between tokens.")
LAYER_MEAN_HELP = ("Show the average of every head in the layer (what the layer as a whole "
                   "reads from) instead of one head.")
GRID = ("One thumbnail per head: rows are layers (L0 at the top), columns are heads. Click a "
        "thumbnail to open that head below. Each thumbnail has its own colour scale, so a "
        "sharp head and a broad head are both visible.")
TOKEN_PAIR = ("Pick a query token (the one that reads) and a key token (the one read from): "
              "each cell is the weight that head gives from the query to the key, A[query, "
              "key], for every layer and head at once. The coreference example asks this of "
              "'it' and 'animal'.")
CAUSAL_LINK = ("In a causal model a token cannot read a later one: every weight is 0. Pick a "
               "key at or before the query.")
SINK_SECTION = "The first token both ways: much weight, little moved"
SINK_TITLES = ("First token's share of the weights", "First token's share of what moves")
CROSS = ("Cross-attention: the decoder's queries read keys and values made from the encoder's "
         "output, so each row is a target position and each column a source token; every row "
         "sums to 1. No causal mask: a target position may read the whole source.")
CROSS_ROWS = {"writes": "the target token each position writes",
              "reads": "the decoder's input at that position"}
CROSS_GRID = ("One thumbnail per decoder layer (rows) and head (columns); click one to open it "
              "below. Each thumbnail has its own colour scale.")
ALIGNMENT = ("In a trained translation model the last layers' mean tends to put each target "
             "word's weight on the source word it translates (Bahdanau et al. 2015): the ○ "
             "trace the word alignment, crossing where the two languages order words "
             "differently.")


def value_name(moves: bool) -> str:
    """What a cell of a map holds: a weight, or a share of what the head moves."""
    return "share moved" if moves else "weight"


def map_title(name: str, moves: bool) -> str:
    return f"{name}: what moves from each key" if moves else f"{name}: who attends to whom"


def map_caption(moves: bool, layer_mean: bool, n_tokens: int) -> str:
    """How to read one head's map, for a desk and a touch screen alike (no hovering), and
    what a click on a cell does (a map drawn cell by cell up to plots.can_pick's size)."""
    reading = ("Row = query (the token that receives), column = key (the token sending): "
               "each row is what the head moves into the query from each key, the weight "
               "times the size of the key's vector, as shares that sum to 1."
               if moves else
               "Row = query (the token that reads), column = key (the token read from).")
    if layer_mean:
        return reading + " Click a cell for its value."
    if plots.can_pick(n_tokens, n_tokens):
        return reading + " Click a cell for its value and why the head attends there."
    return reading + (" Click a cell for its value; pick a query and a key in the section "
                      "on why below to see why the head attends there.")


def lines_caption(moves: bool) -> str:
    return ("The same shares as lines from each query (left) to each key (right); thicker "
            "and darker = more moved." if moves else
            "The same weights as lines from each query (left) to each key (right); thicker "
            "and darker = more attention.")


def sink_text(first_token: str, shares) -> str:
    """The first token's share of the weights and of what moves (analysis.sink_shares), and
    what the difference means on this model and text."""
    took, sent = shares.weights_mean, shares.moved_mean
    said = (f"Over every head and query, the first token ('{md_escape(first_token)}') takes "
            f"**{took:.2f}** of the attention weights and **{sent:.2f}** of what the heads "
            f"move. ")
    if sent < 0.8 * took:
        return said + ("A large weight is not a large message: heads park their attention on "
                       "the first token when nothing else fits, and it sends them back small "
                       "vectors, so little of it reaches the queries (Kobayashi et al. 2020, "
                       "*Attention is Not Only a Weight*). Read a map of weights as where a "
                       "head looks, the shares of what moves as what it carries.")
    if sent > 1.25 * took:
        return said + ("Here the first token sends larger vectors than the others: it "
                       "carries more than its weights say.")
    return said + ("Here the two agree: on this model and text the first token is no sink "
                   "that takes weight and sends little (Kobayashi et al. 2020 found such "
                   "sinks in BERT and GPT-2).")


def shown_name(layer: int, head: int, layer_mean: bool) -> str:
    """The name of what the page shows: a head ('L3.H7') or its layer's head mean."""
    return f"L{layer} head mean" if layer_mean else head_name(layer, head)


def head_subheader(layer: int, head: int, n_head: int, layer_mean: bool,
                   whole_text: bool) -> str:
    name = shown_name(layer, head, layer_mean)
    return ((f"The mean of layer {layer}'s {n_head} heads" if layer_mean
             else f"One head: {name} (layer {layer}, head {head})")
            + (": the whole text" if whole_text else ""))


def aggregate_labels(layer: int) -> dict[str, str]:
    """The two aggregates' names in the choice between them."""
    through = f"layer {layer}" if layer == 0 else f"layers 0–{layer}"
    return {"mean": f"Head mean of layer {layer}",
            "rollout": f"Attention rollout through {through}"}


def aggregate_what(kind: str, n_layer: int) -> str:
    """What an aggregate holds, for the message that refuses a too long input."""
    if kind == "mean":
        return "The head mean of a layer"
    return (f"Attention rollout (every layer's head mean and their products, {n_layer} "
            f"whole maps each)")


def aggregate_text(kind: str, layer: int, n_layer: int, hidden: bool) -> tuple[str, str]:
    """(the aggregate's name, what it is) for the head mean or the rollout to layer."""
    if kind == "mean":
        name = f"L{layer} head mean"
        explanation = ("The average of the layer's heads: what the layer as a whole reads "
                       "from. Rows still sum to 1.")
    else:
        name = f"rollout to L{layer}"
        explanation = ("Attention rollout (Abnar & Zuidema 2020): per layer, take the head "
                       "mean plus the residual connection (0.5·A + 0.5·I, rows renormalized) "
                       "and multiply the layers together. Row i estimates how much of token "
                       "i at "
                       f"the output of layer {layer} comes from each input token. Pick the "
                       f"last layer (L{n_layer - 1}) for the full rollout.")
    if hidden:
        explanation += (" Computed on every token; then the hidden tokens were removed and "
                        "rows renormalized.")
    return name, explanation


def strongest_caption(link: np.ndarray, note: str, top: int = 3) -> str:
    """The heads that weigh a query-key link most, with their weights."""
    return "Strongest: " + ", ".join(
        f"{head_name(layer, head)} {link[layer, head]:.0%}"
        for layer, head in rank_heads(link)[:top]) + note + "."


def layers_through(layers: list[int]) -> str:
    """'L3' for one layer, 'L3–L5' for several: a mean's title and file name."""
    return f"L{layers[0]}" + (f"–L{layers[-1]}" if len(layers) > 1 else "")


def image_strips(patch_width: int) -> str:
    """How an image reader's encoder read the image, under its cross-attention."""
    return (f"The encoder read the image in vertical strips {patch_width} pixels wide (a linear "
            f"patch embedding, as ViT does): its positions are the strips, left to right. As "
            f"the decoder writes each character, its cross-attention should fall on the "
            f"strips where that character is drawn. The source columns below are the strips, "
            f"labelled by the character drawn on most of each (· = background).")
