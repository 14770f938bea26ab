"""The words of "why a head attends there" (score attribution and composition, ui/why.py):
the sources named as a person reads them, the sentence that says where a score comes from,
and the captions of the composition maps."""

from __future__ import annotations

from ...analysis.why.scores import OTHER, POSITION_BIAS
from ..settings import as_sentence

COLOURS = ("Each cell is one query-side source (row) with one key-side source (column), its "
           "signed part written in it: red raises the score (the head reads this key more), "
           "blue lowers it. The grey *total* column adds each row, the *total* row each "
           "column, and the corner every cell: the score. embed: the token embeddings; "
           "biases: every bias and norm offset; others: every source not listed.")
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


def _signed(value: float) -> str:
    """A part of a score, signed ("+0.42", "-1.10"); "0.00" when it rounds to nothing."""
    return f"{value:+.2f}" if abs(value) >= 0.005 else "0.00"


def why_sentence(score: float, weight: float, sides: dict[str, list[tuple[str, float]]],
                 roles: dict[str, str]) -> str:
    """Where a score comes from, in words. sides: {"key": [(source, share), ...strongest
    first], "query": [...]}: each side's sources (T5's position bias left out: a part of
    its own, said by arithmetic_sentence). The largest part on the leading side is named,
    and the largest that pulls the other way."""
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
    rest = [f"{source_words(s, roles)} ({v:+.2f})" for s, v in sides[side][1:3]
            if v * value > 0]
    against = next(((s, v) for s, v in sides[side][1:] if v * value < 0), None)
    other, other_value = sides[other_side][0]
    return (head + lead + (f"; then {' and '.join(rest)}" if rest else "")
            + (f"; pulling the other way, {source_words(against[0], roles)} "
               f"({against[1]:+.2f})" if against else "")
            + f". On the {other_side} side the largest is {source_words(other, roles)} "
              f"({other_value:+.2f}).")


def arithmetic_sentence(parts, softcap: bool = False) -> str:
    """The matrix's sums in one sentence (parts: analysis.ScoreParts of the score): the named
    cells, those with *others*, T5's position bias, and each side's named sources and the
    rest, every sum signed and adding up to the score."""
    n_rows = len(parts.rows) - (OTHER in parts.rows) - (POSITION_BIAS in parts.rows)
    n_cols = len(parts.cols) - (OTHER in parts.cols) - (POSITION_BIAS in parts.cols)
    bias = (f", the relative position bias {_signed(parts.position_bias)} (a part of its "
            f"own: its one cell is both a row and a column, on neither side)"
            if POSITION_BIAS in parts.rows else "")
    bias_side = (f" and the position bias {_signed(parts.position_bias)}"
                 if POSITION_BIAS in parts.rows else "")
    score = "the score before the soft-cap" if softcap else "the score"
    return (f"**The sums:** the {n_rows} × {n_cols} named cells give "
            f"{_signed(parts.named)}, the cells with *others* {_signed(parts.others)}{bias}: "
            f"{_signed(parts.total)} in all, {score}. By rows (the query side) the "
            f"{n_rows} named sources give {_signed(parts.query_named)} and the other "
            f"{parts.n_query_others} {_signed(parts.query_others)}{bias_side}; by columns "
            f"(the key side) the {n_cols} named give {_signed(parts.key_named)} and the "
            f"other {parts.n_key_others} {_signed(parts.key_others)}{bias_side}: each side "
            f"adds up to {_signed(parts.total)} too.")


def positions_sentence(found, key: int, roles: dict[str, str]) -> str | None:
    """How the tokens' positions enter this score (found: analysis.ScoreAttribution):
    RoPE turns every query and key part by its position, a learned position embedding is a
    source of its own, T5's bias a part of its own (said by arithmetic_sentence); None
    when the model has no positions."""
    column = found.column(key)
    query = found.query
    if found.unrotated_scores is not None:
        before = float(found.unrotated_scores[column])
        return (f"**Positions** enter through RoPE (rotary positions): every query part is "
                f"turned by the query's position ({query}) and every key part by the key's "
                f"({key}) before they are multiplied, so each cell above already holds the "
                f"distance between them ({query - key}) and no cell is \"position\". "
                f"Unturned, the same query and key would score {_signed(before)} instead of "
                f"{_signed(float(found.scores[column]))}.")
    if "pos_embed" in found.query_sources:
        at = found.query_sources.index("pos_embed")
        matrix = found.terms[:, :, column]
        return (f"**Positions** enter as a source of their own, "
                f"{source_words('pos_embed', roles)}: {_signed(float(matrix[at].sum()))} on "
                f"the query side and {_signed(float(matrix[:, at].sum()))} on the key side.")
    return None


