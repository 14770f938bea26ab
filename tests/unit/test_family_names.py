"""Nothing outside mha_viz/checkpoints/families/ branches on a family or on a family's special
token (docs/architecture.md): read from the source's syntax tree, not grepped.

What counts: a string constant equal to a family's name, model type or GGUF architecture (read
from the family modules themselves) or to a well-known special token, used where it decides
something: an operand of a comparison (==, !=, in, not in; the members of a tuple, list or
set compared with), a dict literal's key, a subscript, the first argument of
.get/.pop/.setdefault/.startswith/.endswith/.index/.count/.remove, or a match-case value.
A docstring, a message or an example sentence naming BERT decides nothing and is fine. Code
asks the model instead: info.causal, a StackConfig setting, trace.special_tokens.

Outside the rule: checkpoints/families/ (the one place that knows a family), testing/ and
toys/ (they build and train checkpoints of named families, with their own tokenizers).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXEMPT = ("mha_viz/checkpoints/families/", "mha_viz/testing/", "mha_viz/toys/")
SPECIAL_TOKENS = frozenset({
    "[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]", "<s>", "</s>", "<pad>", "<unk>", "<mask>",
    "<bos>", "<eos>", "<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>",
    "<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>"})
DECIDING_METHODS = frozenset({"get", "pop", "setdefault", "startswith", "endswith", "index",
                              "count", "remove"})
# Allowed, by (file, constant): how many each may hold. ui/settings.py keys the model picker
# by the hub id "gpt2" (a checkpoint's name to load, which decides nothing about a family).
KNOWN = Counter({
    ("mha_viz/ui/settings.py", "gpt2"): 1,
})


def family_names() -> frozenset[str]:
    from mha_viz.checkpoints.families import FAMILIES

    names = set()
    for family in FAMILIES:
        names |= {family.NAME, *family.MODEL_TYPES, *family.GGUF_ARCHITECTURES}
    return frozenset(name.lower() for name in names)


def _strings(node):
    """The string constants a node is, or holds as a tuple, list or set literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for element in node.elts:
            yield from _strings(element)


def _deciding_strings(node):
    """The string constants that decide something at this node (see the module docstring)."""
    if isinstance(node, ast.Compare):
        for operand in (node.left, *node.comparators):
            yield from _strings(operand)
    elif isinstance(node, ast.Dict):
        for key in node.keys:
            if key is not None:  # None: a **mapping spread into the dict
                yield from _strings(key)
    elif isinstance(node, ast.Subscript):
        yield from _strings(node.slice)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in DECIDING_METHODS and node.args:
        yield from _strings(node.args[0])
    elif isinstance(node, ast.MatchValue):
        yield from _strings(node.value)


def violations_in(source: str, names: frozenset[str]) -> list[tuple[int, str]]:
    """(line, constant) for every family name or special token that decides something."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for constant in _deciding_strings(node):
            if constant.value in SPECIAL_TOKENS or constant.value.lower() in names:
                found.append((constant.lineno, constant.value))
    return sorted(found)


def checked_files() -> list[Path]:
    files = [*(ROOT / "mha_viz").rglob("*.py"), *(ROOT / "pages").glob("*.py"), ROOT / "app.py"]
    return sorted(p for p in files if p.exists()
                  and not p.relative_to(ROOT).as_posix().startswith(EXEMPT))


def test_no_code_outside_the_families_names_a_family_or_its_token():
    names = family_names()
    assert {"bert", "gpt2", "llama", "t5", "qwen2"} <= names  # read from the families
    found = Counter()
    where = {}
    for path in checked_files():
        rel = path.relative_to(ROOT).as_posix()
        for line, constant in violations_in(path.read_text(encoding="utf-8"), names):
            found[rel, constant] += 1
            where.setdefault((rel, constant), []).append(line)
    new = {key: count - KNOWN[key] for key, count in found.items() if count > KNOWN[key]}
    assert not new, "a family or a family's special token named outside checkpoints/" \
        "families/ (ask the model: info.causal, a StackConfig setting, trace.special_tokens):\n" \
        + "\n".join(f"{rel}:{','.join(map(str, where[rel, constant]))}: {constant!r}"
                    for rel, constant in sorted(new))


def test_the_rule_tells_a_decision_from_a_sentence():
    """What the rule flags and what it leaves alone, on code written here."""
    names = family_names()
    flagged = '''
if model.info.model_type == "llama":
    pass
if token in ("[CLS]", "[SEP]"):
    pass
if "bert" != family or kind.startswith("Gemma2"):
    pass
scale = {"t5": 1.0}["t5"]
match model_type:
    case "gpt2":
        pass
'''
    assert violations_in(flagged, names) == [
        (2, "llama"), (4, "[CLS]"), (4, "[SEP]"), (6, "Gemma2"), (6, "bert"), (8, "t5"),
        (8, "t5"), (10, "gpt2")]
    fine = '''
"""Reads BERT, GPT-2 and Llama checkpoints; BERT wraps a text in [CLS] ... [SEP]."""
EXAMPLE = "bert"
raise ValueError(f"{name!r} is not a llama checkpoint: [CLS] missing")
if info.causal and token == specials.get("cls"):
    print("a BERT-like tokenizer")
'''
    assert violations_in(fine, names) == []
