"""The words of the lesson's screen on the induction toy's induction feature (Inside one
head, lesson mode): what the induction head writes, read in a dictionary's features."""

from __future__ import annotations

FIGURE_NOTE = ("red raises the feature, blue lowers it; each head's total on the right, each "
               "source token's at the bottom")
FIGURE_NOTE_DOWN = ("red raises the feature, blue lowers it; each head's total at the bottom, "
                    "each source token's on the right")


def figure_title(feature: int, query: int, token: str) -> str:
    return f"f{feature} at query {query} '{token}': by head and source token"


def step_text(case, found, labels: list[str], shares, induction_heads: list[str],
              dictionary: str) -> str:
    """Which feature the toy's layer-1 heads write at the induction query, from which head
    and source token, and how much of its decoder sits on the induction heads."""
    q, k = case.query, case.key
    at_target = found.terms[:, k]
    by_head = sorted(((found.heads[h], float(v)) for h, v in enumerate(at_target)),
                     key=lambda item: -item[1])
    named = " and ".join(f"{name} ({value:+.2f})" for name, value in by_head[:2]
                         if value > 0)
    share = sum(float(shares[int(n.split(".H")[1])]) for n in induction_heads)
    return (
        f"A head's output can be read in **features**: directions a sparse dictionary "
        f"learned from the heads' outputs, most of them silent on any one token. The toy "
        f"ships one for layer 1's heads (`{dictionary}`, 512 features). At query {q} "
        f"'{labels[q]}' the feature that key {k} '{labels[k]}' (the token after the earlier "
        f"'{labels[q]}') builds most is **f{found.feature}** (activation "
        f"{found.activation:.2f}). Its pre-activation there, {found.pre_activation:+.2f}, is "
        f"the sum of a part per head and source token plus one bias ({found.bias:+.2f}): "
        f"key {k} gives {float(at_target.sum()):+.2f} of it, through {named}. "
        f"f{found.feature} is an **induction feature**: {share:.0%} of its decoder sits on "
        f"the induction heads {' and '.join(induction_heads)}, which copy what followed "
        f"before (Kissane et al. 2024 read GPT-2's attention outputs this way). The Features "
        f"page reads any head of a model with a dictionary the same way.")
