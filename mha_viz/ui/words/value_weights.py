"""The words of the "weights / what moves" switch on the pages that compute statistics from
the maps (Entropy, Head roles): what their numbers read once it says "what moves"."""

STATISTICS_READ = ("These numbers read **what each head moves**, not its attention weights: "
                   "each weight times the size of the vector its key sends through the head, "
                   "every row rescaled to sum to 1 (Kobayashi et al. 2020). A token that takes "
                   "a large weight but sends a small vector, often the first token, counts "
                   "for little.")
TITLE_SUFFIX = " — what moves"  # after a title: "Mean entropy per head — what moves"
