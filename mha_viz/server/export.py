"""Downloads as bytes: matrices and tables to CSV, traces to .npz (pure; no Streamlit).

Every function returns UTF-8 bytes that open in a spreadsheet or in pandas:

    pd.read_csv(io.BytesIO(matrix_csv(a, tokens, tokens)), index_col=0)

Token labels are prefixed with their position ("3 cat") so repeated tokens stay separate rows
and columns. Cells that a spreadsheet would run as a formula (text starting with = + - @
followed by more characters, e.g. a token "=cmd") get a leading apostrophe.
"""

from __future__ import annotations

import csv
import io
import math
import re
from typing import Mapping, Sequence

import numpy as np

from ..core.errors import InputError

__all__ = ["matrix_csv", "table_csv", "layer_head_csv", "per_query_csv", "class_mass_csv",
           "trace_npz", "safe_filename", "position_labels", "patching_csv", "npz_bytes"]

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value) -> str:
    """One CSV cell: numbers with 7 significant digits, NaN empty, text defused."""
    if value is None:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v):
            return ""
        return f"{v:.7g}"
    text = str(value)
    if len(text) > 1 and text.startswith(_FORMULA_START):
        # "-0.5" is a number a spreadsheet should read as one: leave numbers alone.
        try:
            float(text)
        except ValueError:
            return "'" + text
    return text


def _write(rows) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in rows:
        writer.writerow([_cell(v) for v in row])
    return buffer.getvalue().encode("utf-8")


def position_labels(labels: Sequence[str], positions: Sequence[int] | None = None,
                    max_chars: int | None = None) -> list[str]:
    """["0 [CLS]", "1 the", ...]: unique even when tokens repeat. ``positions`` gives the
    original positions (e.g. after special tokens were hidden); ``max_chars`` cuts a longer
    token to that many characters, "…" the last (axis labels on a screen that has little
    room: "0 <|endo…")."""
    positions = range(len(labels)) if positions is None else positions
    if len(positions) != len(labels):
        raise InputError(f"{len(positions)} positions for {len(labels)} labels")
    if max_chars is not None:
        labels = [t if len(t) <= max_chars else t[:max(max_chars - 1, 1)] + "…" for t in labels]
    return [f"{int(p)} {t}" for p, t in zip(positions, labels)]


def matrix_csv(matrix, row_labels: Sequence[str], col_labels: Sequence[str],
               corner: str = "query \\ key") -> bytes:
    """A 2-D matrix with a header row of column labels and a first column of row labels.

    For an attention map pass ``position_labels(tokens)`` for both: row i is query i,
    column j key j, cell = the weight.
    """
    m = np.asarray(matrix)
    if m.ndim != 2:
        raise InputError(f"matrix must be 2-D, got shape {list(m.shape)}")
    if len(row_labels) != m.shape[0] or len(col_labels) != m.shape[1]:
        raise InputError(f"labels ({len(row_labels)} rows, {len(col_labels)} columns) do not "
                         f"match the matrix shape {list(m.shape)}")
    header = [corner, *col_labels]
    return _write([header, *([label, *row] for label, row in zip(row_labels, m.tolist()))])


def table_csv(columns: Mapping[str, Sequence]) -> bytes:
    """Columns of equal length -> CSV with one header row."""
    if not columns:
        raise InputError("table_csv needs at least one column")
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise InputError(f"columns have different lengths: {lengths}")
    values = [list(v.tolist() if isinstance(v, np.ndarray) else v) for v in columns.values()]
    return _write([list(columns), *zip(*values)])


def layer_head_csv(values: Mapping[str, np.ndarray] | np.ndarray, value_name: str = "value"
                   ) -> bytes:
    """[L, H] arrays in long form: one row per head with columns layer, head, name, values.

    ``values`` is one array (column ``value_name``) or {column name: [L, H] array}.
    Layers and heads count from 0; name is "L5.H1".
    """
    arrays = {value_name: values} if not isinstance(values, Mapping) else dict(values)
    arrays = {k: np.asarray(v, dtype=float) for k, v in arrays.items()}
    shapes = {a.shape for a in arrays.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise InputError(f"every value array must be the same [L, H] shape, got {shapes}")
    n_layer, n_head = next(iter(shapes))
    layers, heads = np.meshgrid(np.arange(n_layer), np.arange(n_head), indexing="ij")
    columns = {"layer": layers.ravel(), "head": heads.ravel(),
               "name": [f"L{l}.H{h}" for l, h in zip(layers.ravel(), heads.ravel())]}
    columns.update({k: a.ravel() for k, a in arrays.items()})
    return table_csv(columns)


def per_query_csv(values: Mapping[str, np.ndarray], labels: Sequence[str],
                  positions: Sequence[int] | None = None) -> bytes:
    """Per-query columns (e.g. row entropy, its maximum) next to position and token."""
    positions = list(range(len(labels))) if positions is None else [int(p) for p in positions]
    columns = {"position": positions, "token": list(labels)}
    columns.update({k: np.asarray(v, dtype=float) for k, v in values.items()})
    return table_csv(columns)


def class_mass_csv(mass: Mapping[str, np.ndarray]) -> bytes:
    """token_class_mass() output {class: [L, H]} as one row per head, one column per class."""
    return layer_head_csv({f"mass on {name}": value for name, value in mass.items()})


def patching_csv(result) -> bytes:
    """A PatchingResult ([rows, columns] components: layer x head, layer x position) in long
    form: one row per component with its patched metric (mean over pairs), normalized
    effect, spread over pairs and 95% interval."""
    values = np.asarray(result.values, dtype=float)
    if values.ndim != 2:
        raise InputError(f"patching_csv takes [rows, columns] results, got shape {values.shape}")
    rows, cols = np.meshgrid(np.arange(values.shape[0]), np.arange(values.shape[1]),
                             indexing="ij")
    rows, cols = rows.ravel(), cols.ravel()
    return table_csv({
        "row": [result.row_labels[i] for i in rows],
        "column": [result.col_labels[j] for j in cols],
        "patched_metric": values.ravel(),
        "normalized": np.asarray(result.normalized, dtype=float).ravel(),
        "std_over_pairs": np.asarray(result.std, dtype=float).ravel(),
        "ci95_low": np.asarray(result.ci95_low, dtype=float).ravel(),
        "ci95_high": np.asarray(result.ci95_high, dtype=float).ravel(),
    })


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """Arrays as an .npz file (no pickled objects: numpy.load reads it with
    allow_pickle=False)."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{k: np.asarray(v) for k, v in arrays.items()})
    return buffer.getvalue()


def trace_npz(trace) -> bytes:
    """The whole trace as the .npz that ``AttentionTrace.load`` reads back."""
    return trace.to_bytes()


def safe_filename(*parts: object, suffix: str = "") -> str:
    """A short file name from parts: 'minilm_L0.H3.csv' (no path separators, no spaces)."""
    words = []
    for part in parts:
        text = re.sub(r"[^A-Za-z0-9._-]+", "-", str(part)).strip("-.")
        if text:
            words.append(text[:40])
    name = "_".join(words) or "mha-viz"
    return name + suffix
