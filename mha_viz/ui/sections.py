"""A page is a context and its sections: a view builds one frozen context (the selection, the
trace or run, the page's choices) and ``show_sections`` walks an ordered list of module-level
functions that take it. A section listed ``Folded`` sits folded below the page's first
screen, computed and drawn only once opened (output.drawn_when_opened). Adding a section to a
page is one function and one line in its list."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from .output import drawn_when_opened


@dataclass(frozen=True)
class Folded:
    """A section folded under ``title`` (its key names it in a link's ?open=), drawn by
    ``draw(context)`` while it is open."""
    title: str
    key: str
    draw: Callable

    def __call__(self, context) -> None:
        drawn_when_opened(self.title, self.key, partial(self.draw, context))


def show_sections(context, sections: Sequence[Callable]) -> None:
    """Each section in order, given the page's context."""
    for section in sections:
        section(context)