def named_parts(parts, side: str = "key") -> list[tuple[str, float]]:
    """The named sources of one side of analysis.ScoreParts with their totals, strongest
    first ("others" and T5's position bias left out)."""
    names, totals = (parts.cols, parts.col_totals) if side == "key" else \
        (parts.rows, parts.row_totals)
    return [(n, float(v)) for n, v in zip(names, totals) if n not in (OTHER, POSITION_BIAS)]


def contrast_sentence(parts, against: str, key: int, score: float,
                      roles: dict[str, str]) -> str:
    """Whether this key wins over the reference (another key, or the mean key) or loses to
    it, by how much, through which key-side sources on each sign, and the sum the bars
    make (parts: analysis.ScoreParts of the contrast; score: this key's)."""
    gap = parts.total
    reference = score - gap
    if gap > 0:
        verdict = (f"Key {key} ({score:+.2f}) wins over {against} ({reference:+.2f}) by "
                   f"{gap:.2f}")
    elif gap < 0:
        verdict = (f"Key {key} ({score:+.2f}) loses to {against} ({reference:+.2f}) by "
                   f"{-gap:.2f}")
    else:
        verdict = f"Key {key} ties with {against} ({score:+.2f})"
    bars = named_parts(parts)
    helping = [(s, v) for s, v in bars if v * gap > 0][:2]
    against_it = [(s, v) for s, v in bars if v * gap < 0][:2]
    said = []
    if helping:
        said.append(("It wins most through " if gap > 0 else "It loses most through ")
                    + " and ".join(f"{source_words(s, roles)} ({v:+.2f})" for s, v in helping))
    if against_it:
        said.append(("pulling the other way, " if helping else
                     "every named source pulls the other way: ")
                    + " and ".join(f"{source_words(s, roles)} ({v:+.2f})"
                                   for s, v in against_it))
    sentence = verdict + f" (gap {gap:+.2f})."
    if said:
        sentence += " " + as_sentence("; ".join(said)) + "."
    return (sentence + f" The {len(bars)} key-side sources named give {parts.key_named:+.2f}"
            + (f", the other {parts.n_key_others} {parts.key_others:+.2f}"
               if parts.n_key_others else "")
            + (f", the position bias {parts.position_bias:+.2f}"
               if POSITION_BIAS in parts.cols else "")
            + f": {gap:+.2f} in all, the gap.")


def composition_caption(kind: str, layer: int, head_name: str, other: dict[str, float]
                        ) -> str:
    """What the map on the text shows, and the shares of the sources that are not heads."""
    shown = sorted(((share, name) for name, share in other.items() if share >= 0.005),
                   reverse=True)
    rest = ", ".join(f"{source_words(name, {})} {share:.2f}" for share, name in shown[:3])
    if len(shown) > 3:  # a long list of MLPs told no one anything: their sum
        rest += (f" and {len(shown) - 3} more, {sum(share for share, _ in shown[3:]):.2f} "
                 f"together")
    return (f"Each earlier head's share of what shapes {head_name}'s map through its "
            f"{KINDS[kind]}, on this text (all sources add up to 1)"
            + (f"; the rest: {rest}" if rest else "") + ".")


def baseline_caption(kind: str, baseline: float, strongest: tuple[str, float] | None) -> str:
    """The weight-based scores' random baseline, said, and the head above it most."""
    letter = kind.upper()
    text = (f"Elhage et al.'s {letter}-composition score from the weights alone (no text). "
            f"Random heads of these shapes score about {baseline:.2f}: only a score well "
            f"above it means the two heads are built to work together, so the colours start "
            f"there (white: at or below the random heads' score)")
    if strongest is not None:
        text += f"; the highest here is {strongest[0]} ({strongest[1]:.2f})"
    return text + "."


def nothing_composes(layer: int) -> str:
    return (f"Heads of layer {layer} read only the embeddings: no earlier head composes "
            f"into them.")

