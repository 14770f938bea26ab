"""Results kept between server starts (mha_viz.server.results_on_disk): a value comes back equal, a
file is named by the question, the text's tokens, the weights and the code (any of them
changing gives another name), and a damaged, foreign or pickled file is refused, not read."""

import os

import numpy as np
import pytest

from mha_viz.analysis.pruning import PruningCurve, pruning_curve
from mha_viz.server import results_on_disk as disk

TEXT = "The keys of the cabinet are on the table."


def test_values_come_back_equal(tmp_path, gpt2_model):
    store = disk.ResultsOnDisk(tmp_path)
    curve = pruning_curve(gpt2_model, TEXT, step=0.25)
    values = {"score": 3.25, "sweep": np.arange(12.0).reshape(3, 4) - 5.5, "curve": curve}
    for what, value in values.items():
        assert store.save(store.name(gpt2_model, (what,), TEXT), value)
    assert store.load(store.name(gpt2_model, ("score",), TEXT)) == 3.25
    np.testing.assert_array_equal(store.load(store.name(gpt2_model, ("sweep",), TEXT)),
                                  values["sweep"])
    back = store.load(store.name(gpt2_model, ("curve",), TEXT))
    assert isinstance(back, PruningCurve) and back.by == curve.by
    assert back.removed == [[tuple(map(int, h)) for h in step] for step in curve.removed]
    np.testing.assert_array_equal(back.scores, curve.scores)
    np.testing.assert_array_equal(back.fractions, curve.fractions)
    np.testing.assert_array_equal(np.stack(back.masks), np.stack(curve.masks))
    assert store.load("0" * 64 + ".npz") is None  # never stored


def test_long_range_results_come_back_equal(tmp_path, gpt2_model):
    """The Long range page's results: nested results, arrays, numbers and tuples as kept."""
    import dataclasses

    from mha_viz.analysis import (NeedleCase, needle_study, sink_scores, window_costs,
                                  window_losses)

    store = disk.ResultsOnDisk(tmp_path)
    ids = gpt2_model.encode(TEXT * 3).input_ids
    cases = [NeedleCase(len(ids) - 4, depth, "", "", "", tuple(ids[:-4]), tuple(ids[-4:]), 0)
             for depth in (0.0, 1.0)]
    values = {"study": needle_study(gpt2_model, cases), "sinks": sink_scores(gpt2_model, TEXT),
              "table": window_losses(gpt2_model, ids, 1, 4),
              "costs": window_costs(gpt2_model, ids, 1, 4)}

    def same(a, b):
        assert type(a) is type(b)
        for field in dataclasses.fields(a):
            x, y = getattr(a, field.name), getattr(b, field.name)
            if dataclasses.is_dataclass(x):
                same(x, y)
            elif isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, y)
                assert x.dtype == y.dtype
            else:
                assert x == y and type(x) is type(y), (field.name, x, y)

    for what, value in values.items():
        assert store.save(store.name(gpt2_model, (what,), TEXT), value)
        same(store.load(store.name(gpt2_model, (what,), TEXT)), value)
    assert values["study"].grid.lengths == (len(ids) - 4,)  # a tuple stays a tuple


def test_the_name_changes_with_the_question_the_text_the_weights_and_the_code(
        tmp_path, gpt2_model, monkeypatch):
    store = disk.ResultsOnDisk(tmp_path)
    name = store.name(gpt2_model, ("ablation", "zero"), TEXT)
    assert name == disk.ResultsOnDisk(tmp_path).name(gpt2_model, ("ablation", "zero"), TEXT)
    assert store.name(gpt2_model, ("ablation", "mean"), TEXT) != name
    assert store.name(gpt2_model, ("ablation", "zero"), TEXT + "!") != name
    before = disk.weights_fingerprint(gpt2_model.network)
    weight = next(iter(gpt2_model.network.parameters()))
    old = float(weight.view(-1)[-1])
    try:
        weight.data.view(-1)[-1] += 1e-3  # one element of 2.6 M-odd changes the fingerprint
        assert disk.weights_fingerprint(gpt2_model.network) != before
        assert disk.ResultsOnDisk(tmp_path).name(gpt2_model, ("ablation", "zero"), TEXT) != name
    finally:
        weight.data.view(-1)[-1] = old
    assert disk.weights_fingerprint(gpt2_model.network) == before
    monkeypatch.setattr(disk, "source_fingerprint", lambda: "other code")
    assert disk.ResultsOnDisk(tmp_path).name(gpt2_model, ("ablation", "zero"), TEXT) != name


def test_damaged_and_pickled_files_are_refused_and_removed(tmp_path):
    store = disk.ResultsOnDisk(tmp_path)
    (tmp_path / "damaged.npz").write_bytes(b"PK\x03\x04 not really a zip")
    assert store.load("damaged.npz") is None and not (tmp_path / "damaged.npz").exists()
    with (tmp_path / "pickled.npz").open("wb") as handle:  # an object array needs pickle
        np.savez(handle, kind=np.array("array"), value=np.array([{"a": 1}], dtype=object))
    assert store.load("pickled.npz") is None and not (tmp_path / "pickled.npz").exists()
    with pytest.raises(TypeError):
        store.save("x.npz", {"not": "a result"})


def test_the_folder_keeps_the_newest_and_a_readonly_disk_is_no_error(tmp_path):
    store = disk.ResultsOnDisk(tmp_path / "kept", max_files=3)
    for index in range(5):
        assert store.save(f"{index}.npz", float(index))
        os.utime(tmp_path / "kept" / f"{index}.npz", (1e9 + index, 1e9 + index))
    assert sorted(p.name for p in (tmp_path / "kept").glob("*.npz")) == [
        "2.npz", "3.npz", "4.npz"]
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    assert disk.ResultsOnDisk(blocked / "sub").save("x.npz", 1.0) is False
