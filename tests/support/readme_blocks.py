"""README.md's code blocks, as tests run them: each ```python block (in the order a reader
meets them, one namespace for all, as a notebook session) and the `mha-viz` / `python -m
mha_viz` commands of each ```bash block, with the line each starts at and whether it loads
SmolLM2 (`slow`: then its test is marked slow)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)
# what reads every checkpoint of a training run (half a minute and more): slow as well
_TRAINING_RUN = re.compile(r"training_dynamics\(|mha_viz dynamics ")


@dataclass(frozen=True)
class Block:
    language: str  # "python" or "bash"
    code: str
    line: int  # where its fence opens in README.md
    slow: bool  # it loads SmolLM2 (or reads what such a block defined) or a training run

    @property
    def id(self) -> str:
        return f"{self.language}@{self.line}"


def _names(code: str) -> tuple[set[str], set[str]]:
    """(the names a python block assigns, the names it reads)."""
    tree = ast.parse(code)
    stored, loaded = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (stored if isinstance(node.ctx, ast.Store) else loaded).add(node.id)
    return stored, loaded


def _loads_smollm2(code: str) -> bool:
    """Whether a python block names SmolLM2 in its code (a string it passes), not in a
    comment."""
    return any(isinstance(node, ast.Constant) and isinstance(node.value, str)
               and "smollm2" in node.value for node in ast.walk(ast.parse(code)))


def blocks(language: str) -> list[Block]:
    text = README.read_text(encoding="utf-8")
    found, smollm2_names = [], set()
    for m in _FENCE.finditer(text):
        code = m.group(2)
        if m.group(1) == "python":
            stored, loaded = _names(code)
            slow = _loads_smollm2(code) or bool(loaded & smollm2_names) \
                or bool(_TRAINING_RUN.search(code))
            if slow:
                smollm2_names |= stored
            else:
                smollm2_names -= stored  # assigned again without SmolLM2
        else:  # a command's words, not its comments
            words = re.sub(r"#.*", "", code)
            slow = "smollm2" in words or bool(_TRAINING_RUN.search(words))
        if m.group(1) == language:
            found.append(Block(language, code, text[:m.start()].count("\n") + 1, slow))
    return found


def commands(block: Block) -> list[str]:
    """The block's commands (a line ending in a backslash continues on the next), comments
    cut off."""
    joined = re.sub(r"\\\n\s*", " ", block.code)
    found = []
    for line in joined.splitlines():
        command = re.sub(r"\s+#.*$", "", line).strip()
        if command:
            found.append(command)
    return found


@dataclass(frozen=True)
class Claim:
    """A line whose comment opens with a value: `lm.score(ioi, metric=metric)  # 6.12; ...`
    claims the expression gives 6.12 (to the digits written), `lm.info.kv_heads  # (0, 0,
    ...): ...` that it equals the tuple."""
    expression: str
    value: object
    written: str  # the value as README writes it
    line: int


def claims(block: Block) -> list[Claim]:
    """The claims of a python block: each line that is one expression and whose comment
    opens with a number, a tuple or a list (up to a ':' or ';')."""
    found = []
    for offset, line in enumerate(block.code.splitlines()):
        code, hash_, comment = line.partition("  #")
        if not hash_ or not code.strip():
            continue
        try:
            body = ast.parse(code.strip()).body
        except SyntaxError:  # a line of a statement that goes on
            continue
        if len(body) != 1 or not isinstance(body[0], ast.Expr):
            continue
        written = re.split(r"[:;]", comment.strip(), maxsplit=1)[0].strip()
        if not re.match(r"[-+\d(\[]", written):  # words, or a list of what it may be
            continue
        try:
            value = ast.literal_eval(written.replace("...", "None"))
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, (int, float, tuple, list)) and not isinstance(value, bool):
            found.append(Claim(code.strip(), value, written, block.line + 1 + offset))
    return found


def holds(claim: Claim, value) -> bool:
    """Whether a value is what the claim writes: a number to the digits written, a tuple or
    a list element by element ("..." standing for any elements between)."""
    if isinstance(claim.value, (tuple, list)):
        written, value = list(claim.value), list(value)
        if None in written:  # [10, 12, 15, ..., 3000]: the ends
            cut = written.index(None)
            head, tail = written[:cut], written[cut + 1:]
            return (value[:len(head)] == head and value[len(value) - len(tail):] == tail
                    and len(value) >= len(head) + len(tail))
        return value == written
    digits = len(claim.written.partition(".")[2])
    return abs(float(value) - claim.value) <= 0.5 * 10 ** -digits + 1e-9
