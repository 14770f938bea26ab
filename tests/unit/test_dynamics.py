"""Issue 42: a series of checkpoints as one object, and every checkpoint's statistics
streamed into [step, layer, head] arrays. Issue 49: the in-context learning score at Olsson et
al.'s positions scaled to the texts, on the run's own held-out texts by default. The
reference is transformers' own GPT-NeoX on the same weights: its attentions and logits, with
every score's formula (docs/analyses.md) written in this file."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from tests.support.hf_reference import repeated_random_probe

from mha_viz import InputError
from mha_viz.__main__ import main as cli
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
HELD_OUT = ["one two three four five six seven eight nine ten one two three four five six",
            "red green blue red green blue red green blue red green blue red green blue",
            "a b c d e f g a b c d e f g a b c d e f g a b c d e f g"]


@pytest.fixture(scope="module")
def neox_series(tmp_path_factory):
    """Three random GPT-NeoX checkpoints (different seeds), their steps in folder names, and
    held-out texts of the run beside them."""
    root = tmp_path_factory.mktemp("neox-run")
    for seed, step in enumerate(STEPS):
        make_decoder_checkpoint(root / f"step{step}", "GPTNeoXConfig", "GPTNeoXForCausalLM",
                                seed=seed, **NEOX)
    (root / "held_out_texts.json").write_text(json.dumps({"about": "three held-out texts",
                                                          "texts": HELD_OUT}))
    return root


@pytest.fixture(scope="module")
def dynamics(neox_series):
    return training_dynamics(neox_series, TEXTS, early=5, late=40, **PROBE)


def transformers_reference(folder, texts, seq_len=20, n_seqs=3, seed=1):
    """From GPTNeoXForCausalLM (eager): each text's and each probe sequence's token losses
    ([j - 1] is token j's) and attentions [L, H, T, T], the probe drawn as docs/analyses.md
    says (BOS, then seq_len distinct non-special ids, twice; numpy default_rng(seed))."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))

    def run(ids):
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_attentions=True)
        loss = torch.nn.functional.cross_entropy(out.logits[0, :-1], torch.tensor(ids[1:]),
                                                 reduction="none").double().numpy()
        return loss, torch.cat(out.attentions).double().numpy()

    probe = repeated_random_probe(tokenizer, model.config.vocab_size, seq_len, n_seqs, seed)
    return [run(tokenizer(t)["input_ids"]) for t in texts], [run(ids) for ids in probe]


def test_a_folder_of_step_folders_is_a_series(neox_series):
    series = checkpoint_series(neox_series)
    assert series.steps == list(STEPS)
    assert (series.model_type, series.n_layer, series.n_head) == ("gpt_neox", 2, 4)
    listed = checkpoint_series([neox_series / "step3000", neox_series / "step0"])
    assert listed.steps == [0, 3000]
    assert series.held_out_texts() == (HELD_OUT, "three held-out texts")


def test_each_checkpoints_head_scores_equal_transformers_attentions(neox_series, dynamics):
    """Induction, previous-token and duplicate-token scores on the probe, entropy and mass
    on the first token on the texts, from transformers' attentions by their formulas."""
    assert dynamics.steps.tolist() == list(STEPS)
    assert dynamics.heads["induction"].shape == (3, 2, 4)
    s = PROBE["seq_len"]
    for index, step in enumerate(STEPS):
        on_texts, on_probe = transformers_reference(neox_series / f"step{step}", TEXTS)
        probe = np.stack([a for _, a in on_probe])  # [N, L, H, T, T]
        k = np.arange(s - 1)  # query R[k] of the second copy -> the token after R[k]'s first
        np.testing.assert_allclose(dynamics.heads["induction"][index],
                                   probe[..., 1 + s + k, 2 + k].mean(axis=(0, -1)),
                                   atol=2e-6, rtol=0)
        rows = np.arange(1, probe.shape[-1])
        np.testing.assert_allclose(dynamics.heads["previous_token"][index],
                                   probe[..., rows, rows - 1].mean(axis=(0, -1)),
                                   atol=2e-6, rtol=0)
        k = np.arange(s)  # BOS R R: only the second copy's tokens occur before, once each
        np.testing.assert_allclose(dynamics.heads["duplicate_token"][index],
                                   probe[..., 1 + s + k, 1 + k].mean(axis=(0, -1)),
                                   atol=2e-6, rtol=0)
        entropy = [-(np.where(a > 0, a * np.log(np.where(a > 0, a, 1)), 0)).sum(-1).mean(-1)
                   for _, a in on_texts]
        np.testing.assert_allclose(dynamics.heads["entropy"][index], np.mean(entropy, axis=0),
                                   atol=2e-6, rtol=0)
        np.testing.assert_allclose(dynamics.heads["sink_mass"][index],
                                   np.mean([a[..., 0].mean(-1) for _, a in on_texts], axis=0),
                                   atol=2e-6, rtol=0)


