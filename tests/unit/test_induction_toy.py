"""The bundled training runs (issues 42 and 49), measured here from their checkpoints with
transformers' own GPTNeoXForCausalLM (eager attention, its attentions and logits, read in this
file): what the Training page shows (the dynamics.npz shipped beside each run) equals that
reference, and the reference shows the phase change of Olsson et al. (2022). In the
attention-only run the best layer-1 head's induction score goes from below 0.1 to above 0.5,
the loss on the probe's repeated copy falls within a few checkpoints while that score rises,
a layer-0 previous-token head forms with it, and the in-context learning score on held-out
text of the run's training distribution is lower at the last checkpoint than at the first
and falls most at the phase change. The checkpoints open in our engine as transformers opens
them; the training script with its seed gives the same checkpoints again."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tests.support.hf_reference import repeated_random_probe

from mha_viz import checkpoint_series, load_model
from mha_viz.analysis import TrainingDynamics
from mha_viz.toys import induction

pytestmark = pytest.mark.slow  # 60 checkpoints read by transformers: about a minute
WINDOW = 4  # checkpoints: "within a few"
PROBE_SEQS, PROBE_SEED = 8, 0  # the page's probe (docs/analyses.md)


def olsson_positions(context: int) -> tuple[int, int]:
    """Olsson et al.'s tokens 50 and 500, scaled to a shorter context: the last token, and
    a tenth of it (their ratio), as docs/analyses.md says the page does."""
    late = min(500, context - 1)
    return round(late / 10), late


def reference(series_name: str) -> dict[str, np.ndarray]:
    """Every checkpoint's curves and head scores from transformers' model: the held-out
    texts' next-token losses and ICL score, the probe's losses and its induction,
    previous-token and duplicate-token scores (the formulas of docs/analyses.md written
    here), every head's entropy and mass on the first token on the texts."""
    from transformers import AutoTokenizer, GPTNeoXForCausalLM

    series = checkpoint_series(series_name)
    texts = json.loads((series.root / "held_out_texts.json").read_text())["texts"]
    out = {k: [] for k in ("text_loss", "icl_score", "probe_loss_first",
                           "probe_loss_repeated", "induction", "previous_token",
                           "duplicate_token", "entropy", "sink_mass")}
    for checkpoint in series.checkpoints:
        folder = str(checkpoint.folder())
        model = GPTNeoXForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                   attn_implementation="eager").eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        ids = torch.tensor(tokenizer(texts)["input_ids"])  # every text: BOS and 63 characters
        context = ids.shape[1]
        seq_len = (context - 1) // 2
        probe = torch.tensor(repeated_random_probe(tokenizer, model.config.vocab_size, seq_len,
                                                   PROBE_SEQS, PROBE_SEED))
        with torch.no_grad():
            on_texts = model(ids, output_attentions=True)
            on_probe = model(probe, output_attentions=True)

        def token_losses(logits, x):  # [N, T - 1]: [:, j - 1] is token j's loss
            return torch.nn.functional.cross_entropy(
                logits[:, :-1].transpose(1, 2), x[:, 1:], reduction="none").double().numpy()

        losses = token_losses(on_texts.logits, ids)
        early, late = olsson_positions(context)
        out["text_loss"].append(losses.mean())
        out["icl_score"].append((losses[:, late - 1] - losses[:, early - 1]).mean())
        probe_losses = token_losses(on_probe.logits, probe)
        out["probe_loss_first"].append(probe_losses[:, 1:seq_len].mean())
        out["probe_loss_repeated"].append(probe_losses[:, seq_len + 1:2 * seq_len].mean())
        a = torch.stack(on_probe.attentions, 1).double().numpy()  # [N, L, H, T, T]
        k = np.arange(seq_len - 1)
        out["induction"].append(a[..., 1 + seq_len + k, 2 + k].mean(axis=(0, -1)))
        rows = np.arange(1, a.shape[-1])
        out["previous_token"].append(a[..., rows, rows - 1].mean(axis=(0, -1)))
        # in BOS R R only the second copy's tokens occur earlier, each once
        k = np.arange(seq_len)
        out["duplicate_token"].append(a[..., 1 + seq_len + k, 1 + k].mean(axis=(0, -1)))
        t = torch.stack(on_texts.attentions, 1).double().numpy()
        plogp = np.where(t > 0, t * np.log(np.where(t > 0, t, 1.0)), 0.0)
        out["entropy"].append(-plogp.sum(-1).mean(axis=(0, -1)))
        out["sink_mass"].append(t[..., 0].mean(axis=(0, -1)))
    return {name: np.asarray(values) for name, values in out.items()}


@pytest.fixture(scope="module")
def attention_only():
    return reference("induction-toy")


@pytest.fixture(scope="module")
def with_mlps():
    return reference("induction-toy-mlp")


def steepest_fall_per_log_step(steps, values) -> int:
    """The checkpoint a curve reaches by its steepest fall per unit of log step."""
    return int(np.argmax(-np.diff(values) / np.diff(np.log(steps)))) + 1


