"""The words of the sidebar's text fields, by what the model reads (Model.reads): a text (a
bidirectional model: a second sentence too), an encoder-decoder's source and target, or the
digits an image reader reads drawn."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TextField:
    header: str  # the sidebar's heading above the field
    label: str
    target: bool  # a target the decoder is forced on, below it
    pair: bool  # a second sentence, below it (a bidirectional model's)


TEXT_FIELDS = {
    "text": TextField("Text", "Text", target=False, pair=True),
    "source": TextField("Source", "Source text (the encoder reads it)", target=True, pair=False),
    "image": TextField("Source", "Digits to draw (the encoder reads their image)", target=True,
                       pair=False),
}
SETS_HELP = ("Encoder self-attention: source tokens read source tokens. Decoder "
             "self-attention: target tokens read earlier target tokens. Cross-attention: target "
             "tokens read the source.")