def test_losses_equal_transformers_own(neox_series, dynamics):
    """The text loss, the ICL score (positions given) and the probe's two losses, from
    GPTNeoXForCausalLM's logits on the same ids."""
    on_texts, on_probe = transformers_reference(neox_series / "step512", TEXTS)
    per_text = [loss for loss, _ in on_texts]
    assert dynamics.curves["text_loss"][1] == pytest.approx(np.concatenate(per_text).mean(),
                                                            abs=1e-4)
    assert min(loss.size for loss in per_text) >= 40
    icl = np.mean([loss[39] - loss[4] for loss in per_text])
    assert dynamics.curves["icl_score"][1] == pytest.approx(icl, abs=1e-4)
    assert (dynamics.info["icl_early"], dynamics.info["icl_late"]) == (5, 40)
    losses = np.array([loss for loss, _ in on_probe])
    s = PROBE["seq_len"]
    assert dynamics.curves["probe_loss_first"][1] == pytest.approx(losses[:, 1:s].mean(),
                                                                   abs=1e-4)
    assert dynamics.curves["probe_loss_repeated"][1] == pytest.approx(
        losses[:, s + 1:2 * s].mean(), abs=1e-4)


def test_by_default_the_icl_score_reads_the_runs_held_out_texts_at_olssons_positions_scaled(
        neox_series):
    """No texts given: the run's held_out_texts.json; the ICL score compares Olsson et al.'s
    token 500 with token 50, scaled to the shortest text: its last token and a tenth of it."""
    from transformers import AutoTokenizer

    found = training_dynamics(neox_series, **PROBE)
    tokenizer = AutoTokenizer.from_pretrained(str(neox_series / "step0"))
    context = min(len(tokenizer(t)["input_ids"]) for t in HELD_OUT)
    late = min(500, context - 1)
    early = round(late * 50 / 500)
    info = found.info
    assert (info["icl_early"], info["icl_late"], info["icl_context"]) == (early, late, context)
    assert info["held_out"] and info["texts"] == "three held-out texts" and info["n_texts"] == 3
    for index, step in enumerate(STEPS):
        on_texts, _ = transformers_reference(neox_series / f"step{step}", HELD_OUT)
        losses = [loss for loss, _ in on_texts]
        assert found.curves["icl_score"][index] == pytest.approx(
            np.mean([loss[late - 1] - loss[early - 1] for loss in losses]), abs=1e-4)
        assert found.curves["text_loss"][index] == pytest.approx(
            np.concatenate(losses).mean(), abs=1e-4)


@pytest.mark.parametrize("content, message", [
    ("not json", "cannot be read as JSON"),
    (json.dumps({"texts": []}), "must hold"),
    (json.dumps({"texts": ["fine", "  "]}), "must hold"),
    (None, "keeps no held-out texts"),
    (json.dumps({"texts": ["a", "b c d"]}), "compares an early token with a later one"),
])
def test_held_out_texts_that_are_missing_or_bad_get_a_message(tmp_path, neox_series, content,
                                                              message):
    root = tmp_path / "run"
    for step in (0, 512):
        shutil.copytree(neox_series / f"step{step}", root / f"step{step}")
    if content is not None:
        (root / "held_out_texts.json").write_text(content)
    with pytest.raises((SeriesError, InputError), match=message):
        training_dynamics(root, **PROBE)


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


