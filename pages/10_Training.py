"""Training: watch attention heads form across a training run's checkpoints: the loss with
the induction-head phase change marked, every head's role scores over steps, and the maps at
the step under a slider, which a play button walks."""

import streamlit as st

from mha_viz import plots, ui
from mha_viz.ui import training_page as tp

ui.page_setup(
    "Training: watch attention learn",
    "Every other page shows one frozen model. Here a model is shown **as it trained**: one "
    "checkpoint per step, each measured on the same inputs. In a two-layer model, suddenly, "
    "a **previous-token head** forms in layer 0 and an **induction head** in layer 1 that "
    "reads it; the loss on repeated text drops, and later tokens of a text become easier to "
    "predict than early ones: the phase change of Olsson et al. (2022), *In-context Learning "
    "and Induction Heads*.",
)

with ui.guard():
    series = tp.pick_series()
    st.caption(f"**{ui.md_escape(series.name)}**: {ui.md_escape(series.source)}; "
               f"{len(series)} checkpoints, steps {series.steps[0]:,} to {series.steps[-1]:,}.")
    dynamics = tp.dynamics_of(series)
    if dynamics is None:
        st.info("Cancelled: change the run or reload the page to measure it again.")
        st.stop()
    info, steps = dynamics.info, [int(s) for s in dynamics.steps]
    phase = tp.phase_step(dynamics)

    # ----------------------------------------------------------- the step under the slider
    step_col, play_col = st.columns([5, 1], vertical_alignment="bottom")
    with step_col:
        step = tp.step_slider(steps)
    playing = play_col.button("▶ Play", key="train_play", width="stretch",
                              help="Walk every checkpoint from the first, "
                                   f"{tp.PLAY_SECONDS:g} s each.")
    index = steps.index(step)

    # ----------------------------------------------------------- the loss and the ICL score
    ui.show_figure(plots.training_curves(steps, tp.loss_curves(dynamics), phase, step,
                                         training=series.training_loss()), key="train_loss")
    st.caption((f"Marked: the phase change, where the loss on the probe's repeated copy falls "
                f"fastest (per log-step), at step {phase:,}. " if phase else "")
               + f"Probe: {ui.md_escape(info['probe'])} (BOS R R): its first copy of R is "
                 f"random tokens, which no model can predict (at best its loss stays near a "
                 f"uniform guess's, and it may rise as the model fits its training text); the "
                 f"repeated copy can be copied from the first. Texts: "
                 f"{ui.md_escape(info.get('texts', ''))}.")
    ui.show_figure(plots.training_curves(
        steps, {tp.icl_label(dynamics): dynamics.curves["icl_score"]}, phase, step,
        title="In-context learning score", y_title="nats (lower: later tokens gain more)"),
        key="train_icl")
    st.caption(ui.md_escape(tp.icl_caption(dynamics)))

    # ----------------------------------------------------------- each head's score over steps
    score = ui.synced(st.selectbox, "tscore", "Score", "induction", options=list(tp.SCORES),
                      format_func=tp.SCORES.get)
    named = tp.named_heads(dynamics, score)
    ui.show_figure(plots.head_scores_over_steps(steps, dynamics.heads[score],
                                                tp.SCORES[score], named, phase, step),
                   key="train_heads")
    st.caption("Named: " + ", ".join(plots.head_name(*h) for h in named) + " (the highest "
               "at any step; for entropy the most focused at the last step). Layers and heads "
               "count from 0.")

    # ----------------------------------------------------------- the maps at the step
    best = dynamics.strongest_heads("induction", 1)[0]
    head_choices = [plots.head_name(l, h) for l in range(dynamics.n_layer)
                    for h in range(dynamics.n_head)]
    chosen = ui.synced(st.selectbox, "thead", "Head shown on the probe",
                       plots.head_name(*best), options=head_choices)
    layer, head = head_choices.index(chosen) // dynamics.n_head, \
        head_choices.index(chosen) % dynamics.n_head
    frame = st.empty()

    def draw(at: int) -> None:
        k = steps.index(at)
        left, right = st.columns(2)
        with left:
            ui.show_figure(plots.layer_head_heatmap(
                dynamics.heads[score][k], f"{tp.SCORES[score]} at step {at:,}",
                tp.SCORES[score], zmin=0.0, zmax=max(1.0, float(dynamics.heads[score].max()))
                if score != "entropy" else None), key=f"train_grid_{at}", share=0.5)
        with right:
            weights, tokens = tp.probe_map(series, k, layer, head, info["seq_len"],
                                           info["n_seqs"], info["seed"])
            ui.show_figure(plots.head_heatmap(
                weights, tokens, f"{chosen} on the probe at step {at:,}", causal=True),
                key=f"train_probe_{at}", share=0.5)

    if playing:
        tp.play(steps, draw, frame)
    with frame.container():
        draw(step)
    st.caption("Right: the chosen head on the probe's first sequence (BOS, then R, then R "
               "again). An induction head lights the stripe one above the diagonal of the "
               "second copy's block: from each token to the token after its first occurrence.")
    ui.caveat()
