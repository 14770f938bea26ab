"""The encoder-decoder pages' input: the bundled toy T5's source and target, and the link and
session state that open a page on them."""


SOURCE = "red car follows small dog near old house"
TARGET = "voiture rouge suit chien petit près maison vieux"


def params(kind: str, target: str = TARGET) -> tuple[dict, dict]:
    return ({"model": "t5-toy", "kind": kind},
            {"_mv_state_text": SOURCE, "_mv_state_target": target})
