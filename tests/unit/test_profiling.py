"""MHA_VIZ_PROFILE: a page run's profile is written where it says, and nothing otherwise."""

from __future__ import annotations

import pstats

import pytest

from mha_viz.ui.profiling import profiled_run


def _page_work() -> int:
    return sum(i * i for i in range(1000))


def test_a_run_is_profiled_into_the_folder_named(monkeypatch, tmp_path):
    folder = tmp_path / "profiles"
    monkeypatch.setenv("MHA_VIZ_PROFILE", str(folder))
    with profiled_run():
        _page_work()
    files = list(folder.glob("*.prof"))
    assert len(files) == 1
    seen = {name for _, _, name in pstats.Stats(str(files[0])).stats}
    assert "_page_work" in seen


def test_a_run_that_stops_early_is_profiled_too(monkeypatch, tmp_path):
    # Streamlit ends a run with an exception (a rerun, st.stop): the profile is still kept
    monkeypatch.setenv("MHA_VIZ_PROFILE", str(tmp_path))
    with pytest.raises(RuntimeError), profiled_run():
        _page_work()
        raise RuntimeError("rerun")
    assert len(list(tmp_path.glob("*.prof"))) == 1


def test_unset_nothing_is_written(monkeypatch, tmp_path):
    monkeypatch.delenv("MHA_VIZ_PROFILE", raising=False)
    monkeypatch.chdir(tmp_path)
    with profiled_run():
        _page_work()
    assert not list(tmp_path.rglob("*.prof"))
