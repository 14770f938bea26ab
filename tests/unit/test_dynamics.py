"""Issue 42: a series of checkpoints as one object, and every checkpoint's statistics
streamed into [step, layer, head] arrays. The references are the existing statistics computed
on each checkpoint loaded alone (induction_scores, previous/duplicate-token scores, entropy,
token_class_mass) and a per-token loss computed here from transformers' own GPT-NeoX on the
same weights."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from mha_viz import InputError, load_model
from mha_viz.__main__ import main as cli
from mha_viz.analysis import (duplicate_token_scores, entropy, induction_scores,
                              previous_token_scores, repeated_random_tokens, token_class_mass)
from mha_viz.analysis.dynamics import TrainingDynamics, training_dynamics
from mha_viz.checkpoints.series import SeriesError, checkpoint_series, step_of
from mha_viz.testing.checkpoints import make_gpt2_checkpoint
from mha_viz.testing.families import make_decoder_checkpoint

NEOX = dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=64, intermediate_size=128,
            max_position_embeddings=256, rotary_pct=0.25, use_parallel_residual=True)
STEPS = (0, 512, 3000)
TEXTS = ["The cat sat on the mat and the dog sat on the log, and then the cat sat again on "
         "the mat while the dog slept on the log by the door of the old house.",
         "Attention heads read earlier tokens; an induction head finds the token after the "
         "previous occurrence of the current one and copies it."]
PROBE = dict(seq_len=20, n_seqs=3, seed=1)


@pytest.fixture(scope="module")
def neox_series(tmp_path_factory):
    """Three random GPT-NeoX checkpoints (different seeds), their steps in folder names."""
    root = tmp_path_factory.mktemp("neox-run")
    for seed, step in enumerate(STEPS):
        make_decoder_checkpoint(root / f"step{step}", "GPTNeoXConfig", "GPTNeoXForCausalLM",
                                seed=seed, **NEOX)
    return root


@pytest.fixture(scope="module")
def dynamics(neox_series):
    return training_dynamics(neox_series, TEXTS, early=5, late=40, **PROBE)


def test_a_folder_of_step_folders_is_a_series(neox_series):
    series = checkpoint_series(neox_series)
    assert series.steps == list(STEPS)
    assert (series.model_type, series.n_layer, series.n_head) == ("gpt_neox", 2, 4)
    listed = checkpoint_series([neox_series / "step3000", neox_series / "step0"])
    assert listed.steps == [0, 3000]


def test_each_checkpoints_statistics_equal_those_of_it_loaded_alone(neox_series, dynamics):
    assert dynamics.steps.tolist() == list(STEPS)
    assert dynamics.heads["induction"].shape == (3, 2, 4)
    for index, step in enumerate(STEPS):
        model = load_model(neox_series / f"step{step}")
        np.testing.assert_allclose(dynamics.heads["induction"][index],
                                   induction_scores(model, **PROBE), atol=1e-6, rtol=0)
        ids, _ = repeated_random_tokens(model, **PROBE)
        traces = [model.trace_ids(i) for i in ids]
        np.testing.assert_allclose(dynamics.heads["previous_token"][index],
                                   previous_token_scores(traces), atol=1e-6, rtol=0)
        np.testing.assert_allclose(dynamics.heads["duplicate_token"][index],
                                   duplicate_token_scores(traces), atol=1e-6, rtol=0)
        text_traces = [model.trace(t) for t in TEXTS]
        np.testing.assert_allclose(dynamics.heads["entropy"][index], entropy(text_traces),
                                   atol=1e-6, rtol=0)
        np.testing.assert_allclose(dynamics.heads["sink_mass"][index],
                                   token_class_mass(text_traces)["first token"], atol=1e-6,
                                   rtol=0)


def test_losses_equal_transformers_own(neox_series, dynamics):
    """The text loss, the ICL score and the probe's two losses, from GPTNeoXForCausalLM's
    logits on the same ids."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = neox_series / "step512"
    reference = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))

    def token_losses(ids):
        with torch.no_grad():
            logits = reference(torch.tensor([ids])).logits[0]
        return torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:]),
                                                 reduction="none").numpy()

    per_text = [token_losses(tokenizer(t)["input_ids"]) for t in TEXTS]
    assert dynamics.curves["text_loss"][1] == pytest.approx(np.concatenate(per_text).mean(),
                                                            abs=1e-4)
    icl = [loss[39] - loss[4] for loss in per_text if loss.size >= 40]
    assert len(icl) == 2
    assert dynamics.curves["icl_score"][1] == pytest.approx(np.mean(icl), abs=1e-4)
    ids, offset = repeated_random_tokens(load_model(folder), **PROBE)
    losses = np.array([token_losses(i) for i in ids])
    s = PROBE["seq_len"]
    assert dynamics.curves["probe_loss_first"][1] == pytest.approx(
        losses[:, offset + 1:offset + s].mean(), abs=1e-4)
    assert dynamics.curves["probe_loss_repeated"][1] == pytest.approx(
        losses[:, offset + s + 1:offset + 2 * s].mean(), abs=1e-4)