def half_way(values: np.ndarray) -> int:
    """The first checkpoint at which a curve has made half its rise from its first value."""
    target = values[0] + 0.5 * (values.max() - values[0])
    return int(np.argmax(values >= target))


@pytest.mark.parametrize("name", ["induction-toy", "induction-toy-mlp"])
def test_what_the_page_shows_is_what_transformers_measures(name, attention_only, with_mlps):
    """The Training page opens a bundled run on the dynamics shipped beside it: every curve
    and head score equals transformers' on the same checkpoints, texts and probe."""
    ours = TrainingDynamics.load(checkpoint_series(name).root / "dynamics.npz")
    theirs = attention_only if name == "induction-toy" else with_mlps
    assert ours.steps.tolist() == checkpoint_series(name).steps
    assert (ours.info["icl_early"], ours.info["icl_late"]) == olsson_positions(64) == (6, 63)
    assert ours.info["held_out"] and ours.info["n_texts"] == 256
    for curve in ("text_loss", "icl_score", "probe_loss_first", "probe_loss_repeated"):
        np.testing.assert_allclose(ours.curves[curve], theirs[curve], atol=2e-4, rtol=0,
                                   err_msg=curve)
    for head in ("induction", "previous_token", "duplicate_token", "entropy", "sink_mass"):
        np.testing.assert_allclose(ours.heads[head], theirs[head], atol=2e-5, rtol=0,
                                   err_msg=head)


@pytest.mark.parametrize("name", ["induction-toy", "induction-toy-mlp"])
def test_the_composition_the_page_shows_is_the_functions(name):
    """The Training page draws a bundled run's composition from the composition.npz beside
    it: that file holds what composition_over_training gives now, for the run's strongest
    induction head, on the first sequence of the page's probe. (The share's own parity with
    transformers is tests/unit/test_composition.py's.)"""
    from mha_viz.analysis import CompositionOverTraining, composition_over_training

    series = checkpoint_series(name)
    dynamics = TrainingDynamics.load(series.root / "dynamics.npz")
    shipped = CompositionOverTraining.load(series.root / "composition.npz")
    assert (shipped.layer, shipped.head) == dynamics.induction_head()
    again = composition_over_training(series, shipped.layer, shipped.head,
                                      seq_len=dynamics.info["seq_len"],
                                      seed=dynamics.info["seed"])
    assert shipped.steps.tolist() == again.steps.tolist() == series.steps
    assert shipped.ids == again.ids and shipped.input == again.input
    for kind in ("q", "k", "v"):
        np.testing.assert_allclose(getattr(shipped, kind), getattr(again, kind), atol=1e-6,
                                   rtol=0, err_msg=kind)
        assert shipped.other[kind].keys() == again.other[kind].keys()
        for source, values in again.other[kind].items():
            np.testing.assert_allclose(shipped.other[kind][source], values, atol=1e-6, rtol=0)


def test_the_run_is_about_thirty_log_spaced_checkpoints():
    series = checkpoint_series("induction-toy")
    steps = np.asarray(series.steps, dtype=float)
    assert 25 <= len(steps) <= 30 and steps[-1] == induction.STEPS
    ratios = steps[1:] / steps[:-1]
    assert ratios[-10:].std() < 0.02  # log-uniform where rounding no longer matters
    steps_logged, loss = series.training_loss()
    assert steps_logged[-1] == induction.STEPS and loss[-1] < loss[0] - 2


def test_an_induction_head_forms_in_layer_1(attention_only):
    scores = attention_only["induction"][:, 1]  # [step, head] of layer 1
    assert scores[0].max() < 0.1, scores[0]
    assert scores[-1].max() > 0.5, scores[-1]


def test_the_repeated_copy_loss_falls_sharply_as_the_induction_score_rises(attention_only):
    repeated = attention_only["probe_loss_repeated"]
    first_copy = attention_only["probe_loss_first"]
    induction_score = attention_only["induction"][:, 1].max(axis=1)
    drops = repeated[:-WINDOW] - repeated[WINDOW:]
    start = int(np.argmax(drops))  # the window of WINDOW checkpoints where it falls most
    total = repeated[0] - repeated.min()
    assert drops[start] > 0.5 * total, (drops[start], total)
    rise = induction_score[start + WINDOW] - induction_score[start]
    assert rise > 0.5 * (induction_score.max() - induction_score[0])
    # the copy is learned in context: the first copy, which nothing predicts, stays hard
    assert repeated[-1] < first_copy[-1] - 1.0
    steps = checkpoint_series("induction-toy").steps
    assert start < steepest_fall_per_log_step(steps, repeated) <= start + WINDOW


