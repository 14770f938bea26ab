"""What the sidebar chose (``Selection``): the model, the text and its options, a saved trace
opened instead, an encoder-decoder's target and the set of maps shown, and the model's
continuation of the text. A page's context starts from it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import MhaVizError
from ..maps.sets import MapSet, map_set
from ..maps.trace import AttentionTrace
from ..models.generation import Generation
from ..models.model import Model
from ..server import export


@dataclass(frozen=True)
class Selection:
    """What the sidebar chose. ``key`` identifies the input (a figure's meta names it)."""

    model_name: str  # what load_model() gets: "minilm", "gpt2", or a folder path
    text: str
    text_pair: str | None  # sentence B (BERT only), None when empty
    max_tokens: int | None
    model: Model | None = field(default=None, compare=False, repr=False)
    model_error: MhaVizError | None = field(default=None, compare=False)
    # a saved trace the person opened (pages that only read maps show it instead)
    uploaded: AttentionTrace | None = field(default=None, compare=False, repr=False)
    upload_digest: str | None = None
    # an encoder-decoder: the target (None: the model's own output) and the kind of
    # attention shown ("encoder", "decoder", "cross"); None for other models
    target: str | None = None
    kind: str | None = None
    # what the model wrote after the sidebar's text (Continue, on Home): ``text`` is the two
    # together, and the written tokens are marked in every trace and run the pages read
    generation: Generation | None = field(default=None, compare=False, repr=False)

    @property
    def map_set(self) -> MapSet:
        """The set of maps the pages show (maps.sets): the model's self-attention, or the
        encoder-decoder's set the sidebar picked (a saved trace opened: its own maps)."""
        return map_set(None if self.uploaded is not None else self.kind)

    @property
    def typed_text(self) -> str:
        """The sidebar's text as typed, without the model's continuation."""
        if self.generation is None:
            return self.text
        return self.text[:len(self.text) - len(self.generation.text)]

    @property
    def key(self) -> tuple:
        if self.upload_digest is not None:
            return ("uploaded trace", self.upload_digest)
        pair = (self.model_name, self.text, self.text_pair, self.max_tokens)
        return pair if self.kind is None else (*pair, self.target, self.kind)

    @property
    def file_stem(self) -> str:
        """A short name for downloads: the model name, or the folder's last part."""
        name = self.model_name
        if os.sep in name or name.startswith((".", "~")):
            name = Path(name).name or "model"
        return export.safe_filename(name)
