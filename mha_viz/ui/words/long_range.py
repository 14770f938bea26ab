"""The words of the Long range page: its introduction, each section's title and caption,
the labels of its choices and buttons, how its numbers are written, and the published
results it sets beside them."""

from __future__ import annotations

from ...analysis.heads import head_name
from ...analysis.one_head.kv_cache_size import bytes_text

INTRO = ("Which heads need the whole context? Hide a needle (a sentence with three odd words) "
         "in a long text and ask for it: the heads that copy it are retrieval heads (Wu et al. "
         "2024), and switching them off loses the needle. Most heads read the first token (a "
         "sink) and their neighbours: restrict them to a sink and a window (StreamingLLM) and "
         "see what it costs, head by head, and how much key/value cache it saves.")

CHOICES = "Choices: the needles, and the long text the sinks and windows read"
NEEDLE_CHOICES = ("**Needles**: prompts of these lengths, a needle at each depth (pick at "
                  "least one length)")
TEXT_CHOICES = ("**Long text**: what the sinks and the windows read, and the sink and the "
                "window a restricted head keeps")

TEXT_SOURCES = {"docs": "Python's documentation (bundled)", "sidebar": "the sidebar's text"}

NEEDLE_TITLE = "Needles in a haystack"
NEEDLE_CAPTION = ("Each prompt is the bundled Python documentation cut to the length, a needle "
                  "(*The secret words of the lighthouse keeper are …*, three words drawn from "
                  "the seed) at the depth, and the question. The answer follows the question "
                  "(teacher-forced); a cell is the share of the answer's tokens the model "
                  "predicts right.")
GRID_TITLE = "Copy accuracy by context length and needle depth"
RETRIEVAL_TITLE = "Retrieval score of each head (Wu et al. 2024)"
RETRIEVAL_CAPTION = ("Over the answer tokens found once in their prompt and predicted right, "
                     "the share on whose occurrence in the needle a head's strongest attention "
                     "falls, from the query that predicts the token. Heads over 0.1 are "
                     "retrieval heads.")
MASKING_TITLE = "Switching retrieval heads off"
MASKING_CAPTION = ("The copy accuracy of the same needles with the top-k retrieval heads "
                   "switched off (their outputs removed before W_O), against k heads drawn "
                   "at random from the others (each draw its own bar), and against heads you "
                   "pick.")
SINK_TITLE = "Attention sinks (Gu et al. 2025)"
SINK_CAPTION = ("Each head's mean attention to the first token over every query, on the long "
                "text and on its first token repeated as often. A sink head puts more than "
                "ε = 0.3 there.")
GEOMETRY_TITLE = "What makes the first token a sink: its key and the queries"
GEOMETRY_CAPTION = ("Per head, on the long text: the first token's key norm over the mean norm "
                    "of the other keys, and the queries' mean cosine with the first key minus "
                    "their mean cosine with the other keys they read (after rotary positions).")
TABLE_TITLE = "Sink + window for every head (StreamingLLM)"
TABLE_CAPTION = ("The next-token loss of the long text with every head reading the whole "
                 "text, the first {sink} tokens and the last {window} only, and the last "
                 "{window} only: an exact mask inside the attention kernel, not a simulation.")
COSTS_TITLE = "What a sink + window costs each head"
COSTS_CAPTION = ("Each cell: the loss with that head alone restricted to the first {sink} "
                 "tokens and the last {window}, minus the loss with every head reading the "
                 "whole text (nats per token). The heads that need the whole context stand out "
                 "(DuoAttention's retrieval heads); the rest are streaming heads.")
PUBLISHED = ("**Published results.** Wu et al. (2024, *Retrieval Head Mechanistically Explains "
             "Long-Context Factuality*) find retrieval heads in fewer than 5% of heads of every "
             "model family they read; masking them breaks needle retrieval while masking as "
             "many random heads does not. Xiao et al. (2023, *StreamingLLM*): window attention "
             "fails once the text passes the window, and keeping 4 sink tokens restores a "
             "perplexity close to full attention. Gu et al. (2025, *When Attention Sink "
             "Emerges*) measure the share of sink heads with ε = 0.3. DuoAttention (Xiao et "
             "al. 2024) keeps the full cache for retrieval heads only.")

SEED_HELP = "The needles' words are drawn from this seed: the same seed, the same prompts."
DEPTHS_HELP = "How many depths, evenly from 0% (the haystack's start) to 100% (its end)."
LENGTHS_HELP = ("Each prompt's length in tokens, all of it: haystack, needle and question. Up "
                "to the model's context; one forward per prompt.")
