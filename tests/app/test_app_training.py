"""The Training page (issues 42 and 49) through AppTest: a series of random GPT-2 checkpoints
opens with its curves and maps, the step slider changes the maps, and a folder that is empty,
mixed (two architectures) or misnamed gets a message, not a traceback. On the bundled run
(whose shipped numbers tests/unit/test_induction_toy.py checks against transformers' model):
the in-context learning score it draws falls, most at the phase change it marks, and no
curve it draws rises over training unless its label says why."""

from __future__ import annotations

import base64
import json
import re
import shutil

import numpy as np
import pytest

pytest.importorskip("streamlit")

from tests.support.app_pages import charts, run_page, texts  # noqa: E402

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
    assert len(shown) == 6, shown
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
    assert len(at.get("plotly_chart")) == 6
    captions = " ".join(texts(at.caption))
    assert "at step 757" in captions, captions  # the phase change, marked
    assert "held-out windows of this run's training distribution" in captions, captions
    assert "token 63 with token 6" in captions, captions  # Olsson's 500 and 50, scaled
    assert any(re.match(r"L1\.H\d on the probe at step 3,000", t) for t in titles(at))


# why a curve may rise, as its label must say: random tokens cannot be predicted; text unlike
# the training data can get harder as the model fits its own
REASONS = ("nothing can predict", "not known to be like its training text")


