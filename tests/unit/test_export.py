"""mha_viz.server.export: the CSV / .npz bytes behind the app's download buttons."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from mha_viz import AttentionTrace
from mha_viz.core.errors import InputError
from mha_viz.server import export


def rows(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode("utf-8"))))


def test_matrix_csv_keeps_repeated_tokens_apart_and_every_value():
    a = np.array([[0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3], [0.0, 0.0, 1.0]], dtype=np.float32)
    labels = export.position_labels(["the", "cat", "the"])
    table = rows(export.matrix_csv(a, labels, labels))
    assert table[0] == ["query \\ key", "0 the", "1 cat", "2 the"]
    assert [r[0] for r in table[1:]] == ["0 the", "1 cat", "2 the"]
    got = np.array([[float(v) for v in r[1:]] for r in table[1:]])
    np.testing.assert_allclose(got, a, rtol=1e-6)
    assert table[2][1] == "0.3333333"  # 7 significant digits


def test_matrix_csv_reads_back_with_pandas_using_original_positions():
    pd = pytest.importorskip("pandas")
    a = np.eye(2)
    labels = export.position_labels(["a", "b"], positions=[1, 3])  # after hiding 0 and 2
    frame = pd.read_csv(io.BytesIO(export.matrix_csv(a, labels, labels)), index_col=0)
    assert list(frame.columns) == ["1 a", "3 b"] and list(frame.index) == ["1 a", "3 b"]
    np.testing.assert_array_equal(frame.to_numpy(), a)


def test_spreadsheet_formulas_are_defused_but_numbers_and_single_signs_are_not():
    data = export.table_csv({"token": ["=cmd|'/c calc'!A1", "+x", "-", "@sum", "ok", "-0.5"],
                             "value": [1, 2, 3, 4, 5, 6]})
    tokens = [r[0] for r in rows(data)[1:]]
    assert tokens == ["'=cmd|'/c calc'!A1", "'+x", "-", "'@sum", "ok", "-0.5"]


def test_nan_is_an_empty_cell():
    table = rows(export.per_query_csv({"entropy": np.array([np.nan, 0.5])}, ["[CLS]", "a"]))
    assert table == [["position", "token", "entropy"], ["0", "[CLS]", ""], ["1", "a", "0.5"]]


def test_layer_head_csv_long_form():
    values = np.arange(6, dtype=float).reshape(2, 3)
    table = rows(export.layer_head_csv(values, "entropy_nats"))
    assert table[0] == ["layer", "head", "name", "entropy_nats"]
    assert table[1:] == [[str(l), str(h), f"L{l}.H{h}", f"{values[l, h]:.7g}"]
                         for l in range(2) for h in range(3)]


def test_class_mass_csv_one_column_per_class():
    mass = {"[SEP]": np.full((1, 2), 0.5), "previous": np.zeros((1, 2))}
    table = rows(export.class_mass_csv(mass))
    assert table[0] == ["layer", "head", "name", "mass on [SEP]", "mass on previous"]
    assert table[2] == ["0", "1", "L0.H1", "0.5", "0"]


def test_bad_shapes_are_input_errors():
    with pytest.raises(InputError):
        export.matrix_csv(np.ones((2, 2)), ["a"], ["a", "b"])
    with pytest.raises(InputError):
        export.matrix_csv(np.ones(3), ["a"], ["a"])
    with pytest.raises(InputError):
        export.layer_head_csv({"a": np.ones((2, 2)), "b": np.ones((2, 3))})
    with pytest.raises(InputError):
        export.table_csv({"a": [1, 2], "b": [1]})


def test_safe_filename():
    assert export.safe_filename("minilm", "L0.H3", suffix=".csv") == "minilm_L0.H3.csv"
    assert export.safe_filename("../etc/passwd", "rollout to L5") == "etc-passwd_rollout-to-L5"
    assert export.safe_filename("", "") == "mha-viz"


def test_trace_npz_round_trip():
    rng = np.random.default_rng(0)
    att = rng.random((1, 2, 3, 3)).astype(np.float32)
    att /= att.sum(-1, keepdims=True)
    trace = AttentionTrace(tokens=["[CLS]", "hi", "[SEP]"], token_ids=[101, 7592, 102],
                           attentions=att, display_tokens=["[CLS]", "hi", "[SEP]"],
                           special_mask=[True, False, True], segment_ids=[0, 0, 0],
                           causal=False, model_name="m", model_type="bert", text="hi")
    back = AttentionTrace.load(io.BytesIO(export.trace_npz(trace)))
    np.testing.assert_array_equal(back.attentions, att)
    assert back.tokens == trace.tokens and back.text == "hi"