@pytest.mark.parametrize("current", [10, 922, 3000])
def test_the_step_axis_spans_the_run_and_marks_sit_at_their_steps(current):
    """Issue 49 / 51 item 7: the axis is the run's whole range whatever step is marked, its
    labels are 1 and 3 times powers of ten (Plotly's minor labels are 3/4 of the font), and a
    mark's label sits at its step (one at step 10 had stretched a log axis to 10^10); a
    label's newline breaks its legend line."""
    from mha_viz import plots

    steps = [10, 22, 100, 511, 922, 3000]
    fig = plots.training_curves(steps, {"falls\n(why)": np.linspace(4, 1, 6)}, 922, current)
    axis = fig.layout.xaxis
    assert axis.type == "log"
    assert axis.range[0] == pytest.approx(1 - 0.03 * np.log10(300), abs=1e-9)
    assert axis.range[1] == pytest.approx(np.log10(3000) + 0.03 * np.log10(300), abs=1e-9)
    assert list(axis.tickvals) == [10, 30, 100, 300, 1000, 3000]
    assert list(axis.ticktext) == ["10", "30", "100", "300", "1,000", "3,000"]
    marks = {a.text: a.x for a in fig.layout.annotations}
    assert marks == {"phase change (step 922)": pytest.approx(np.log10(922)),
                     f"step {current:,}": pytest.approx(np.log10(current))}
    assert [s.x0 for s in fig.layout.shapes] == [922, current]
    assert fig.data[0].name == "falls<br>(why)"
    heads = plots.head_scores_over_steps(steps, np.zeros((6, 2, 2)), "score", [(1, 0)], 922,
                                         current)
    assert heads.layout.xaxis.range == axis.range


def test_the_induction_head_and_the_previous_token_head_it_can_read():
    """The heads the Training page's composition figure names: the highest peak of the
    induction score above layer 0 (not a higher one in layer 0, which reads no head), and
    the highest previous-token peak under that head's layer."""
    steps = np.array([1, 10, 100])
    induction = np.zeros((3, 3, 2))
    induction[1, 0, 1] = 0.9  # layer 0 cannot be an induction head: it reads no head
    induction[2, 2, 0], induction[1, 1, 1] = 0.5, 0.7
    previous = np.zeros((3, 3, 2))
    previous[2, 2, 1] = 1.0  # above the induction head: not one it reads
    previous[0, 0, 0], previous[2, 0, 1] = 0.6, 0.4
    found = TrainingDynamics(steps, {"induction": induction, "previous_token": previous}, {})
    assert found.induction_head() == (1, 1)
    assert found.previous_token_head(1) == (0, 0)
    assert found.previous_token_head(0) is None
    one_layer = TrainingDynamics(steps, {"induction": induction[:, :1],
                                         "previous_token": previous[:, :1]}, {})
    assert one_layer.induction_head() is None


def test_the_command_line_writes_the_induction_heads_composition(neox_series, dynamics,
                                                                 tmp_path, capsys):
    """--composition: the strongest induction head's composition at every checkpoint, on the
    probe's first sequence (BOS R R, drawn here as docs/analyses.md says), reopened from the
    file with every kind's shares of every source summing to 1 at each step."""
    from transformers import AutoTokenizer

    from mha_viz.analysis import CompositionOverTraining

    out, composition = tmp_path / "dyn.npz", tmp_path / "comp.npz"
    code = cli(["dynamics", str(neox_series), "--text", TEXTS[0], "--seq-len", "20",
                "--n-seqs", "3", "--seed", "1", "--out", str(out),
                "--composition", str(composition)])
    assert code == 0, capsys.readouterr().err
    assert "saved" in capsys.readouterr().out
    found = CompositionOverTraining.load(composition)
    assert (found.layer, found.head) == TrainingDynamics.load(out).induction_head()
    assert found.layer == 1 and found.steps.tolist() == list(STEPS)
    tokenizer = AutoTokenizer.from_pretrained(str(neox_series / "step0"))
    vocab = json.loads((neox_series / "step0" / "config.json").read_text())["vocab_size"]
    assert found.ids == repeated_random_probe(tokenizer, vocab, 20, 1, 1)[0]
    for kind in ("q", "k", "v"):
        total = getattr(found, kind)[:, 0].sum(-1) + sum(found.other[kind].values())
        np.testing.assert_allclose(total, 1.0, atol=1e-9)
    (tmp_path / "bad.npz").write_bytes(b"not an npz")
    with pytest.raises(InputError, match="not composition over training"):
        CompositionOverTraining.load(tmp_path / "bad.npz")
    with pytest.raises(InputError, match="not composition over training"):
        CompositionOverTraining.load(out)  # a file of another kind