def values(array) -> np.ndarray:
    """A trace's x or y as the chart's JSON holds it: a list, or a typed array in base 64."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"])
    return np.asarray(array, dtype=float)


def rising_without_a_reason(figure: dict) -> list[str]:
    return [trace["name"] for trace in figure["data"]
            if values(trace["y"])[-1] > values(trace["y"])[0]
            and not any(reason in trace["name"] for reason in REASONS)]


def test_the_bundled_runs_curves_fall_or_say_why_they_rise():
    """The loss figure: the training loss on held-out text of its training distribution and
    the probe's repeated copy fall; the probe's first copy (random tokens) says why it may
    rise. The ICL score falls, lower at the last checkpoint than at the first, and falls most
    between the checkpoints around the phase change the page marks."""
    at = run_page(PAGE, {})
    loss, icl = charts(at)[:2]
    assert loss["layout"]["title"]["text"].startswith("Loss over training")
    names = [t["name"] for t in loss["data"]]
    assert any(n.startswith("training loss on held-out text") for n in names), names
    assert any(n.startswith("probe's repeated copy") for n in names), names
    assert not rising_without_a_reason(loss), rising_without_a_reason(loss)
    assert not rising_without_a_reason(icl), rising_without_a_reason(icl)
    (score,) = icl["data"]
    steps, icl_values = values(score["x"]), values(score["y"])
    assert score["name"].startswith("ICL score: loss at token 63 − loss at token 6")
    assert icl_values[-1] < icl_values[0] - 2.0, icl_values
    phase = [s["x0"] for s in icl["layout"]["shapes"] if s["line"].get("dash") == "dash"]
    assert phase == [757], phase
    steepest = int(np.argmax(icl_values[:-1] - icl_values[1:])) + 1  # by its largest fall
    marked = int(np.flatnonzero(steps == phase[0])[0])
    assert marked - 1 <= steepest <= marked + 1, (steps[steepest], phase)


def test_the_step_axis_spans_the_run_whatever_the_slider_shows():
    """Issue 51 item 7: at step 10 the log axis ran to 10^10 (the step label's x was read as
    a power of ten), squeezing every curve into its left third."""
    at = run_page(PAGE, {"tstep": "10"})
    assert not at.exception, texts(at.exception)
    for figure in charts(at)[:4]:
        axis = figure["layout"]["xaxis"]
        assert "range" in axis and "tickvals" in axis, axis  # else Plotly's autorange
        low, high = axis["range"]
        assert np.log10(8) < low < 1 and np.log10(3000) < high < np.log10(4000), axis["range"]
        assert all(10 <= v <= 3000 for v in axis["tickvals"]), axis["tickvals"]
        marks = [a for a in figure["layout"]["annotations"] if a["text"] == "step 10"]
        assert len(marks) == 1 and marks[0]["x"] == pytest.approx(1.0), marks


def figure_titled(at, start: str) -> dict:
    found = [c for c in charts(at) if str(c["layout"]["title"]["text"]).startswith(start)]
    assert len(found) == 1, [c["layout"]["title"]["text"] for c in charts(at)]
    return found[0]


@pytest.mark.parametrize("name", ["induction-toy", "induction-toy-mlp"])
def test_the_induction_heads_keys_over_training_beside_its_induction_score(name):
    """Issue 48 item 3: the strongest induction head's K-composition with every layer-0 head
    (composition_over_training's shares) beside its induction score, the phase change
    marked, and a sentence saying what it shows with the numbers drawn. In the
    attention-only run the previous-token head's share rises at the phase change and is
    the largest at the end; in the run with MLPs the sentence names the MLP instead."""
    from mha_viz import checkpoint_series
    from mha_viz.analysis import TrainingDynamics, composition_over_training

    series = checkpoint_series(name)
    dynamics = TrainingDynamics.load(series.root / "dynamics.npz")
    reader = dynamics.induction_head()
    previous = dynamics.previous_token_head(reader[0])
    expected = composition_over_training(series, *reader, seq_len=31, seed=0)
    at = run_page(PAGE, {} if name == "induction-toy" else {"series": name})
    assert not at.exception, texts(at.exception)
    reader_name, previous_name = f"L{reader[0]}.H{reader[1]}", f"L{previous[0]}.H{previous[1]}"
    figure = figure_titled(at, f"How {reader_name} became an induction head")
    lines = {t["name"]: values(t["y"]) for t in figure["data"]}
    score = lines[f"induction score of {reader_name} (on the probe)"]
    np.testing.assert_allclose(score, dynamics.heads["induction"][:, reader[0], reader[1]])
    for head in range(4):
        drawn = [v for n, v in lines.items() if n.startswith(f"share of {reader_name}'s keys "
                                                             f"from L0.H{head}")]
        assert len(drawn) == 1, list(lines)
        np.testing.assert_allclose(drawn[0], expected.share("k", 0, head), atol=1e-6)
    assert [s["x0"] for s in figure["layout"]["shapes"] if s["line"].get("dash") == "dash"] \
        == [757]
    said = " ".join(texts(at.caption))
    assert "Olsson et al. (2022)" in said and "through its **keys**" in said
    share = expected.share("k", *previous)
    assert f"{share[0]:.2f} at step 10" in said and f"{share[-1]:.2f} at step 3,000" in said
    if name == "induction-toy":
        assert share[-1] - share[0] > 0.4
        assert "it is the largest of every source" in said, said
    else:
        mlp = expected.other["k"]["L0.mlp"][-1]
        assert f"the largest share is the layer-0 MLP's ({mlp:.2f})" in said, said
        assert any(n.startswith(f"share of {reader_name}'s keys from the layer-0 MLP")
                   for n in lines)


def test_a_run_of_folders_measures_its_composition(run_folder):
    """A run that ships no composition is measured: the figure's shares are
    composition_over_training's for the strongest induction head above layer 0."""
    from mha_viz import checkpoint_series
    from mha_viz.analysis import composition_over_training

    at = run_page(PAGE, params(run_folder))
    assert not at.exception, texts(at.exception)
    series = checkpoint_series(run_folder)
    figure = [c for c in charts(at) if "became an induction head" in
              str(c["layout"]["title"]["text"])]
    assert len(figure) == 1
    lines = {t["name"]: values(t["y"]) for t in figure[0]["data"]}
    title = figure[0]["layout"]["title"]["text"]
    layer, head = (int(c) for c in re.match(r"How L(\d+)\.H(\d+)", title).groups())
    assert layer == 1
    expected = composition_over_training(series, layer, head, seq_len=None, seed=0)
    drawn = [v for n, v in lines.items() if "keys from L0.H0" in n]
    np.testing.assert_allclose(drawn[0], expected.share("k", 0, 0), atol=1e-6)
