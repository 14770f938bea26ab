"""The words of the Head roles page: the normalizations, the rule that names a head's role,
what each role's map measures and on which input, and the probe's description."""

from __future__ import annotations

from ...analysis import (BROAD_THRESHOLD, FOCUSED_THRESHOLD, ROLE_THRESHOLD, SINK_ROLES)

INTRO = ("Some heads do one recognisable job: read the **previous token**, read an **earlier "
         "copy** of the current token (duplicate token), read the token that **followed** that "
         "earlier copy (induction, Olsson et al. 2022), or park their attention on a **sink** "
         "(the first token, [CLS], [SEP]). Each map scores every head for one role; the table "
         "names each head's strongest role and the input that showed it.")
NORMS = {"ours": "Ours: ÷ the rows that have the key",
         "transformer_lens": "TransformerLens: ÷ all T rows"}
NORM_HELP = ("Ours averages over the query rows that have the key in question (T − 1 rows for "
             "previous token; the rows whose token occurred before, for duplicate token and "
             "induction). TransformerLens's head_detector divides the same summed mass by all T "
             "rows, so its previous-token score is ours × (T − 1)/T. The sink and entropy maps "
             "are the same under both.")
RENORMALIZED = ("Renormalizing cuts both ways: a head that put 99% of its weight on a token left "
                "out is judged by the 1% that remains, scaled up to 100%. Compare with the sink "
                "map, which is always measured on every token.")
NO_REPEATS = ("This text repeats no token, so the duplicate-token and text-induction scores are "
              "0; try the *Repeated text (induction)* example in the sidebar.")
MAPS_CAPTION = ("Layers down, heads across; point at or tap a cell for its value. Every score "
                "runs from 0 to 1. Under each map: what it measures, the input that gave it (the "
                "probe) and the normalization.")


def probe_caption(description: str, frame: str, seq_len: int, n_tokens: int, uniform: float,
                  dropped: bool) -> str:
    """The probe's input and what uniform attention would score on it (description and
    frame: escaped)."""
    return (f"**Induction probe: {description}.** Each input is {frame}: R is {seq_len} "
            f"distinct random tokens (no special ones), {n_tokens} tokens in all. An induction "
            f"head reading the second R attends from each token to the token that followed its "
            f"first occurrence. Uniform attention would score {uniform:.3f} here."
            + (" The prefix/suffix tokens are left out like the text's (rows renormalized)."
               if dropped else ""))


def probes(roles, hidden: list[str], probe_name: str, repeats: str, drops: bool) -> dict:
    """The input each role's score was read on, by role: the text (without the tokens
    hidden), the probe, every token for a sink."""
    on_text = "the text" + (f" without {', '.join(hidden[:4])}" if hidden else "")
    found = {key: on_text for key in roles}
    found["induction (probe)"] = probe_name
    for key in SINK_ROLES:  # a sink is measured on every token, whatever is left out
        if key in found:
            found[key] = "the text, every token" if drops else "the text"
    found["duplicate token"] = found["induction (text)"] = f"{on_text} ({repeats})"
    return found


def rule(causal: bool, first_name: str, separator: str, norm: str) -> str:
    """The rule that names a head's role, as the table applies it."""
    return (
        f"The rule: among previous token{'' if causal else ', next token'}, duplicate token "
        f"and induction (probe or text), the highest score ≥ {ROLE_THRESHOLD} names the "
        f"role; else the larger sink mass ≥ {ROLE_THRESHOLD} "
        f"({first_name}{'' if causal else ', ' + separator}); else the normalized entropy e says "
        f"*broad* (e ≥ {BROAD_THRESHOLD}), *focused* (e ≤ {FOCUSED_THRESHOLD}, score "
        f"1 − e) or *mixed*. Pattern roles come first because a head that does its job where it "
        f"can often rests on the sink elsewhere. Sorted by that order, then by score; click a "
        f"column to sort, a row to show that head below."
        + (" The thresholds are meant for our normalization: TransformerLens's is smaller."
           if norm == "transformer_lens" else ""))


def role_maps(norm: str, rows: int, n_dup: int, seq_len: int, probe_rows: int,
              first_name: str, n_tokens: int) -> list[tuple[str, str, str]]:
    """Each role's map: (its score's name, its title, what it measures and how it is
    normalized); the caller keeps those the model has."""
    first, separator = SINK_ROLES
    if norm == "ours":
        diag = f"mean over the {rows - 1} rows that have one"
        dup_norm = (f"mean over the {n_dup} queries that repeat a token" if n_dup else
                    "no query repeats a token, so 0 everywhere")
        probe_norm = f"mean over the second R's first {seq_len - 1} queries"
    else:
        diag = f"summed mass ÷ all {rows} rows (= ours × {rows - 1}/{rows})"
        dup_norm = f"summed mass ÷ all {rows} rows (= ours × {n_dup}/{rows})"
        probe_norm = f"summed over the second R ÷ all {probe_rows} rows"
    sink_name = "the first token" if first_name == first else first_name
    return [
        ("previous token", "Previous token", f"A[i, i−1], {diag}"),
        ("next token", "Next token", f"A[i, i+1], {diag}"),
        ("duplicate token", "Duplicate token",
         f"Mass on earlier copies of the query's token, {dup_norm}"),
        ("induction (probe)", "Induction on the probe",
         f"Repeated random tokens: mass on the token after the earlier copy, {probe_norm}"),
        ("induction (text)", "Induction on the text",
         f"Shifted duplicate: mass on the tokens after earlier copies of the query's token, "
         f"{dup_norm}"),
        (first, f"Sink: {first_name}",
         f"Mass on {sink_name}: mean over all {n_tokens} rows, on every token"),
        (separator, f"Sink: {separator}",
         f"Mass on {separator}: mean over all {n_tokens} rows, on every token"),
        ("entropy", "Broad vs focused",
         f"Normalized entropy: 0 = one key, 1 = uniform; broad ≥ {BROAD_THRESHOLD}, "
         f"focused ≤ {FOCUSED_THRESHOLD}"),
    ]
