"""The words of the per-head statistics on the Corpus page: the headings, pickers, units and
notes of each statistic's section (the registry, analysis.head_statistics, names the
statistics and their arrays; these say them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

NORMALIZED_SWITCH = "Normalized (÷ the entropy of uniform attention)"
SCALE_UNITS = {"raw": "nats", "normalized": "÷ maximum"}


@dataclass(frozen=True)
class Choice:
    """A statistic whose members are picked one at a time (a token class, a role)."""
    heading: str
    url_name: str  # the picker's name in the URL
    label: str
    default: str
    title: Callable[[str], str]  # the figure's title for a member
    key: str  # the figures' keys: <key>_mean, <key>_std, dl_<key>


CHOICES = {
    "mass": Choice("Where attention goes", "cclass", "Token class", "first token",
                   lambda member: f"Mass on {member}", "c_mass"),
    "roles": Choice("Role scores", "crole", "Role", "previous token", str.capitalize,
                    "c_role"),
}
# a statistic's figures, where the page named them before the registry drew every section
SECTION_KEYS = {"ablation": "c_abl", "gradient": "c_grad"}
HEADINGS = {"ablation": "Ablation effect", "gradient": "Gradient importance"}
CORPUS_NOTES = {
    "ablation": "The change of the model's score ({score}) when one head is switched off, "
                "per segment; its mean and spread over segments.",
    "gradient": "Michel et al.'s |∂ score / ∂ head gate| per segment; mean and spread.",
    "pruning": "Heads removed 10 % at a time, least important first (importance re-estimated "
               "after each step), scored on the first {segments} segments.",
}


def heading(statistic) -> str:
    """A statistic's name as its section and figures title it."""
    return HEADINGS.get(statistic.name, statistic.label)


# --- the Corpus page ----------------------------------------------------------------------

CORPUS_SOURCES = {"demo": "Demo: Python's documentation (offline)", "upload": "Upload a file",
                  "paste": "Paste texts"}
CORPUS_INTRO = ("Statistics of every head over many texts: each text is cut into segments of a "
                "chosen length (texts are never joined), each segment is run through the "
                "model, and every statistic is averaged over segments, with its spread (the "
                "standard deviation).")
SOURCES_ONLY = ("On an encoder-decoder, each text is a **source**: the statistics are of the "
                "**encoder's self-attention**. Decoder self-attention and cross-attention would "
                "need a target for every text; head importance scores the whole model, so it "
                "is left out here.")
RUN_KEEPS_GOING = ("The run keeps going if you change a setting or switch pages, and its result "
                   "is kept: running the same corpus again costs nothing.")


def segments_read(read, segments, min_tokens: int) -> str:
    """How many texts were read and what they became."""
    skipped = f"; {read.skipped:,} line(s) or row(s) skipped" if read.skipped else ""
    return (f"From {read.source}: {len(read.texts):,} texts read{skipped}. Used "
            f"{segments.n_texts:,} texts → **{len(segments.ids):,} segments, "
            f"{segments.n_tokens:,} tokens** ({segments.n_dropped:,} piece(s) shorter than "
            f"{min_tokens} tokens left out).")