TOKENS_HELP = ("How many tokens of the text the sinks and the window read (the bundled "
               "documentation is cut to this many).")
SINK_HELP = "The first tokens every restricted head keeps reading (StreamingLLM keeps 4)."
WINDOW_HELP = "The most recent tokens every restricted head reads, itself included."
KEEP_HELP = ("Keep the heads a sink + window costs most reading the whole context and restrict "
             "the rest (DuoAttention's split): the loss, and the cache it saves.")


def needle_button(n_cases: int, longest: int) -> str:
    return f"Run the needles ({n_cases} prompts, up to {longest:,} tokens)"


def needle_label(n_cases: int) -> str:
    return f"Reading {n_cases} needle prompts, one forward each"


def costs_button(total_heads: int, n_tokens: int) -> str:
    return f"Restrict each of the {total_heads} heads alone ({n_tokens:,} tokens)"


def masking_button(k: int, draws: int, n_cases: int, picked: bool = False) -> str:
    """The runs: the top k, each draw and the picked heads (every head on is the study's)."""
    return (f"Switch off the top {k} and {draws} random draws of {k} "
            f"({(draws + 1 + int(picked)) * n_cases} forwards)")


def retrieval_summary(over: int, total: int, counted: int, right: int, tokens: int) -> str:
    return (f"{over} of {total} heads ({over / total:.1%}) score over 0.1, on {counted} "
            f"answer tokens counted ({right} of {tokens} predicted right).")


def nothing_counted(right: int, tokens: int) -> str:
    return (f"No answer token was predicted right and found once in its prompt ({right} of "
            f"{tokens} predicted right), so no head has a retrieval score: try shorter "
            f"lengths, or a larger model.")


def masking_labels(k: int, draws: int, picked: int) -> list[str]:
    return (["every head on", f"top {k} retrieval heads off"]
            + [f"random {k} off (draw {i + 1})" for i in range(draws)]
            + ([f"your {picked} heads off"] if picked else []))


def head_table(values, heads, column: str) -> dict[str, list]:
    """The rows of a table of heads: each head's name and its value to 3 decimals."""
    return {"head": [head_name(l, h) for l, h in heads],
            column: [round(float(values[l, h]), 3) for l, h in heads]}


def masking_note(result) -> str:
    return (f"k = {result.k}; the random draws' mean {result.random_mean:.2f}; top heads: "
            f"{', '.join(head_name(l, h) for l, h in result.top_heads[:6])}"
            f"{' …' if result.k > 6 else ''}")


def sink_share(label: str, count: int, total: int, share: float) -> str:
    return f"{label}: {count} of {total} heads ({share:.0%})"


def table_labels(sink: int, window: int) -> list[str]:
    return ["full attention", f"sink {sink} + window {window}", f"window {window} only"]


def kv_saving(saving, n_tokens: int) -> str:
    return (f"{saving.streaming_kv_heads} of {saving.kv_heads} key/value heads keep only the "
            f"sink and the window: the cache of {n_tokens:,} tokens goes from "
            f"{bytes_text(saving.full_bytes)} to {bytes_text(saving.restricted_bytes)} "
            f"({saving.saved_share:.0%} saved; 16-bit values). A key/value head shared by "
            f"several query heads keeps its whole cache unless all of them are restricted.")


def saved_delta(saving) -> str:
    """The cache saved as a metric's delta: negative, with an ASCII minus (Streamlit reads the
    sign from it: a fall, drawn green with delta_color="inverse")."""
    return f"-{bytes_text(saving.saved_bytes)} ({saving.saved_share:.0%})"


def kept_loss(losses, keep: int) -> str:
    return (f"With the {keep} costliest heads reading everything and the other "
            f"{losses.n_restricted} restricted: loss {losses.sink_window:.3f} nats/token "
            f"(full attention {losses.full:.3f}; window only for those heads "
            f"{losses.window_only:.3f}).")


def no_room(context: int, least: int) -> str:
    return (f"A needle, its question and the haystack around it take at least {least} tokens "
            f"here, more than this model's context of {context:,} tokens: no needle prompt "
            f"fits. The sinks and windows below read a text that does.")


def not_causal(name: str) -> str:
    return (f"**{name}** is not a causal language model: the needles, sinks and windows of "
            f"this page read a model that predicts the next token, left to right (pick "
            f"SmolLM2 in the sidebar).")
