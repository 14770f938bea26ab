"""Cross-modal attention with a known answer: a tiny encoder-decoder (BART by default) that
reads a line of digits drawn in an image and writes them out (the bundled model "reader-toy"). Its encoder reads the
image, cut into vertical strips 4 pixels wide (a linear patch embedding, as ViT does); its
decoder writes the characters. Where each character was drawn is known, so a class can watch
cross-attention look at the right strip as each character is written, and a test can check
it.

``draw(text)`` draws a text as the app shows it (fixed spacing); ``example(rng)`` draws a
random one with random spacing and where each character went; ``train(folder)`` trains the
model with transformers (training only: the app runs it in mha-viz's own engine, the patch
embedding included) and saves it in Hugging Face's format, with a character tokenizer and
the image's sizes under config.json's "mha_viz_image".

    python -m mha_viz.toys.reading OUT_FOLDER [--steps 1500] [--seed 0] [--family bart]
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..core.errors import InputError
from .training import SPECIALS, fit, save_tokenizer

CHARACTERS = "0123456789"
HEIGHT = 16  # pixels
PATCH_WIDTH = 4  # pixels: one strip, one encoder position
WIDTH = 112  # pixels: 28 strips
MAX_CHARACTERS = 6
FONT_SIZE = 14
CELL = 16  # pixels: each character is written in its own box, as on a form
LEFT = 8  # pixels before the first box
LAYERS = 2  # in the encoder and in the decoder


@dataclass(frozen=True)
class Drawn:
    """A drawn text: the image [HEIGHT, WIDTH] (0 = background, 1 = ink) and the pixel
    columns [start, stop) each character covers."""
    text: str
    image: np.ndarray
    columns: list[tuple[int, int]]

    def strips(self, index: int) -> range:
        """The strips (encoder positions) that character `index` was drawn on."""
        start, stop = self.columns[index]
        return range(start // PATCH_WIDTH, -(-stop // PATCH_WIDTH))


@lru_cache(maxsize=1)
def _font():
    from PIL import ImageFont

    return ImageFont.load_default(size=FONT_SIZE)  # Pillow's own font: the same everywhere


def _check(text: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InputError("type the digits to draw")
    text = "".join(text.split())
    bad = sorted({c for c in text if c not in CHARACTERS})
    if bad:
        shown = ", ".join(repr(c) for c in bad[:5])
        raise InputError(f"the reader knows only the digits 0-9; {shown} cannot be drawn")
    if len(text) > MAX_CHARACTERS:
        raise InputError(f"the reader's image holds at most {MAX_CHARACTERS} characters; "
                         f"this is {len(text)}")
    return text


def _render(text: str, shifts: list[int], top: int = -1) -> Drawn:
    """Character k drawn in box k (CELL pixels wide, the first LEFT pixels in), shifts[k]
    pixels from the box's left edge, `top` pixels down."""
    from PIL import Image, ImageDraw

    font = _font()
    canvas = Image.new("L", (WIDTH, HEIGHT), 0)
    pen = ImageDraw.Draw(canvas)
    columns = []
    for index, (character, shift) in enumerate(zip(text, shifts)):
        x = LEFT + CELL * index + shift
        ink = font.getbbox(character)  # the glyph's own pixels
        pen.text((x, top), character, fill=255, font=font)
        columns.append((x + ink[0], x + ink[2]))
    return Drawn(text, np.asarray(canvas, dtype=np.float32) / 255.0, columns)


def _room(character: str) -> int:
    """How far a character can move right inside its box."""
    return max(0, CELL - _font().getbbox(character)[2])


