"""The words of the Entropy page: its choices, what its colour scale ends at, the papers'
thresholds, and what each section measures (attention distance, one head's tokens, where the
attention goes, an encoder-decoder's cross-attention over the source)."""

from __future__ import annotations

INTRO = ("How spread out each head's attention is. A head whose tokens each read from one "
         "place is *focused*: its entropy is 0. One that spreads each token's attention evenly "
         "over n tokens is *broad*: its entropy is ln n, the most there can be. A token's "
         "entropy is H = −Σ a·ln a over the weights a of its row, in nats; a head's is the mean "
         "over its tokens.")
SCALES = {"raw": "raw (nats)", "normalized": "normalized (÷ maximum)"}
SCALE_HELP = ("Normalized divides each row by the largest entropy it could have, ln(number of "
              "keys it sees): ln(i+1) for a causal model's row i, ln n for BERT. 1 = uniform, "
              "0 = one token. Rows that see a single key are left out.")
SMOOTH_HELP = ("Mix a little uniform attention in before the log, A' = 0.9999 A + 0.0001/n, as "
               "Clark et al. (2019) do.")
CAUSAL_SINK = ("Causal models have no [CLS] or [SEP]; their first token often acts as an "
               "*attention sink* that idle heads attend to.")
BERT_FIRST = "For BERT the first token is [CLS], so it has no line of its own."
CROSS_PER_TOKEN = ("Each point is the target token the position writes; the dashed line is "
                   "uniform attention over the source.")


def colour_scale(normalized: bool, causal: bool, n: int, reference: float) -> str:
    """What the heatmap's colours mean, ending at uniform attention."""
    uniform = ("1.0" if normalized else
               (f"ln {n} = {reference:.2f} nats" if not causal else
                f"{reference:.2f} nats, the mean of ln(i+1) over the rows"))
    return (f"Dark = focused heads, bright = broad heads; the colour scale ends at uniform "
            f"attention, {uniform}. Point at or tap a cell for its value.")


def clark_broad(n: int) -> str:
    return ("Clark et al. (2019) call a BERT-base head *broad* when its entropy is above 3.8 "
            "nats on inputs of about 128 tokens; raw entropy grows with the length (this input "
            f"has {n} tokens), so compare lengths with the normalized view.")


def distance(uniform_distance: float) -> str:
    return ("For each query, the distance in tokens to what it reads, weighted by the "
            "attention: Σ_j a_ij·|i − j|; a head's value is the mean over its queries (as "
            "Dosovitskiy et al. 2021 measure ViT's heads). Near 1: a previous-token head; near "
            f"0: a head that reads the token itself; spreading evenly would give "
            f"{uniform_distance:.1f}. Every token counts here, whatever is hidden above.")


def per_query(causal: bool, normalized: bool, n: int) -> str:
    """Under one head's entropy per query token: what its dashed line is, and its labels."""
    return ("Low values: the token reads mostly from one place. The dashed line is the entropy "
            "of uniform attention over the tokens that query can see"
            + (" (it grows along the text, as a causal model's row i sees i+1 tokens)."
               if causal and not normalized else ".")
            + (f" With {n} tokens only every {-(-n // 60)}th token is labelled; point at or "
               f"tap the chart to see each one." if n > 60 else ""))


def class_mass(note: str) -> str:
    return ("The fraction of each head's attention (averaged over query tokens) that lands on "
            "[CLS], [SEP], punctuation, the first token, the token itself, the previous token "
            "and the next token. Always computed on every token, whatever is hidden above. "
            "Clark et al. (2019) found BERT's middle layers pile attention on [SEP]. " + note)


def cross_source(n_source: int, uniform: float) -> str:
    """What uniform attention over an encoder-decoder's source is, and what a focused
    cross-attention head does."""
    return (f"Cross-attention rows run over the {n_source} source tokens: uniform attention "
            f"over the source is ln {n_source} = {uniform:.2f} nats. A focused head reads one "
            f"source token per target token, as a word alignment does; a broad one reads the "
            f"whole source.")
