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