def test_the_in_context_learning_score_falls_at_the_phase_change(attention_only):
    """Olsson et al.: on text of the training distribution the ICL score falls (later tokens
    gain more) in the window where the induction head forms."""
    steps = checkpoint_series("induction-toy").steps
    icl = attention_only["icl_score"]
    assert icl[-1] < icl[0] - 2.0, icl
    phase = steepest_fall_per_log_step(steps, attention_only["probe_loss_repeated"])
    steepest = int(np.argmax(icl[:-1] - icl[1:])) + 1  # reached by its largest single fall
    assert phase - 1 <= steepest <= phase + 1, (steps[phase], steps[steepest])
    around = icl[phase - WINDOW // 2] - icl[phase + WINDOW // 2]
    assert around > 0.6 * (icl[0] - icl.min()), (around, icl)


def test_no_curve_of_the_run_rises_but_the_random_tokens(attention_only):
    """The page labels the probe's first copy as random tokens that cannot be predicted; the
    other curves of its first figure fall over training."""
    for curve in ("text_loss", "probe_loss_repeated", "icl_score"):
        values = attention_only[curve]
        assert values[-1] < values[0] - 1.0, (curve, values)


def test_a_previous_token_head_forms_with_the_induction_head(attention_only):
    previous = attention_only["previous_token"][:, 0].max(axis=1)  # layer 0's best
    induction_score = attention_only["induction"][:, 1].max(axis=1)
    assert previous[-1] > 0.3
    assert half_way(previous) <= half_way(induction_score), (previous, induction_score)


def test_the_run_with_mlps_forms_an_induction_head_and_learns_in_context(with_mlps):
    induction_scores = with_mlps["induction"][:, 1]
    assert induction_scores[0].max() < 0.1 and induction_scores[-1].max() > 0.5
    icl = with_mlps["icl_score"]
    assert icl[-1] < icl[0] - 2.0, icl


def test_the_held_out_texts_are_the_toys_and_unseen():
    """held_out_texts.json is what the toy draws with seed 1, from the paragraphs it leaves
    out of training; each text is a BOS and 63 characters to the checkpoint's tokenizer."""
    from transformers import AutoTokenizer

    series = checkpoint_series("induction-toy")
    shipped = json.loads((series.root / "held_out_texts.json").read_text())["texts"]
    assert shipped == induction.held_out_texts()
    tokenizer = AutoTokenizer.from_pretrained(str(series.checkpoints[-1].folder()))
    assert {len(ids) for ids in tokenizer(shipped)["input_ids"]} == {induction.CONTEXT}
    trained_on, held_out = induction.split_text(induction.training_text())
    trained_lines, held_lines = set(trained_on.split("\n")), set(held_out.split("\n"))
    assert held_lines and not trained_lines & held_lines
    from_documentation = [t for t in shipped if t[:10] in held_out]
    assert len(from_documentation) > 0.3 * len(shipped)


def test_a_checkpoint_opens_as_transformers_opens_it():
    from transformers import AutoModelForCausalLM

    folder = checkpoint_series("induction-toy").checkpoints[-1].folder()
    ours = load_model(folder)
    reference_model = AutoModelForCausalLM.from_pretrained(
        str(folder), dtype=torch.float32, attn_implementation="eager").eval()
    ids = ours.tokenizer("Return the value of the named attribute of object.")["input_ids"]
    with torch.no_grad():
        out = reference_model(torch.tensor([ids]), output_attentions=True)
    np.testing.assert_allclose(ours.trace_ids(ids).attentions,
                               torch.cat(out.attentions).numpy(), atol=2e-5, rtol=0)


def test_training_again_with_the_seed_gives_the_same_checkpoints(tmp_path):
    """The whole attention-only run again (a minute or two on one core): the weights at the
    first and a middle checkpoint equal the bundled ones, and so do the held-out texts. Past
    the phase change a run on a CPU whose kernels round sums otherwise (AVX2 against the
    bundled run's AVX-512) drifts: measured, identical to step 511, then each tensor within
    8% of the bundled one (relative Frobenius norm) and the loss within 0.009, where another
    seed or schedule differs by the tensor's whole size. On the CPU that made them the
    checkpoints are equal to the last."""
    from safetensors.numpy import load_file

    threads = torch.get_num_threads()
    try:
        induction.train(tmp_path, log=lambda line: None)
    finally:
        torch.set_num_threads(threads)
    bundled = checkpoint_series("induction-toy")
    again = checkpoint_series(tmp_path)
    assert again.steps == bundled.steps
    for k in (0, len(bundled) // 2, len(bundled) - 1):
        ours = load_file(again.checkpoints[k].folder() / "model.safetensors")
        shipped = load_file(bundled.checkpoints[k].folder() / "model.safetensors")
        assert ours.keys() == shipped.keys()
        for name, tensor in shipped.items():
            mine, theirs = ours[name].astype(np.float64), tensor.astype(np.float64)
            if k < len(bundled) - 1:
                np.testing.assert_allclose(mine, theirs, atol=2e-3, rtol=0, err_msg=name)
            else:
                size = np.linalg.norm(theirs)  # a bias of zeros: the absolute drift
                drift = np.linalg.norm(mine - theirs) / (size if size else 1.0)
                assert drift < 0.15, (name, drift)
    assert again.held_out_texts() == bundled.held_out_texts()
    np.testing.assert_allclose(again.training_loss()[1], bundled.training_loss()[1], atol=0.02)
