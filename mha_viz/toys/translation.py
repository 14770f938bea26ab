"""A toy translation task whose word alignment is known, and the small T5 the project trains
on it (the bundled model "t5-toy"): a class can watch cross-attention find the alignment.

The source is a toy English sentence, the target the same sentence in a toy French: every
word has one translation, and adjectives come after their noun, as in French:

    red car follows small dog near old house
    voiture rouge suit chien petit près maison vieux

so the alignment (which source word each target word translates) crosses wherever there is
an adjective. There are no articles: a sentence often holds two "the", and which one a
target "le" copies cannot be told from the words, so their alignment would not be known.
``sentence(rng)`` draws one pair with its alignment; ``train(folder)`` trains the T5 with
transformers (training only: the app runs it in mha-viz's own engine) and saves
it in Hugging Face's format with its word-level tokenizer.

    python -m mha_viz.toys.translation OUT_FOLDER [--steps 6000] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from .training import SPECIALS, fit, save_tokenizer

# One translation per word: a target word depends on one source word only, so the alignment
# is the only thing cross-attention has to find.
NOUNS = {
    "car": "voiture", "dog": "chien", "house": "maison", "cat": "chat", "tree": "arbre",
    "bird": "oiseau", "girl": "fille", "boy": "garçon", "book": "livre", "table": "table",
    "river": "rivière", "city": "ville", "horse": "cheval", "garden": "jardin",
    "door": "porte", "teacher": "professeur", "student": "étudiant", "boat": "bateau",
    "flower": "fleur", "mouse": "souris", "train": "train", "window": "fenêtre",
    "apple": "pomme", "king": "roi",
}
ADJECTIVES = {
    "red": "rouge", "small": "petit", "old": "vieux", "green": "vert", "big": "grand",
    "happy": "heureux", "blue": "bleu", "quiet": "calme", "black": "noir", "young": "jeune",
    "white": "blanc", "strange": "étrange", "fast": "rapide", "tired": "fatigué",
}
VERBS = {
    "follows": "suit", "sees": "voit", "likes": "aime", "finds": "trouve", "helps": "aide",
    "watches": "regarde", "takes": "prend", "paints": "peint", "calls": "appelle",
    "visits": "visite",
}
PREPOSITIONS = {"near": "près", "under": "sous", "in": "dans", "behind": "derrière"}
DECODER_LAYERS = 2


@dataclass(frozen=True)
class Pair:
    source: list[str]  # toy English words
    target: list[str]  # toy French words
    alignment: list[int]  # for each target word, the index of the source word it translates

    @property
    def source_text(self) -> str:
        return " ".join(self.source)

    @property
    def target_text(self) -> str:
        return " ".join(self.target)


def _noun_phrase(rng: random.Random, source: list, target: list, alignment: list) -> None:
    noun = rng.choice(sorted(NOUNS))
    adjective = rng.choice(sorted(ADJECTIVES)) if rng.random() < 0.6 else None
    at = len(source)
    source += ([adjective] if adjective else []) + [noun]
    target.append(NOUNS[noun])  # the noun first, then its adjective: the crossing
    alignment.append(at + (1 if adjective else 0))
    if adjective:
        target.append(ADJECTIVES[adjective])
        alignment.append(at)


def sentence(rng: random.Random) -> Pair:
    """One sentence pair: subject, verb, object, and sometimes a place."""
    source, target, alignment = [], [], []
    _noun_phrase(rng, source, target, alignment)
    verb = rng.choice(sorted(VERBS))
    alignment.append(len(source))
    source.append(verb)
    target.append(VERBS[verb])
    _noun_phrase(rng, source, target, alignment)
    if rng.random() < 0.5:
        preposition = rng.choice(sorted(PREPOSITIONS))
        alignment.append(len(source))
        source.append(preposition)
        target.append(PREPOSITIONS[preposition])
        _noun_phrase(rng, source, target, alignment)
    return Pair(source, target, alignment)


def vocabulary() -> list[str]:
    """Every word of both languages, once, after the special tokens."""
    words = [*NOUNS, *ADJECTIVES, *VERBS, *PREPOSITIONS, *NOUNS.values(),
             *ADJECTIVES.values(), *VERBS.values(), *PREPOSITIONS.values()]
    return SPECIALS + list(dict.fromkeys(words))


def build_tokenizer(folder: str | Path):
    """A word-level tokenizer over vocabulary() that ends every text with </s>, as T5's
    does; one token per word, so a token's position is its word's."""
    from tokenizers import pre_tokenizers

    return save_tokenizer(folder, vocabulary(), pre_tokenizers.WhitespaceSplit())


def train(folder: str | Path, steps: int = 6000, seed: int = 0, batch: int = 64,
          log=print) -> dict:
    """Train the toy T5 (2 + 2 layers, 4 heads, d_model 128: 0.6 M parameters) on freshly
    drawn pairs, save it to folder, and return its exact-match accuracy on 500 held-out
    pairs (greedy decoding) -> {"accuracy": ..., "steps": ...}."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = build_tokenizer(folder)
    config = T5Config(vocab_size=len(tokenizer), d_model=128, d_kv=32, d_ff=256, num_layers=2,
                      num_decoder_layers=DECODER_LAYERS, num_heads=4,
                      relative_attention_num_buckets=16,
                      relative_attention_max_distance=32, feed_forward_proj="relu",
                      dropout_rate=0.0, pad_token_id=0, eos_token_id=1,
                      decoder_start_token_id=0, n_positions=64)
    model = T5ForConditionalGeneration(config)
    model.train()

    def batch_loss(step: int):
        pairs = [sentence(rng) for _ in range(batch)]
        inputs = tokenizer([p.source_text for p in pairs], padding=True, return_tensors="pt")
        labels = tokenizer([p.target_text for p in pairs], padding=True,
                           return_tensors="pt")["input_ids"]
        labels[labels == 0] = -100  # padding is not predicted
        return model(**inputs, labels=labels).loss

    fit(list(model.parameters()), batch_loss, steps, 2e-3, log)
    model.eval()
    held_out = random.Random(seed + 1)
    pairs = [sentence(held_out) for _ in range(500)]
    inputs = tokenizer([p.source_text for p in pairs], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=20, do_sample=False, num_beams=1)
    decoded = tokenizer.batch_decode(out, skip_special_tokens=True)
    accuracy = sum(d.split() == p.target for d, p in zip(decoded, pairs)) / len(pairs)
    model.save_pretrained(str(folder), safe_serialization=True)
    return {"accuracy": accuracy, "steps": steps}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = train(args.folder, args.steps, args.seed)
    print(f"exact-match accuracy on 500 held-out pairs: {result['accuracy']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
