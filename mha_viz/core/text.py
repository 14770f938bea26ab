"""Text shown as what it is: characters that change how other text is drawn, or draw nothing,
are written as visible escapes in labels.

A token holding U+202E (right-to-left override) would otherwise draw "\u202egnp.exe" as
"exe.png"; a control character can hide or reorder a label. Joiners (U+200D, U+200C) stay:
emoji sequences and many scripts need them.
"""

from __future__ import annotations

import unicodedata

from .errors import InputError

# Bidirectional formatting characters (Unicode's Bidi_Control property).
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                          "\u2066\u2067\u2068\u2069")
# Shown by our own signs elsewhere (model.display_tokens): keep them as they are.
_KEPT = frozenset("␣↵⇥")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """text with every control character (Unicode category Cc) and bidirectional formatting
    character written as an escape (\\x00, \\u202e); everything else unchanged."""
    text = str(text)
    if text.isprintable() and not BIDI_CONTROLS.intersection(text):
        return text  # the common case, without a loop in Python
    return "".join(_escape(c) if (c in BIDI_CONTROLS or unicodedata.category(c) == "Cc")
                   and c not in _KEPT else c for c in text)


def decode_text_file(data: bytes, name: str, max_bytes: int, what: str) -> str:
    """An uploaded text file's text (UTF-8, a BOM dropped), or a clear error: empty, larger
    than max_bytes (the message ends "over the N {what}"), binary, not UTF-8."""
    if not data:
        raise InputError(f"'{name}' is empty")
    if len(data) > max_bytes:
        raise InputError(f"'{name}' is {len(data):,} bytes, over the {max_bytes:,} {what}")
    if b"\0" in data[:65536]:
        raise InputError(f"'{name}' is a binary file, not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"'{name}' is not UTF-8 text (a binary file?)") from None
