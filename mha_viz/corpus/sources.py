"""Texts of a corpus of any size, streamed from files a batch at a time, never read whole:
.txt, .csv, .jsonl, Parquet and Arrow files, a folder of Parquet/Arrow/JSONL/CSV shards, and
a Hugging Face dataset saved to disk (``save_to_disk``: Arrow files named by its state.json;
read with pyarrow, so nothing is unpickled and ``datasets`` need not be installed).

    texts = open_texts("corpus.parquet", column="text", sample=10_000, seed=0)
    texts.source, texts.columns, texts.total   # in words; the columns; texts to come, if known
    for text in texts: ...                    # each text once; texts.skipped counts the rest

``limit`` keeps the first N texts; ``sample`` draws N texts uniformly from the whole corpus
(reservoir sampling with numpy's default_rng(seed): the same seed and input, the same texts,
in the corpus's order), holding only those N in memory.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from ..core.digest import digest
from ..core.errors import InputError

ARROW_BATCH_ROWS = 4096  # rows per batch read from a Parquet or Arrow file
READ_BUFFER = 2**16  # bytes Parquet reads at a time
TEXT_SUFFIXES = (".txt", ".text", ".md")
TABLE_SUFFIXES = (".parquet", ".arrow", ".feather", ".ipc")
LINE_SUFFIXES = (".jsonl", ".ndjson")
SUFFIXES = TEXT_SUFFIXES + (".csv",) + LINE_SUFFIXES + TABLE_SUFFIXES
DEFAULT_FIELD = "text"  # a JSON lines field, a table column: when none is given and it exists


@dataclass
class TextStream:
    """Texts read lazily from one or more files. Iterate it once; ``skipped`` then counts
    the rows that were not a text (empty, null, an invalid JSON line)."""

    files: list[Path]
    column: str | None
    source: str  # "'corpus.parquet', column 'text'"
    columns: list[str] = field(default_factory=list)
    rows: int | None = None  # rows in the files, when their metadata says (Parquet, Arrow)
    limit: int | None = None
    sample: int | None = None
    seed: int = 0
    skipped: int = 0

    @property
    def total(self) -> int | None:
        """How many texts the iteration gives at most, when known in advance."""
        bounds = [b for b in (self.rows, self.limit, self.sample) if b is not None]
        return min(bounds) if bounds else None

    def __iter__(self) -> Iterator[str]:
        texts = self._all()
        if self.limit is not None:
            texts = _first(texts, self.limit)
        if self.sample is not None:
            yield from _reservoir(texts, self.sample, self.seed)
        else:
            yield from texts

    def row_groups(self) -> list["RowGroup"] | None:
        """The input as Parquet row groups that workers read themselves (a cluster then
        reads in parallel), or None when it must be read here: not all Parquet, or a
        limit or a sample (which need one pass over the whole input in order)."""
        if self.limit is not None or self.sample is not None or not all(
                _kind(f) == "parquet" for f in self.files):
            return None
        import pyarrow.parquet as pq

        groups = []
        for path in self.files:
            stat = path.stat()
            stamp = f"{stat.st_size}:{stat.st_mtime_ns}"
            for group in range(pq.ParquetFile(path).metadata.num_row_groups):
                groups.append(RowGroup(len(groups), str(path.resolve()), self.column, group,
                                       stamp))
        return groups

    def _all(self) -> Iterator[str]:
        for path in self.files:
            for value in _values(path, self.column):
                if isinstance(value, str) and value.strip():
                    yield value.strip()
                else:
                    self.skipped += 1


@dataclass(frozen=True)
class RowGroup:
    """One row group of a Parquet file: the unit a Ray worker reads, cuts and measures by
    itself. Write files with row groups of some thousands of rows for fine-grained work."""
    index: int
    path: str  # the same path on every node (a shared file system)
    column: str
    row_group: int
    stamp: str  # the file's size and modification time: a resumed run checks them

    @property
    def digest(self) -> str:
        """What the row group is (its file's name, size and time, the group, the column): a
        resumed run checks it, as it checks a shard's."""
        return digest(Path(self.path).name, self.stamp, self.row_group, self.column)

    def texts(self) -> tuple[list[str], int]:
        """(its texts, the rows that were not a text)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        name = Path(self.path).name
        try:
            values = pq.ParquetFile(self.path).read_row_group(
                self.row_group, columns=[self.column]).column(0).to_pylist()
        except (pa.ArrowException, OSError) as error:
            raise InputError(f"'{name}' row group {self.row_group} could not be read "
                             f"({_short(error)})") from None
        texts = [v.strip() for v in values if isinstance(v, str) and v.strip()]
        return texts, len(values) - len(texts)


def open_texts(path, column: str | None = None, limit: int | None = None,
               sample: int | None = None, seed: int = 0, split: str | None = None
               ) -> TextStream:
    """The texts of a file or folder (see the module's docstring), checked before any is
    read: the files exist and are readable, and the column exists and holds text (the
    error lists the columns). column: a CSV's column (default: its first), a JSON lines
    field or a table's column (default "text", or a table's only text column). split: the
    split of a saved DatasetDict (default "train", or its only split)."""
    for name, value in (("limit", limit), ("sample", sample)):
        if value is not None and (isinstance(value, bool) or int(value) < 1):
            raise InputError(f"--{name} must be a whole number of at least 1, got {value!r}")
    path = Path(path)
    if not path.exists():
        raise InputError(f"'{path.name}' does not exist")
    files = _files_of(path, split)
    kinds = {_kind(f) for f in files}
    if len(kinds) > 1:
        raise InputError(f"'{path.name}' mixes file kinds ({', '.join(sorted(kinds))}): give one "
                         f"kind of file at a time")
    kind = kinds.pop()
    columns, column, rows = _schema(files, kind, column)
    described = f"'{path.name}'" + (f" ({len(files)} files)" if len(files) > 1 else "")
    if column is not None:
        described += f", {'field' if kind == 'jsonl' else 'column'} '{column}'"
    return TextStream(files, column, described, columns, rows,
                      None if limit is None else int(limit),
                      None if sample is None else int(sample), int(seed))


# --------------------------------------------------------------------------- files


def _kind(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in TABLE_SUFFIXES:
        return "parquet" if suffix == ".parquet" else "arrow"
    if suffix in LINE_SUFFIXES:
        return "jsonl"
    return "csv" if suffix == ".csv" else "txt"


def _files_of(path: Path, split: str | None) -> list[Path]:
    """The files a path names: itself, a saved dataset's Arrow files, or a folder's data
    files (recursively, in name order)."""
    if path.is_file():
        if path.suffix.lower() not in SUFFIXES:
            raise InputError(f"'{path.name}' is not a corpus file: give a "
                             f"{', '.join(SUFFIXES)} file or a folder of them")
        return [path]
    if (path / "dataset_dict.json").is_file():  # DatasetDict.save_to_disk: one folder a split
        splits = _json(path / "dataset_dict.json").get("splits") or []
        chosen = split or ("train" if "train" in splits or len(splits) != 1 else splits[0])
        if chosen not in splits:
            raise InputError(f"the dataset '{path.name}' has no split '{chosen}'; its splits "
                             f"are {', '.join(map(repr, splits))}")
        path = path / chosen
    if (path / "state.json").is_file():  # Dataset.save_to_disk
        names = [f.get("filename") for f in _json(path / "state.json").get("_data_files", [])]
        files = [path / n for n in names if isinstance(n, str) and "/" not in n and n]
        if not files or not all(f.is_file() for f in files):
            raise InputError(f"the dataset folder '{path.name}' names data files it does not "
                             f"hold")
        return files
    files = sorted(p for p in path.rglob("*") if p.is_file()
                   and p.suffix.lower() in SUFFIXES and not p.name.startswith("."))
    if not files:
        raise InputError(f"the folder '{path.name}' holds no corpus files ({', '.join(SUFFIXES)})")
    return files


def _json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise InputError(f"'{path.name}' is not readable JSON") from None
    return value if isinstance(value, dict) else {}


def _schema(files: list[Path], kind: str, column: str | None):
    """(columns, the column to read, rows when known), refusing a missing or non-text
    column before anything is read."""
    if kind == "txt":
        return [], None, None
    if kind == "csv":
        header = _csv_header(files[0])
        column = header[0] if column is None else column
        if column not in header:
            raise InputError(f"'{files[0].name}' has no column '{column}'; its columns are "
                             f"{', '.join(map(repr, header[:20]))}")
        return header, column, None
    if kind == "jsonl":
        return [], column or DEFAULT_FIELD, None
    schema, rows = None, 0
    for path in files:
        file_schema, file_rows = _table_schema(path, kind)
        if schema is not None and not file_schema.equals(schema):
            raise InputError(f"'{path.name}' has other columns than '{files[0].name}'")
        schema = file_schema
        rows = None if rows is None or file_rows is None else rows + file_rows
    names, column = _text_column(schema, files[0].name, column)
    return names, column, rows


def _text_column(schema, name: str, column: str | None) -> tuple[list[str], str]:
    """(the table's columns, the text column to read): the one asked for, else "text", else
    the only text column; a missing or non-text column is refused, naming the columns."""
    import pyarrow as pa

    names = list(schema.names)
    texts = [f.name for f in schema if pa.types.is_string(f.type)
             or pa.types.is_large_string(f.type) or pa.types.is_string_view(f.type)]
    if column is None:
        column = DEFAULT_FIELD if DEFAULT_FIELD in texts else (texts[0] if len(texts) == 1
                                                             else None)
        if column is None:
            raise InputError(f"'{name}' has {len(texts) or 'no'} text columns "
                             f"({', '.join(map(repr, texts)) or 'none'}): say which with "
                             f"--column; its columns are {', '.join(map(repr, names[:20]))}")
    if column not in names:
        raise InputError(f"'{name}' has no column '{column}'; its columns are "
                         f"{', '.join(map(repr, names[:20]))}")
    if column not in texts:
        raise InputError(f"the column '{column}' of '{name}' holds "
                         f"{schema.field(column).type}, not text; its text columns are "
                         f"{', '.join(map(repr, texts)) or 'none'}")
    return names, column


def _table_schema(path: Path, kind: str):
    import pyarrow as pa

    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(path).metadata
            return meta.schema.to_arrow_schema(), meta.num_rows
        reader, rows = _arrow_reader(path)
        return reader.schema, rows
    except (pa.ArrowException, OSError, ValueError) as error:
        what = "Parquet" if kind == "parquet" else "Arrow"
        raise InputError(f"'{path.name}' is not a readable {what} file "
                         f"({_short(error)})") from None


def _arrow_reader(path: Path):
    """(reader, rows or None) of an Arrow IPC file (random access) or stream (what
    datasets' save_to_disk writes), memory-mapped."""
    import pyarrow as pa

    source = pa.memory_map(str(path))
    try:
        reader = pa.ipc.open_file(source)
        return reader, sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
    except pa.ArrowInvalid:
        source.seek(0)
        return pa.ipc.open_stream(source), None


def _short(error: Exception) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text.replace(os.sep, "/")[-160:]


# --------------------------------------------------------------------------- values


def _values(path: Path, column: str | None) -> Iterator:
    """Each row's value of column (each line or paragraph of a text file), in order."""
    kind = _kind(path)
    if kind == "txt":
        yield from _text_pieces(path)
    elif kind == "csv":
        with _open_text(path) as handle:
            try:
                for row in csv.DictReader(handle):
                    yield row.get(column)
            except csv.Error as error:
                raise InputError(f"'{path.name}' is not a readable CSV file ({error})") from None
    elif kind == "jsonl":
        with _open_text(path) as handle:
            for line in handle:
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except json.JSONDecodeError:
                    yield None
                    continue
                yield item.get(column) if isinstance(item, dict) else None
    else:
        yield from _table_values(path, kind, column)


def _table_values(path: Path, kind: str, column: str) -> Iterator:
    import pyarrow as pa

    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            # a small read buffer, no pre-buffering: a batch's pages, not a row group's
            batches = pq.ParquetFile(path, buffer_size=READ_BUFFER, pre_buffer=False) \
                .iter_batches(batch_size=ARROW_BATCH_ROWS, columns=[column])
        else:
            reader, _ = _arrow_reader(path)
            if isinstance(reader, pa.ipc.RecordBatchFileReader):
                batches = (reader.get_batch(i).select([column])
                           for i in range(reader.num_record_batches))
            else:
                batches = (batch.select([column]) for batch in reader)
        for batch in batches:
            yield from batch.column(0).to_pylist()
    except pa.ArrowException as error:
        raise InputError(f"'{path.name}' could not be read to the end ({_short(error)})") from None


def _open_text(path: Path):
    try:
        return open(path, encoding="utf-8-sig", errors="replace", newline="")
    except OSError as error:
        raise InputError(f"'{path.name}' cannot be read ({error.strerror})") from None


def _csv_header(path: Path) -> list[str]:
    with _open_text(path) as handle:
        try:
            header = next(csv.reader(handle), None)
        except csv.Error as error:
            raise InputError(f"'{path.name}' is not a readable CSV file ({error})") from None
    if not header:
        raise InputError(f"'{path.name}' is empty: it has no header row")
    return [h.strip() for h in header]


def _text_pieces(path: Path) -> Iterator[str]:
    """A text file's texts: one per paragraph when blank lines separate them (as far as
    its first MB shows), else one per line."""
    with _open_text(path) as handle:
        head = handle.read(2**20)
        paragraphs = "\n\n" in head.strip().replace("\r\n", "\n")
        handle.seek(0)
        if not paragraphs:
            yield from handle
            return
        lines = []
        for line in handle:
            if line.strip():
                lines.append(line.rstrip("\r\n"))
            elif lines:
                yield "\n".join(lines)
                lines = []
        if lines:
            yield "\n".join(lines)


def _first(texts: Iterator[str], n: int) -> Iterator[str]:
    for i, text in enumerate(texts):
        if i >= n:
            return
        yield text


def _reservoir(texts: Iterator[str], n: int, seed: int) -> list[str]:
    """n texts drawn uniformly without replacement (Vitter's algorithm R), in corpus order."""
    rng = np.random.default_rng(seed)
    kept: list[tuple[int, str]] = []
    for i, text in enumerate(texts):
        if i < n:
            kept.append((i, text))
        else:
            j = int(rng.integers(0, i + 1))
            if j < n:
                kept[j] = (i, text)
    return [text for _, text in sorted(kept)]


def _parquet_of_bytes(data: bytes, name: str):
    """(ParquetFile, schema) of a Parquet file held in memory (an upload, bounded)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(io.BytesIO(data))
        return handle, handle.metadata.schema.to_arrow_schema()
    except (pa.ArrowException, OSError, ValueError) as error:
        raise InputError(f"'{name}' is not a readable Parquet file ({_short(error)})") from None


def table_columns(data: bytes, name: str) -> list[str]:
    """The text columns of a Parquet file held in memory."""
    import pyarrow as pa

    _, schema = _parquet_of_bytes(data, name)
    return [f.name for f in schema if pa.types.is_string(f.type)
            or pa.types.is_large_string(f.type) or pa.types.is_string_view(f.type)]


def read_table_bytes(data: bytes, name: str, column: str | None = None
                     ) -> tuple[list[str], list[str], str, int]:
    """(texts, columns, the column read, rows skipped) of a Parquet file held in memory:
    the same column rules as open_texts."""
    import pyarrow as pa

    handle, schema = _parquet_of_bytes(data, name)
    columns, column = _text_column(schema, name, column)
    texts, skipped = [], 0
    try:
        for batch in handle.iter_batches(batch_size=ARROW_BATCH_ROWS, columns=[column]):
            for value in batch.column(0).to_pylist():
                if isinstance(value, str) and value.strip():
                    texts.append(value.strip())
                else:
                    skipped += 1
    except pa.ArrowException as error:
        raise InputError(f"'{name}' could not be read to the end ({_short(error)})") from None
    return texts, columns, column, skipped
