"""The words of head similarity: what each distance between heads is called, at length (as a
reader sees it on the Head similarity page) and short (a table's column)."""

DISTANCE_KINDS = {
    "js": "Jensen-Shannon divergence (nats, 0 to ln 2)",
    "js_distance": "Jensen-Shannon distance (√ of the divergence, 0 to √ln 2 ≈ 0.833)",
    "cosine": "cosine distance, 1 − cos of the two maps read as long vectors (0 to 1)",
}
DISTANCE_SHORT = {"js": "JS divergence", "js_distance": "JS distance",
                  "cosine": "cosine distance"}

INTRO = ("Two heads are alike when they spread each token's attention the same way. The "
         "distance between heads a and b is the Jensen-Shannon (JS) divergence between their "
         "rows, averaged over the query tokens: 0 for identical maps, at most ln 2 ≈ 0.693. "
         "Clustering and a 2-D map then show which heads form families.")
DISTANCE_CHOICES = {"js": "JS divergence (nats)", "js_distance": "JS distance (√ divergence)",
                    "cosine": "cosine (1 − cos)"}
DISTANCE_HELP = ("JS divergence is what Clark et al. (2019) use. Its square root, the JS "
                 "distance, is a true metric (it obeys the triangle inequality), which suits "
                 "the 2-D map better. Cosine: head diversity as the attention texts define it, "
                 "the cosine similarity of two maps read as long vectors.")
ORDER_HELP = ("Clustering (average linkage) puts similar heads next to each other; the "
              "coloured strips then show each head's layer.")
COMPARE = {"maps": "where they attend (their maps)", "outputs": "what they write (their outputs)"}
COMPARE_HELP = ("Maps compare heads of one kind. Outputs compare the decoder's self-attention "
                "and cross-attention heads together: both write into the decoder's stream.")
CLUSTERED = ("Reordered by average-linkage clustering: blocks of dark cells along the diagonal "
             "are families of heads that attend alike. The coloured strips give each head's "
             "layer (same colours as the map on the right).")
LAYER_ORDER = "Heads in layer order (L0.H0, L0.H1, …); white lines mark the layer boundaries."
MDS = ("Metric MDS places the heads in 2-D so that distances on the map match the matrix as "
       "well as possible. Colour = layer; a point's label names its head; click or tap a head "
       "to choose it below. The chosen head and its nearest heads are ringed.")
PUBLISHED = (
    "- **Clark, Khandelwal, Levy & Manning 2019** (*What Does BERT Look At?*) embedded "
    "BERT-base's 144 heads this way (JS divergence, multidimensional scaling, averaged "
    "over many inputs): heads of the same layer tend to sit together, and heads with "
    "one behaviour form clusters: broad heads, heads attending to the next or the "
    "previous token, to [CLS], to [SEP]. Over half of the attention in BERT-base's "
    "layers 6–10 goes to [SEP]; they count layers from 1, so that is **L5–L9** here.\n"
    "- **Olsson et al. 2022** (*In-context Learning and Induction Heads*): on repeated "
    "text, induction heads attend from a token to the one that followed its previous "
    "occurrence. In GPT-2 small the heads found by the repeated-random-token probe are "
    "L5.H1, L5.H5, L6.H9, L7.H2 and L7.H10 (Wang et al. 2023; ARENA), counted from 0. "
    "Try the *Repeated text* example with `gpt2`: they should sit close together.\n"
    "- This page uses one input, so expect more noise than an average over a corpus; a "
    "label such as *induction head* depends on the probe text that revealed it.")
SEPARATE_MAPS = (" A self-attention row spreads over the target and a cross-attention row over "
                 "the source, so their maps cannot be compared; their outputs can.")
CLOSEST_ACROSS = ("**The most alike across kinds**: a decoder self-attention head and a "
                  "cross-attention head that write in the same direction")


def rows_compared(kind: str, n: int, max_rows: int | None, wanted_rows: int | None,
                  row_limit: int, total_heads: int) -> str:
    """Which distance the figures show, and over which query rows."""
    if max_rows is None:
        rows_text = f"all {n} query rows."
    elif max_rows == wanted_rows:
        rows_text = (f"{row_limit} evenly spaced query rows out of {n} (first and last "
                     f"included): an approximation that keeps long inputs fast. Switch on "
                     f"*Compare every query row* for the exact value.")
    else:
        rows_text = (f"{max_rows} evenly spaced query rows out of {n}: comparing all "
                     f"{total_heads:,} heads pair by pair on more rows would take too long on "
                     f"this server.")
    return (f"**The figures show the {DISTANCE_KINDS[kind]}**, "
            + ("over " if kind == "cosine" else "averaged over ") + rows_text
            + ("" if kind == "cosine" else
               " Rows are smoothed first, 0.999·a + 0.001/n, as in Clark et al.'s code."))


def cross_rows_compared(kind: str, t: int, s: int, max_rows: int | None) -> str:
    """Which distance the figures show between cross-attention heads, over which rows."""
    rows = f"all {t}" if max_rows is None else f"{max_rows} evenly spaced of the {t}"
    return (f"**The figures show the {DISTANCE_KINDS[kind]}** between cross-attention heads: "
            f"each head's rows are the target positions' attention over the {s} source tokens, "
            f"compared on {rows} rows" + ("." if kind == "cosine" else
                                          f", smoothed first (0.999·a + 0.001/{s})."))


def outputs_compared(positions: str, stack: str, across: bool) -> str:
    """What the output similarity compares: what each head writes at ``positions`` into
    ``stack``'s stream (across: self- and cross-attention heads together)."""
    return (f"**Cosine similarity of what each head writes**: its output through its slice of "
            f"W_O, the vector it adds at each of the {positions} positions, into the {stack}'s "
            f"stream, compared position by position and averaged. 1 = the two heads write the "
            f"same direction, 0 = unrelated directions, −1 = opposite."
            + (SEPARATE_MAPS if across else ""))


def nearest_maps_caption(numbering: str) -> str:
    return (f"Each map: rows are queries, columns keys (as on the Attention maps page); all "
            f"share one colour scale. {numbering} Clark et al. count layers from 1, so their "
            f"layer 6 is L5 here.")