def test_dynamics_save_and_reopen(dynamics, tmp_path):
    path = dynamics.save(tmp_path / "dyn.npz")
    again = TrainingDynamics.load(path)
    assert again.steps.tolist() == dynamics.steps.tolist() and again.info == dynamics.info
    for name, array in dynamics.heads.items():
        np.testing.assert_array_equal(again.heads[name], array)
    for name, array in dynamics.curves.items():
        np.testing.assert_array_equal(again.curves[name], array)
    (tmp_path / "other.npz").write_bytes(b"not an npz")
    with pytest.raises(InputError, match="not training dynamics"):
        TrainingDynamics.load(tmp_path / "other.npz")


def test_the_command_line_writes_the_dynamics(neox_series, dynamics, tmp_path, capsys):
    out = tmp_path / "dyn.npz"
    code = cli(["dynamics", str(neox_series), "--text", TEXTS[0], "--text", TEXTS[1],
                "--seq-len", "20", "--n-seqs", "3", "--seed", "1", "--out", str(out)])
    assert code == 0
    captured = capsys.readouterr()
    assert "3/3 checkpoints" in captured.err and "saved" in captured.out
    np.testing.assert_allclose(TrainingDynamics.load(out).heads["induction"],
                               dynamics.heads["induction"], atol=1e-12)


def test_steps_from_the_trainers_state(tmp_path):
    folder = tmp_path / "last"
    make_gpt2_checkpoint(folder, n_layer=1, n_head=2, d_model=16)
    assert step_of(folder) is None
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1234}))
    assert step_of(folder) == 1234
    assert checkpoint_series([folder]).steps == [1234]


@pytest.mark.parametrize("case, message", [
    ("empty", "holds no checkpoints"),
    ("mixed", "not of one model"),
    ("misnamed", "step of 'final' cannot be read"),
    ("one", "one checkpoint, not a series"),
    ("missing", "does not exist"),
    ("twice", "two checkpoints claim step 5"),
])
def test_a_bad_series_gets_a_message(tmp_path, neox_series, case, message, capsys):
    root = tmp_path / case
    root.mkdir()
    if case == "mixed":
        shutil.copytree(neox_series / "step0", root / "step0")
        make_gpt2_checkpoint(root / "step10", n_layer=1, n_head=2, d_model=16)
    elif case == "misnamed":
        shutil.copytree(neox_series / "step0", root / "final")
    elif case == "one":
        root = neox_series / "step0"
    elif case == "missing":
        root = tmp_path / "nothing-here"
    elif case == "twice":
        shutil.copytree(neox_series / "step0", root / "step5")
        shutil.copytree(neox_series / "step0", root / "checkpoint-5")
    with pytest.raises(SeriesError, match=message):
        checkpoint_series(root)
    assert cli(["dynamics", str(root), "--out", str(tmp_path / "x.npz")]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_hub_series_offline_says_so(monkeypatch):
    from mha_viz import OfflineError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OfflineError, match="cannot be reached"):
        checkpoint_series("EleutherAI/pythia-70m")
