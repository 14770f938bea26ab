"""The bundled training runs (issue 42), measured here from their checkpoints (nothing stored
is read back): in the attention-only run the best layer-1 head's induction score goes from
below 0.1 to above 0.5, the loss on the probe's repeated copy falls within a few checkpoints
while that score rises, and a layer-0 previous-token head forms before it; the checkpoints
open in our engine as transformers opens them; the training script with its seed gives the
same checkpoints again."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_viz import checkpoint_series, load_model
from mha_viz.analysis.dynamics import checkpoint_statistics, training_dynamics
from mha_viz.corpus import demo_texts
from mha_viz.toys import induction

pytestmark = pytest.mark.slow  # 30 checkpoints measured: about half a minute on a quiet core
WINDOW = 4  # checkpoints: "within a few"


@pytest.fixture(scope="module")
def texts():
    return demo_texts(8)


@pytest.fixture(scope="module")
def attention_only(texts):
    return training_dynamics("induction-toy", texts)


def half_way(values: np.ndarray) -> int:
    """The first checkpoint at which a curve has made half its rise from its first value."""
    target = values[0] + 0.5 * (values.max() - values[0])
    return int(np.argmax(values >= target))


def test_the_run_is_about_thirty_log_spaced_checkpoints():
    series = checkpoint_series("induction-toy")
    steps = np.asarray(series.steps, dtype=float)
    assert 25 <= len(steps) <= 30 and steps[-1] == induction.STEPS
    ratios = steps[1:] / steps[:-1]
    assert ratios[-10:].std() < 0.02  # log-uniform where rounding no longer matters
    steps_logged, loss = series.training_loss()
    assert steps_logged[-1] == induction.STEPS and loss[-1] < loss[0] - 2


def test_an_induction_head_forms_in_layer_1(attention_only):
    scores = attention_only.heads["induction"][:, 1]  # [step, head] of layer 1
    best = int(np.argmax(scores[-1]))
    assert scores[0].max() < 0.1, scores[0]
    assert scores[-1, best] > 0.5, scores[-1]


def test_the_repeated_copy_loss_falls_sharply_as_the_induction_score_rises(attention_only):
    repeated = attention_only.curves["probe_loss_repeated"]
    first_copy = attention_only.curves["probe_loss_first"]
    induction_score = attention_only.heads["induction"][:, 1].max(axis=1)
    drops = repeated[:-WINDOW] - repeated[WINDOW:]
    start = int(np.argmax(drops))  # the window of WINDOW checkpoints where it falls most
    total = repeated[0] - repeated.min()
    assert drops[start] > 0.5 * total, (drops[start], total)
    rise = induction_score[start + WINDOW] - induction_score[start]
    assert rise > 0.5 * (induction_score.max() - induction_score[0])
    # the copy is learned in context: the first copy, which nothing predicts, stays hard
    assert repeated[-1] < first_copy[-1] - 1.0
    change = attention_only.phase_change()
    assert start < change <= start + WINDOW


def test_a_previous_token_head_forms_first(attention_only):
    previous = attention_only.heads["previous_token"][:, 0].max(axis=1)  # layer 0's best
    induction_score = attention_only.heads["induction"][:, 1].max(axis=1)
    assert previous[-1] > 0.3
    assert half_way(previous) < half_way(induction_score), (previous, induction_score)


def test_the_run_with_mlps_forms_an_induction_head_too(texts):
    series = checkpoint_series("induction-toy-mlp")
    first, last = series.checkpoints[0], series.checkpoints[-1]
    start = checkpoint_statistics(load_model(first.folder()), texts)[0]["induction"][1]
    end = checkpoint_statistics(load_model(last.folder()), texts)[0]["induction"][1]
    assert start.max() < 0.1 and end.max() > 0.5, (start, end)
    from mha_viz.analysis import TrainingDynamics

    shipped = TrainingDynamics.load(series.root / "dynamics.npz")  # what the page opens on
    np.testing.assert_allclose(shipped.heads["induction"][[0, -1], 1], [start, end],
                               atol=1e-6, rtol=0)


def test_a_checkpoint_opens_as_transformers_opens_it():
    from transformers import AutoModelForCausalLM

    folder = checkpoint_series("induction-toy").checkpoints[-1].folder()
    ours = load_model(folder)
    reference = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32,
                                                     attn_implementation="eager").eval()
    ids = ours.tokenizer("Return the value of the named attribute of object.")["input_ids"]
    with torch.no_grad():
        out = reference(torch.tensor([ids]), output_attentions=True)
    np.testing.assert_allclose(ours.trace_ids(ids).attentions,
                               torch.cat(out.attentions).numpy(), atol=2e-5, rtol=0)


def test_training_again_with_the_seed_gives_the_same_checkpoints(tmp_path, texts):
    """The whole attention-only run again (minutes on one core): every head's scores at the
    first, a middle and the last checkpoint equal the bundled ones within 1e-4."""
    threads = torch.get_num_threads()
    try:
        induction.train(tmp_path, log=lambda line: None)
    finally:
        torch.set_num_threads(threads)
    bundled = checkpoint_series("induction-toy")
    again = checkpoint_series(tmp_path)
    assert again.steps == bundled.steps
    for k in (0, len(bundled) // 2, len(bundled) - 1):
        ours = checkpoint_statistics(load_model(again.checkpoints[k].folder()), texts)
        shipped = checkpoint_statistics(load_model(bundled.checkpoints[k].folder()), texts)
        for name in ours[0]:
            np.testing.assert_allclose(ours[0][name], shipped[0][name], atol=1e-4, rtol=0)
        for name in ours[1]:
            assert ours[1][name] == pytest.approx(shipped[1][name], abs=1e-4)


def test_the_shipped_dynamics_are_what_the_checkpoints_give(attention_only):
    """The Training page opens a bundled run on the dynamics shipped beside it: they must be
    what training_dynamics computes from the checkpoints (same texts, same probe)."""
    from mha_viz.analysis import TrainingDynamics

    shipped = TrainingDynamics.load(checkpoint_series("induction-toy").root / "dynamics.npz")
    assert shipped.steps.tolist() == attention_only.steps.tolist()
    for name, values in attention_only.heads.items():
        np.testing.assert_allclose(shipped.heads[name], values, atol=1e-6, rtol=0)
    for name, values in attention_only.curves.items():
        np.testing.assert_allclose(shipped.curves[name], values, atol=1e-6, rtol=0)
