"""Inside one head's table of contents: which sections the page shows for this head, in what
order and under which titles (the page's steps, or a lesson's screens), and which of them a
lesson shows as words alone. The view draws each section by its key (DRAW, in the view)."""

from __future__ import annotations

from ....analysis.one_head.steps import HeadInternals
from ...words.one_head import layout_step


def sections(inside: HeadInternals, lesson: bool, query: int, query_label: str,
             gradients: bool, kv_cache: bool = False) -> list[tuple[str, str, bool]]:
    """The page's sections in order: (title, key, folded). On the whole page a folded section
    is computed and drawn when opened, so the page opens on the head's input and the list of
    steps; in a lesson each is a screen, and the steps the whole page draws inside another
    (the layout, the followed query, the contribution) get screens of their own. gradients:
    the model's W_QKV is fused (GPT-2, BERT, the Llama family), not an encoder-decoder's.
    kv_cache: the model writes a token at a time (a lesson's screen of its cache)."""
    layout = layout_step(inside) is not None
    return [
        ("The whole head in one line", "overview", False),
        *([("M: the encoder's output", "memory", False)] if inside.memory is not None else []),
        ("X: what the head reads", "X", False),
        ("Q, K, V: three projections", "qkv", True),
        *([("How the checkpoint stores them, and the heads' shapes", "layout", True)]
          if lesson and layout else []),
        *([("QK-norm: " + ("all heads' queries and keys normalized together"
                            if inside.qk_norm == "full" else "each head's query and key "
                            "normalized"), "qknorm", True)] if inside.Q_normed is not None
          else []),
        *([("Rotary positions (RoPE)", "rope", True)] if inside.rotary else []),
        ("Scores: every query against every key", "scores", True),
        *([("Soft-capping: the scores through tanh", "softcap", True)] if inside.softcap
          else []),
        *([("T5's relative position bias", "bias", True)]
          if inside.position_bias is not None else []),
        ("The mask", "mask", True),
        ("Softmax: the attention weights", "softmax", True),
        *([(f"Follow query {query} '{query_label}'", "follow", True)] if lesson else []),
        # a cell clicked on the scores or the weights, by source (ui.why); the lesson's
        # screen shows the textbook case instead, on the induction toy
        ("Why an induction head attends where it does" if lesson else
         "Why this head attends there: its score split by source",
         "textbook" if lesson else "why", True),
        ("Chunked and flash attention: the same weights with less memory", "flash", True),
        ("Weights × V: each token's mix of values", "context", True),
        *([("What a head moves: the weights times the values' size", "moves", True)]
          if lesson else []),
        ("W_O: from one head back to the model's width", "output", True),
        *([("The head's contribution, and all heads together", "contribution", True)]
          if lesson else []),
        *([("How the head learns: the gradients of W_Q and W_O", "gradients", True)]
          if gradients else []),
        *([("Watch heads learn: induction heads across training", "learning", True)]
          if lesson else []),
        ("What attention costs: parameters" + ("" if lesson else " and the KV cache"),
         "cost", True),
        *([("The KV cache: what a model keeps while it writes", "kvcache", True)]
          if lesson and kv_cache else []),
        # last, beyond the head's arithmetic: the induction toy's head read in features
        *([("Reading a head in features: the induction feature", "features", True)]
          if lesson else []),
    ]


# the lesson's screens of words alone (the others: words beside their figures)
WORDS_ONLY = frozenset({"overview", "layout", "cost", "learning"})
