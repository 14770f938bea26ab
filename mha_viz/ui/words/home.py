"""The words of Home: how to read the maps, and what Continue does."""

from __future__ import annotations

HOW_TO_READ = (
    "- A **head** turns each token (a *query*) into a probability distribution over the "
    "tokens it can see (the *keys*); each row of a map sums to 1.\n"
    "- GPT-2 and SmolLM2 are **causal**: a token sees only itself and earlier tokens, so "
    "the upper triangle of their maps is empty. BERT sees the whole text in both "
    "directions.\n"
    "- Many heads park attention on [CLS], [SEP] or a causal model's first token when "
    "they have nothing better to do; hide them with the *Special tokens* option to see "
    "the rest, or switch the maps to *what moves* to see how little those tokens "
    "send.")
CONTINUE = ("The model writes one token at a time after your text: each time its most likely "
            "next token (temperature 0), or one drawn at random from its guesses (a "
            "temperature above 0; the same seed draws the same). What it writes joins your "
            "text on every page, in yellow boxes marked ")
