"""Texts of a corpus read whole from a small file (an upload, a CLI file up to
MAX_CORPUS_BYTES): .txt, .csv, .jsonl, and the built-in demo corpus."""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field

from ..core.errors import InputError
from ..core.text import decode_text_file

MAX_CORPUS_BYTES = 20 * 2**20  # an uploaded corpus; larger ones belong on the command line


@dataclass
class CorpusText:
    """Texts read from a file, and what was left out."""

    texts: list[str]
    source: str  # in words: "demo: Python's documentation", "notes.csv, column 'text'"
    skipped: int = 0  # lines or rows that were not a text (invalid JSON, an empty cell)
    columns: list[str] = field(default_factory=list)  # a CSV's columns / JSON lines' fields


def demo_texts(limit: int | None = None) -> list[str]:
    """A corpus every machine has offline: the topics of the English documentation that
    ships with CPython (pydoc_data.topics), one text per paragraph of 200+ characters."""
    from pydoc_data.topics import topics

    texts = []
    for name in sorted(topics):
        for paragraph in re.split(r"\n\s*\n", topics[name]):
            paragraph = " ".join(paragraph.split())
            if len(paragraph) >= 200:
                texts.append(paragraph)
    return texts if limit is None else texts[:limit]


def _decoded(data: bytes, name: str) -> str:
    return decode_text_file(data, name, MAX_CORPUS_BYTES,
                            "a corpus may have here (the command line takes larger ones)")


def read_corpus(data: bytes, name: str, column: str | None = None) -> CorpusText:
    """Texts from a .txt (one text per line; or per paragraph when blank lines separate
    them), .csv (the ``column``; the first one when not given), .jsonl (the field
    ``column``, default "text"; lines that are not JSON objects with it are skipped and
    counted) or .parquet (the text ``column``: "text" or the only one when not given; read
    by pyarrow, never unpickled). Raises InputError for an empty, binary or unusable
    file."""
    kind = name.lower().rsplit(".", 1)[-1]
    if kind == "parquet":
        return _read_parquet(data, name, column)
    text = _decoded(data, name)
    if kind == "csv":
        result = _read_csv(text, name, column)
    elif kind in ("jsonl", "ndjson"):
        result = _read_jsonl(text, name, column or "text")
    else:
        pieces = re.split(r"\n\s*\n", text) if re.search(r"\n\s*\n", text.strip()) \
            else text.splitlines()
        result = CorpusText([p.strip() for p in pieces if p.strip()], f"'{name}'")
    if not result.texts:
        raise InputError(f"'{name}' holds no text" + (
            f" ({result.skipped} line(s) skipped)" if result.skipped else ""))
    return result


def columns_of(data: bytes, name: str) -> list[str]:
    """The columns of a .csv (its header), the fields of a .jsonl's objects (the first
    1,000 lines) or a .parquet's text columns, for picking the one that holds the texts;
    [] for other files."""
    kind = name.lower().rsplit(".", 1)[-1]
    if kind == "parquet":
        from .sources import table_columns

        return table_columns(data, name)
    text = _decoded(data, name)
    if kind == "csv":
        try:
            return [h.strip() for h in next(csv.reader(io.StringIO(text)), [])]
        except csv.Error:
            return []
    if kind in ("jsonl", "ndjson"):
        fields = {}
        for line in text.splitlines()[:1000]:
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(item, dict):
                fields.update(dict.fromkeys(map(str, item)))
        return list(fields)
    return []


def _read_parquet(data: bytes, name: str, column: str | None) -> CorpusText:
    from .sources import read_table_bytes

    if len(data) > MAX_CORPUS_BYTES:
        raise InputError(f"'{name}' is {len(data) / 2**20:.1f} MB, more than the "
                         f"{MAX_CORPUS_BYTES // 2**20} MB a corpus may have here (the command "
                         f"line takes larger ones)")
    texts, columns, column, skipped = read_table_bytes(data, name, column)
    if not texts:
        raise InputError(f"'{name}' holds no text in its column '{column}'")
    return CorpusText(texts, f"'{name}', column '{column}'", skipped, columns)


def _read_csv(text: str, name: str, column: str | None) -> CorpusText:
    try:
        reader = csv.reader(io.StringIO(text))
        header = next(reader, None)
        rows = list(reader)
    except csv.Error as error:
        raise InputError(f"'{name}' is not a readable CSV file ({error})") from None
    if not header:
        raise InputError(f"'{name}' has no header row")
    header = [h.strip() for h in header]
    column = header[0] if column is None else column
    if column not in header:
        raise InputError(f"'{name}' has no column '{column}'; its columns are "
                         f"{', '.join(repr(h) for h in header[:20])}")
    at = header.index(column)
    texts = [row[at].strip() for row in rows if len(row) > at and row[at].strip()]
    return CorpusText(texts, f"'{name}', column '{column}'", len(rows) - len(texts), header)


def _read_jsonl(text: str, name: str, field_name: str) -> CorpusText:
    texts, skipped, fields = [], 0, {}
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            skipped += 1
            continue
        if not isinstance(item, dict):
            skipped += 1
            continue
        fields.update(dict.fromkeys(map(str, item)))
        value = item.get(field_name)
        if isinstance(value, str) and value.strip():
            texts.append(value.strip())
        else:
            skipped += 1
    if not texts and fields and field_name not in fields:
        raise InputError(f"'{name}' has no field '{field_name}'; its fields are "
                         f"{', '.join(repr(f) for f in list(fields)[:20])}")
    return CorpusText(texts, f"'{name}', field '{field_name}'", skipped, list(fields))
