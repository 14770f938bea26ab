"""English prose that ships offline, for training and measuring the bundled SmolLM2
dictionaries (docs/analyses.md, "Features at the head"): Debian's packages

    apt-get install fortunes debian-handbook wordnet-base

give fortune cookies (quotations, literature, jokes, proverbs: /usr/share/games/fortunes,
BSD fortune-mod's collection), the Debian Administrator's Handbook (long-form prose,
GPL-2+ or CC-BY-SA-3.0) and WordNet 3.0's glosses and example sentences (WordNet's licence).
Each text is one fortune, one paragraph or one gloss; every tenth text of each source is held
out (never trained on). The texts are written shuffled (seeded) as JSON lines:

    python scripts/english_prose.py OUT_FOLDER      # -> OUT/train.jsonl, OUT/held_out.jsonl
"""

import html
import json
import random
import re
import sys
from pathlib import Path

FORTUNES = Path("/usr/share/games/fortunes")
# the collections of plain English prose (not ASCII art, code, or other languages)
FORTUNE_FILES = ("art", "cookie", "definitions", "drugs", "education", "food", "fortunes",
                 "goedel", "humorists", "kids", "law", "literature", "love", "magic",
                 "medicine", "men-women", "miscellaneous", "news", "paradoxum", "people",
                 "pets", "platitudes", "politics", "pratchett", "riddles", "science",
                 "songs-poems", "sports", "wisdom", "work", "zippy")
HANDBOOK = Path("/usr/share/doc/debian-handbook/html/en-US")
WORDNET = Path("/usr/share/wordnet")
WORDNET_EVERY = 5  # one gloss in five: short definitions would otherwise outweigh the prose
HELD_OUT_EVERY = 10


def fortunes() -> list[str]:
    texts = []
    for name in FORTUNE_FILES:
        path = FORTUNES / name
        if path.is_file():
            for piece in path.read_text(errors="replace").split("\n%\n"):
                text = " ".join(piece.split())
                if len(text) >= 80:
                    texts.append(text)
    return texts


def handbook() -> list[str]:
    texts = []
    for path in sorted(HANDBOOK.glob("*.html")):
        page = path.read_text(errors="replace")
        for paragraph in re.findall(r'<div class="para"[^>]*>(.*?)</div>', page, flags=re.S):
            text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", paragraph)).split())
            if len(text) >= 120:
                texts.append(text)
    return texts


def wordnet() -> list[str]:
    texts = []
    for part in ("noun", "verb", "adj", "adv"):
        lines = (WORDNET / f"data.{part}").read_text(errors="replace").splitlines()
        for line in lines[::WORDNET_EVERY]:
            if "|" in line and not line.startswith(" "):
                gloss = line.split("|", 1)[1].strip()
                if len(gloss) >= 60 and '"' in gloss:  # a definition with example sentences
                    texts.append(gloss[0].upper() + gloss[1:])
    return texts


def main(out: str) -> None:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    train, held = [], []
    for source in (fortunes(), handbook(), wordnet()):
        for index, text in enumerate(source):
            (held if index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else train).append(text)
    generator = random.Random(0)
    for name, texts in (("train", train), ("held_out", held)):
        generator.shuffle(texts)
        with open(folder / f"{name}.jsonl", "w") as file:
            for text in texts:
                file.write(json.dumps({"text": text}) + "\n")
        print(f"{name}: {len(texts):,} texts, {sum(map(len, texts)):,} characters")


if __name__ == "__main__":
    main(sys.argv[1])
