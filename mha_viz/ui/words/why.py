"""The words of "why a head attends there" (score attribution and composition, ui/why.py):
the sources named as a person reads them, the sentence that says where a score comes from,
and the captions of the composition maps."""

from __future__ import annotations

from ...analysis.why.scores import OTHER, POSITION_BIAS

COLOURS = ("Red raises the score (the head reads this key more), blue lowers it; each cell "
           "is one query-side source (row) with one key-side source (column), and the cells "
           "add up to the score. embed: the token embeddings; biases: every bias and norm "
           "offset; others: every source not listed.")
KINDS = {"q": "queries (Q-composition)", "k": "keys (K-composition)",
         "v": "values (V-composition)"}
ROLE_WORDS = {"previous token": "a previous-token head", "next token": "a next-token head",
              "duplicate token": "a duplicate-token head", "induction": "an induction head"}
_PLAIN = {"embed": "the token embeddings", "pos_embed": "the position embeddings",
          "type_embed": "the sentence (token type) embeddings",
          "bias": "the biases and norm offsets", POSITION_BIAS: "the relative position bias",
          OTHER: "every other source"}


def source_label(source: str) -> str:
    """A source as a short axis label (8 characters at most: a phone's and a column's tick
    labels are cut there): "L0.H3", "L2 MLP", "embed", ..."""
    if source.endswith(".mlp"):
        return f"{source[:-len('.mlp')]} MLP"
    return {"embed": "embed", "pos_embed": "position", "type_embed": "type",
            "bias": "biases", POSITION_BIAS: "pos bias", OTHER: "others"}.get(source, source)


def source_words(source: str, roles: dict[str, str]) -> str:
    """A source in a sentence; a head with a clear role on this text says it
    ("L0.H0, a previous-token head on this text"). roles: head name -> role."""
    if source.endswith(".mlp"):
        return f"layer {source[1:-len('.mlp')]}'s MLP"
    if source in _PLAIN:
        return _PLAIN[source]
    role = ROLE_WORDS.get(roles.get(source, ""))
    return f"{source}, {role} on this text" if role else source


def why_sentence(score: float, weight: float, sides: dict[str, list[tuple[str, float]]],
                 roles: dict[str, str]) -> str:
    """Where a score comes from, in words. sides: {"key": [(source, share), ...strongest
    first], "query": [...]}, each side's shares summing to the score."""
    side, (source, value) = max(((name, found[0]) for name, found in sides.items()),
                                key=lambda item: abs(item[1][1]))
    other_side = "query" if side == "key" else "key"
    head = f"Its score is {score:+.2f} (weight {weight:.2f} after the softmax). "
    if value * score > 0 and abs(value) > 0.5 * abs(score):
        lead = (f"Most of this score comes from the **{side} side** of "
                f"{source_words(source, roles)} ({value:+.2f})")
    elif value > 0:
        lead = (f"The largest part comes from the **{side} side** of "
                f"{source_words(source, roles)} ({value:+.2f})")
    else:
        lead = (f"The **{side} side** of {source_words(source, roles)} pulls it down most "
                f"({value:+.2f})")
    rest = [f"{source_words(s, roles)} ({v:+.2f})" for s, v in sides[side][1:3]]
    other, other_value = sides[other_side][0]
    return (head + lead + (f"; then {' and '.join(rest)}" if rest else "") + ". On the "
            f"{other_side} side the largest is {source_words(other, roles)} "
            f"({other_value:+.2f}).")


def contrast_sentence(sources: list[tuple[str, float]], against: str,
                      roles: dict[str, str]) -> str:
    """Which key-side sources make this key win over another (or over the mean key)."""
    winning = [(s, v) for s, v in sources if v > 0][:2]
    if not winning:
        return f"No key-side source makes this key win over {against}."
    return (f"Against {against}, this key wins most through "
            + " and ".join(f"{source_words(s, roles)} ({v:+.2f})" for s, v in winning) + ".")


def composition_caption(kind: str, layer: int, head_name: str, other: dict[str, float]
                        ) -> str:
    """What the map on the text shows, and the shares of the sources that are not heads."""
    rest = ", ".join(f"{source_words(name, {})} {share:.2f}" for name, share in other.items()
                     if share >= 0.005)
    return (f"Each earlier head's share of what shapes {head_name}'s map through its "
            f"{KINDS[kind]}, on this text (all sources add up to 1)"
            + (f"; the rest: {rest}" if rest else "") + ".")


def baseline_caption(kind: str, baseline: float, strongest: tuple[str, float] | None) -> str:
    """The weight-based scores' random baseline, said, and the head above it most."""
    letter = kind.upper()
    text = (f"Elhage et al.'s {letter}-composition score from the weights alone (no text). "
            f"Random heads of these shapes score about {baseline:.2f}: only a score well "
            f"above it means the two heads are built to work together")
    if strongest is not None:
        text += f"; the highest here is {strongest[0]} ({strongest[1]:.2f})"
    return text + "."


def nothing_composes(layer: int) -> str:
    return (f"Heads of layer {layer} read only the embeddings: no earlier head composes "
            f"into them.")

