"""The words of the Predictions page: how surprised the model was, what its guesses were, and
what a head's direct effect and its exact effect on one prediction are."""

from __future__ import annotations

K = 5  # guesses shown at each position
INTRO = ("What the model predicts at every position, how surprised it was by each token of the "
         "text, and, for one prediction, which heads write it: each head's direct effect on "
         "the logit (direct logit attribution) beside the exact effect of switching it off.")
# the page's one colour rule, said once above its red-blue maps
COLOURS = ("In the maps below, red = the head raises the metric (it pushes the prediction "
           "toward the target), blue = it lowers it; white = no effect.")
POST_NORM = ("Direct logit attribution needs a pre-norm model (GPT-2, the Llama family): in a "
             "post-norm model like BERT the residual stream is renormalized after every layer, "
             "so it is not a sum of the heads' outputs.")
ABLATION = ("Each cell: the metric with every head on − the metric with that head switched "
            "off, so what the head adds to it. It counts every path, direct and through later "
            "layers.")
MASKED_HELP = ("A masked-LM model predicts the tokens it cannot see: each chosen position is "
               "replaced by [MASK].")


def no_lm_head(name: str) -> str:
    return (f"{name} has no language-model head: it turns a text into an embedding and "
            f"predicts no tokens. Pick **SmolLM2** (bundled) or another causal or masked-LM "
            f"model in the sidebar.")


def guesses(tokens, probs, fmt: str = ".0%", quoted: bool = False) -> str:
    """A position's top guesses: "the 40%, a 12%, ..." (quoted: "'the' 40.0%, ...")."""
    return ", ".join((f"'{t}' {p:{fmt}}" if quoted else f"{t} {p:{fmt}}")
                     for t, p in zip(tokens, probs))


def surprise(mean_loss: float, perplexity: float, written: bool) -> str:
    """Under the loss strip of a causal model's text."""
    return (f"Mean loss {mean_loss:.3f} nats/token (perplexity {perplexity:.1f}). Dark cells are "
            f"tokens the model did not expect; point at or tap a cell for its probability and "
            f"the model's top {K} guesses for that place."
            + (" The model wrote the marked tokens itself, so each was among its own guesses "
               "(its first, when it wrote greedily)." if written else ""))


def decoder_surprise(whose: str, mean_loss: float) -> str:
    """Under the loss strip of an encoder-decoder's target."""
    return (f"The decoder reads {whose} teacher-forced: at each position it has the source and "
            f"the target tokens before. Mean loss {mean_loss:.3f} nats/token. Dark cells are "
            f"tokens it did not expect; point at or tap a cell for its probability and the "
            f"decoder's top {K} guesses there.")


def metric_line(described: str, value: float) -> str:
    return (f"**Metric:** {described} = **{value:.3f}**. In code: `model.score(text, "
            f"metric=TargetMetric(...))`; `ablation_effects`, `gradient_importance` and "
            f"`pruning_curve` take the same `metric=`.")


def _rest(parts: dict) -> str:
    """The parts of a direct logit attribution that are not attention heads."""
    return (f"MLPs {parts['MLPs']:.2f}; embeddings {parts['embeddings']:.2f}; the rest "
            f"{parts['the rest']:.2f}")


def direct_effects(position: int, scale: float, parts: dict, total_sum: float,
                   total: float) -> str:
    """What a causal model's direct logit attribution sums, part by part."""
    return (f"Each head's output at position {position}, through its slice of W_O and the final "
            f"norm (its scale frozen at {scale:.3g}), read along W_U[target] − W_U[contrast]. "
            f"All heads together: {parts['self-attention heads']:.2f}; {_rest(parts)}. "
            f"They sum to {total_sum:.3f}, the model's logit "
            f"difference {total:.3f}. A direct effect leaves out what a head does through later "
            f"layers: compare the ablation beside it.")


def decoder_direct_effects(described: str, scale: float, parts: dict, total_sum: float,
                           total: float) -> str:
    """What an encoder-decoder's direct logit attribution sums (described: escaped)."""
    return (f"Direct effect on {described}: each head's output at this position, through its "
            f"slice of W_O and the final norm (its scale frozen at {scale:.3g}). Self-attention "
            f"heads {parts['self-attention heads']:.2f}; cross-attention heads "
            f"{parts['cross-attention heads']:.2f}; {_rest(parts)}. They sum to "
            f"{total_sum:.3f}, the decoder's own {total:.3f}. The source reaches this prediction "
            f"only through the cross-attention heads; a direct effect leaves out what a head "
            f"does through later layers.")


def ablation_waits(total_heads: int, up_to: int) -> str:
    return (f"The exact sweep runs the layers above each of the {total_heads} heads once; past "
            f"{up_to} tokens it waits for the button above.")
