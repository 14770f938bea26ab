"""Cross-modal attention: an encoder-decoder whose encoder reads an image and whose decoder
writes text (the bundled "reader-toy", trained by mha_viz/toys/reading.py).

The source is the text to draw: the model draws it (toy_reading.draw), cuts the image into
vertical strips and reads them, so every analysis of encoder-decoders runs unchanged. The
encoder's positions are the strips, left to right; cross-attention maps are target
characters x strips, and the trace carries the image, so a page can lay each written
character's attention over the pixels it read.

    model = load_model("reader-toy")
    trace = model.trace("4A7W2")          # the model reads the image and writes its text
    trace.image                           # [16, 112] pixels, 1 = ink
    trace.cross_attentions                # [L, H, T, 28]: written digits x strips
"""

from __future__ import annotations

import numpy as np

from ..core.errors import InputError, UnsupportedModelError
from ..toys import reading as toy_reading
from .seq2seq import EncoderDecoderModel

BLANK = "·"  # the label of a strip with no character on it


class ImageToTextModel(EncoderDecoderModel):
    """An encoder-decoder whose encoder reads a drawn line of characters."""

    source_is_text = False
    reads = "image"  # what it reads: digits drawn as an image, and a target

    def __init__(self, network, tokenizer, info):
        super().__init__(network, tokenizer, info)
        image = network.config.image
        if (image.height, image.patch_width) != (toy_reading.HEIGHT, toy_reading.PATCH_WIDTH) \
                or image.max_width < toy_reading.WIDTH:
            raise UnsupportedModelError(
                f"mha-viz draws {toy_reading.HEIGHT} x {toy_reading.WIDTH}-pixel lines in "
                f"{toy_reading.PATCH_WIDTH}-pixel strips; this model reads "
                f"{image.height}-pixel images in {image.patch_width}-pixel strips, up to "
                f"{image.max_width} wide")

    def draw(self, text: str) -> toy_reading.Drawn:
        """The image the encoder reads for a text (digits)."""
        return toy_reading.draw(text)

    def encode_source(self, text: str) -> tuple[list, bool]:
        """The drawn text's strips, each a list of its pixel values -> (strips, False)."""
        return toy_reading.patches(self.draw(text).image).tolist(), False

    def source_tokens(self, source_ids: list, source_text: str) -> list[str]:
        """Each strip's label: the character drawn on most of it, or · for background."""
        return strip_labels(self.draw(source_text), len(source_ids))

    def source_pieces(self, source_ids: list, source_text: str) -> list[str]:
        return self.source_tokens(source_ids, source_text)

    def source_extras(self, source_text: str) -> dict:
        drawn = self.draw(source_text)
        return {"image": drawn.image, "patch_width": toy_reading.PATCH_WIDTH,
                "source_columns": list(drawn.columns)}

    def corpus_model(self):
        raise InputError("this model's encoder reads an image of digits, not text: a corpus "
                         "of texts has nothing to run through it")

    def stack(self, kind: str):
        if kind == "encoder":
            raise InputError("this encoder reads an image, not tokens: a probe made of "
                             "repeated tokens cannot be fed to it (the decoder can be probed)")
        return super().stack(kind)


def strip_labels(drawn: toy_reading.Drawn, n_strips: int) -> list[str]:
    """For strip i (pixel columns [i w, (i + 1) w)), the character covering most of its
    columns, or BLANK."""
    width = toy_reading.PATCH_WIDTH
    labels = []
    for strip in range(n_strips):
        left, right = strip * width, (strip + 1) * width
        cover = [max(0, min(right, stop) - max(left, start)) for start, stop in drawn.columns]
        best = int(np.argmax(cover)) if cover else -1
        labels.append(drawn.text[best] if best >= 0 and cover[best] > 0 else BLANK)
    return labels