def draw(text: str) -> Drawn:
    """The text as the app draws it (spaces dropped): each character centred in its box."""
    text = _check(text)
    return _render(text, [_room(c) // 2 for c in text])


def patches(image: np.ndarray) -> np.ndarray:
    """[WIDTH / PATCH_WIDTH, HEIGHT * PATCH_WIDTH]: the image cut into vertical strips, left
    to right, each strip's pixels row by row (what the patch embedding reads)."""
    image = np.asarray(image, dtype=np.float32)
    if image.ndim != 2 or image.shape[0] != HEIGHT or image.shape[1] % PATCH_WIDTH:
        raise InputError(f"the image must be {HEIGHT} pixels high and a multiple of "
                         f"{PATCH_WIDTH} wide, got {image.shape}")
    n = image.shape[1] // PATCH_WIDTH
    return image.reshape(HEIGHT, n, PATCH_WIDTH).transpose(1, 0, 2).reshape(n, -1)


def example(rng: random.Random) -> Drawn:
    """A random text of 1-6 digits, each anywhere in its box, the line shifted up or down
    by a pixel or two."""
    text = "".join(rng.choice(CHARACTERS) for _ in range(rng.randint(1, MAX_CHARACTERS)))
    return _render(text, [rng.randint(0, _room(c)) for c in text], rng.choice((-2, -1, 0)))


def vocabulary() -> list[str]:
    return SPECIALS + list(CHARACTERS)


def build_tokenizer(folder: str | Path):
    """A tokenizer of one token per character, ending every text with </s>."""
    from tokenizers import Regex, decoders, pre_tokenizers

    return save_tokenizer(folder, vocabulary(), pre_tokenizers.Split(Regex(r"\S"), "isolated"),
                          decoders.Fuse())


def image_config() -> dict:
    return {"height": HEIGHT, "patch_width": PATCH_WIDTH, "max_width": WIDTH}


def train(folder: str | Path, steps: int = 1500, seed: int = 0, batch: int = 64,
          family: str = "bart", log=print) -> dict:
    """Train the reader (BART, or T5 with family="t5": 2 + 2 layers, 4 heads, d_model 128, a
    linear patch embedding and a learned position per strip) on freshly drawn texts, save it to folder, and return its exact-match
    accuracy on 500 held-out images (greedy decoding) -> {"accuracy": ..., "steps": ...}."""
    import json

    import torch
    from safetensors.torch import load_file, save_file
    from transformers import (BartConfig, BartForConditionalGeneration, T5Config,
                              T5ForConditionalGeneration)

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = build_tokenizer(folder)
    if family == "t5":
        config = T5Config(vocab_size=len(tokenizer), d_model=128, d_kv=32, d_ff=256,
                          num_layers=LAYERS, num_decoder_layers=LAYERS, num_heads=4,
                          relative_attention_num_buckets=16,
                          relative_attention_max_distance=32, feed_forward_proj="relu",
                          dropout_rate=0.0, pad_token_id=0, eos_token_id=1,
                          decoder_start_token_id=0, n_positions=WIDTH // PATCH_WIDTH)
        model = T5ForConditionalGeneration(config)
    else:  # learned absolute positions: the decoder knows which digit it is writing
        config = BartConfig(vocab_size=len(tokenizer), d_model=128, encoder_layers=LAYERS,
                            decoder_layers=LAYERS, encoder_attention_heads=4,
                            decoder_attention_heads=4, encoder_ffn_dim=256,
                            decoder_ffn_dim=256, max_position_embeddings=WIDTH // PATCH_WIDTH,
                            dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                            pad_token_id=0, eos_token_id=1, bos_token_id=None,
                            decoder_start_token_id=0, forced_eos_token_id=None,
                            forced_bos_token_id=None)
        model = BartForConditionalGeneration(config)
    patch_embed = torch.nn.Linear(HEIGHT * PATCH_WIDTH, config.d_model)
    # where each strip is, learned, as ViT's position embeddings (T5's relative bias alone
    # would leave a strip's place in the line hard to find)
    patch_positions = torch.nn.Parameter(0.02 * torch.randn(WIDTH // PATCH_WIDTH,
                                                            config.d_model))
    parameters = [*model.parameters(), *patch_embed.parameters(), patch_positions]

    def embedded(drawn: list[Drawn]) -> torch.Tensor:
        return (patch_embed(torch.tensor(np.stack([patches(d.image) for d in drawn])))
                + patch_positions)

    model.train()

    def batch_loss(step: int):
        drawn = [example(rng) for _ in range(batch)]
        labels = tokenizer([d.text for d in drawn], padding=True,
                           return_tensors="pt")["input_ids"]
        labels[labels == 0] = -100  # padding is not predicted
        return model(inputs_embeds=embedded(drawn), labels=labels).loss

    # BART's post-norm wants a gentler start than T5
    fit(parameters, batch_loss, steps, 2e-3 if family == "t5" else 1e-3, log)
    model.eval()
    held_out = random.Random(seed + 1)
    drawn = [example(held_out) for _ in range(500)]
    with torch.no_grad():
        out = model.generate(inputs_embeds=embedded(drawn), max_new_tokens=MAX_CHARACTERS + 1,
                             do_sample=False, num_beams=1)
    decoded = tokenizer.batch_decode(out, skip_special_tokens=True)
    accuracy = sum(d.replace(" ", "") == x.text for d, x in zip(decoded, drawn)) / len(drawn)
    model.save_pretrained(str(folder), safe_serialization=True)
    weights = load_file(str(folder / "model.safetensors"))
    weights.update({f"patch_embed.{k}": v.detach().contiguous()
                    for k, v in patch_embed.state_dict().items()})
    weights["patch_positions"] = patch_positions.detach().contiguous()
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    written = json.loads((folder / "config.json").read_text())
    written["mha_viz_image"] = image_config()
    (folder / "config.json").write_text(json.dumps(written, indent=2) + "\n")
    return {"accuracy": accuracy, "steps": steps}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--family", choices=["bart", "t5"], default="bart")
    args = parser.parse_args(argv)
    result = train(args.folder, args.steps, args.seed, family=args.family)
    print(f"exact-match accuracy on 500 held-out images: {result['accuracy']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
