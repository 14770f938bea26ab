"""The Training page (issue 42) through AppTest: a series of random GPT-2 checkpoints opens
with its curves and maps, the step slider changes the maps, and a folder that is empty, mixed
(two architectures) or misnamed gets a message, not a traceback."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("streamlit")

from tests.support.app_pages import run_page, texts  # noqa: E402

from mha_viz.testing import make_decoder_checkpoint, make_gpt2_checkpoint  # noqa: E402

PAGE = "pages/10_Training.py"
STEPS = (1, 10, 100)


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("training_run")
    for seed, step in enumerate(STEPS):
        make_gpt2_checkpoint(root / f"step{step}", n_layer=2, n_head=2, d_model=32, seed=seed)
    return root


def params(folder) -> dict:
    return {"series": "folder", "sfolder": str(folder)}


def titles(at) -> list[str]:
    return [str((json.loads(c.proto.spec).get("layout", {}).get("title") or {}).get("text", ""))
            for c in at.get("plotly_chart")]


def test_a_run_opens_and_the_slider_moves_the_maps(run_folder):
    at = run_page(PAGE, params(run_folder))
    assert not at.exception, texts(at.exception)
    assert not at.error, texts(at.error)
    shown = titles(at)
    assert len(shown) == 5, shown
    assert any("at step 100" in t for t in shown), shown  # the slider opens on the last step
    at.select_slider(key="_mv_w_tstep").set_value(10).run()
    shown = titles(at)
    assert any(t.startswith("Induction score at step 10") for t in shown), shown
    assert any("on the probe at step 10" in t for t in shown), shown


@pytest.mark.parametrize("case, message", [
    ("empty", "holds no checkpoints"),
    ("mixed", "not of one model"),
    ("misnamed", "cannot be read"),
])
def test_a_bad_folder_gets_a_message(tmp_path, run_folder, case, message):
    folder = tmp_path / case
    folder.mkdir()
    if case == "mixed":
        shutil.copytree(run_folder / "step1", folder / "step1")
        make_decoder_checkpoint(folder / "step2", "GPTNeoXConfig", "GPTNeoXForCausalLM",
                                num_hidden_layers=1, num_attention_heads=2, hidden_size=16,
                                intermediate_size=32, max_position_embeddings=64)
    elif case == "misnamed":
        shutil.copytree(run_folder / "step1", folder / "final")
    at = run_page(PAGE, params(folder))
    assert not at.exception, texts(at.exception)
    errors = texts(at.error)
    assert len(errors) == 1 and message in errors[0], errors
    assert str(tmp_path) not in errors[0]  # never the server's paths


def test_the_bundled_run_opens_on_its_phase_change():
    at = run_page(PAGE, {})
    assert not at.exception, texts(at.exception)
    assert not at.error, texts(at.error)
    assert len(at.get("plotly_chart")) == 5
    captions = " ".join(texts(at.caption))
    assert "at step 1,122" in captions, captions  # the phase change, marked
    assert any(t.startswith("L1.H0 on the probe at step 3,000") for t in titles(at))
