"""The words of a dictionary's features at a head (the Features page and the why panel's
features view): what a dictionary is said to be, what the page says when it has none, the
figures' titles and notes, and the sums a reader can check, with the numbers as the page
prints them (three decimals; the tests read them at that precision)."""

from __future__ import annotations

from ...analysis.heads import head_name
from ..settings import md_escape

FOLDER_LABEL = "A SAELens folder on this server…"
DIGITS = 3  # every number of the page: activations, shares, terms, sums


def number(value: float) -> str:
    return f"{value:.{DIGITS}f}"


def signed(value: float) -> str:
    return f"{value:+.{DIGITS}f}"


def choice_label(name: str, folder: str) -> str:
    """A dictionary as the picker lists it: a bundled one by its name, the folder entry."""
    return FOLDER_LABEL if name == folder else f"{name} (bundled)"


def describe(sae) -> str:
    """What a dictionary is, in one caption: where it reads, its size and kind, what it was
    trained on and how much it leaves unexplained (when its file says)."""
    kind = sae.architecture if sae.k is None else f"{sae.architecture} (k = {sae.k})"
    where = (f"layer {sae.layer}'s heads before W_O" if sae.site == "hook_z" else
             f"the residual stream entering layer {sae.layer}" if sae.site == "resid_pre" else
             f"{sae.site} of layer {sae.layer}")
    said = f"Reads {where} ({sae.d_in} numbers): {sae.d_sae:,} features, {kind}"
    training = sae.metadata.get("mha_viz_training")
    held = training.get("held_out") if isinstance(training, dict) else None
    if isinstance(held, dict) and isinstance(held.get("fvu"), (int, float)):
        said += f"; it leaves {held['fvu']:.2f} of the variance unexplained on held-out text"
    if sae.model_name:
        said += f"; trained on {md_escape(str(sae.model_name)[:60])}"
    return said + "."


def train_command(model_name: str, site: str, layer: int) -> str:
    """The command that trains a dictionary of this model here (a folder's path is not
    repeated: a page never shows the server's folders)."""
    model = model_name if "/" not in model_name and "\\" not in model_name else "FOLDER"
    return (f"mha-viz train-sae --model {model} --site {site} --layer {layer} "
            f"--input texts.jsonl --out saes")


def none_for_model(model_name: str, layer: int) -> str:
    return (f"No dictionary of this model is bundled and none is open. Open a SAELens folder "
            f"(cfg.json and sae_weights.safetensors) from the sidebar, or train one on your "
            f"texts (docs/analyses.md, \"Features at the head\"):\n\n"
            f"`{train_command(model_name, 'hook_z', layer)}`")


def none_at_layer(layer: int, layers: list[int], model_name: str) -> str:
    found = ", ".join(f"L{layer_}" for layer_ in layers)
    return (f"No dictionary of this model reads layer {layer}'s heads; its dictionaries read "
            f"{found}. Pick that layer above, open a SAELens folder from the sidebar, or "
            f"train one: `{train_command(model_name, 'hook_z', layer)}`")


def not_heads(sae, layer: int) -> str:
    """An open dictionary that does not read this layer's heads, and where it serves."""
    if sae.site == "hook_z":
        return (f"This dictionary reads layer {sae.layer}'s heads, not layer {layer}'s: pick "
                f"layer {sae.layer} above.")
    residual = sae.site in ("resid_pre", "resid_post")
    return ("This dictionary reads " + ("the residual stream" if residual else sae.site)
            + ", not a layer's heads before W_O (hook_z): the Features page needs a hook_z "
            + "dictionary." + (" Its features split a head's score on the Attention maps and "
                               "Inside one head pages (why a head attends there, \"in "
                               "features\")." if residual else ""))


def refused_folder(message: str) -> str:
    """A folder that is not a dictionary of this model, with the library's reason (a
    sentence, ending with its stop)."""
    stop = "" if message.endswith((".", "!", "?")) else "."
    return f"**This folder cannot be opened as a dictionary.** {message}{stop}"


def head_features_title(layer: int, head: int) -> str:
    return f"{head_name(layer, head)}'s strongest features on this text"


HEAD_FEATURES_NOTE = ("each feature's activation summed over the text × its decoder-norm "
                      "share on the head; click or tap a bar to follow it")


def head_features_caption(skipped: int, layer: int, head: int) -> str:
    first = "" if not skipped else (f" (position 0 left out, as training leaves it out: "
                                    f"a causal model parks attention there)")
    return (f"A hook_z dictionary reads every head of layer {layer} at once; a feature's "
            f"decoder row has one block per head, and its **share** on {head_name(layer, head)} "
            f"is that block's norm over the blocks' (Kissane et al. 2024). The bars rank the "
            f"features by their activation summed over the text{first} times that share.")


TABLE_COLUMNS = {"feature": "feature", "summed": "summed activation",
                 "share": "share on the head", "peak": "fires most at", "text": "there"}


def snippet(tokens: list[str], at: int) -> str:
    """A window of text with the token it is about in brackets: "the cat [s]at"."""
    return "".join(f"[{t}]" if i == at else t for i, t in enumerate(tokens)).replace("␣", " ")


def firing_title(feature: int) -> str:
    return f"Where f{feature} fires on this text"


def firing_note(query: int) -> str:
    return (f"white = 0, the darkest = its largest on this text; the outlined token is the "
            f"query below ({query}): click or tap a token to ask there")


def sources_title(feature: int, query: int, token: str) -> str:
    return f"f{feature} at query {query} '{token}': its pre-activation by head and source token"


def sources_note(sources_down: bool) -> str:
    return ("red raises it, blue lowers it; each head's total "
            + ("at the bottom, each source's on the right" if sources_down
               else "on the right, each source's at the bottom"))


def sources_sentence(found, token: str, seen: int) -> str:
    """The map's sum, stated: the terms, the bias, the pre-activation (FeatureSources; seen:
    the source tokens the query reads, those the map draws)."""
    terms = float(found.terms.sum())
    return (f"**The sum:** the {found.terms.shape[0]} heads × {seen} source tokens give "
            f"{signed(terms)} (the corner of the map), the bias {signed(found.bias)}: "
            f"{signed(terms + found.bias)} in all, f{found.feature}'s pre-activation at query "
            f"{found.query} '{md_escape(token)}' ({signed(found.pre_activation)} as the "
            f"dictionary computes it). Its activation there is {number(found.activation)}: "
            f"the activation function (TopK, JumpReLU, ReLU) is not linear, so the terms "
            f"split what it reads.")


def strongest_sentence(found, k: int = 3) -> str:
    parts = [f"{head} from {position} '{md_escape(found.tokens[position])}' ({signed(term)})"
             for head, position, term in found.strongest(k)]
    by_head = ", ".join(f"{name} {signed(float(total))}"
                        for name, total in zip(found.heads, found.head_totals()))
    return f"The largest parts: {'; '.join(parts)}. By head: {by_head}."


def output_title(feature: int) -> str:
    return f"The next tokens f{feature} raises and lowers"


def unique_labels(labels: list[str]) -> list[str]:
    """Labels a bar chart keeps apart: a repeated one gets its count ("the (2)")."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return out


OUTPUT_NOTE = "its decoder row through W_O, the final norm's weight and the unembedding"
OUTPUT_VALUE = "logit per unit of activation"


def no_output(message: str) -> str:
    return f"No output tokens: {message}"


SNIPPETS_TITLE = "Where the head's features fire most over a corpus"


def snippets_intro(n_features: int, n_texts: int, segments: int, seg_len: int) -> str:
    return (f"The {n_features} features above, read over the first {n_texts} paragraphs of "
            f"the demo corpus (Python's documentation), at most {segments} segments of "
            f"{seg_len} tokens: each feature's strongest activations with the text around "
            f"them (the token it fires at in brackets).")


def snippets_done(n_segments: int, n_tokens: int) -> str:
    return f"Read {n_segments:,} segments ({n_tokens:,} tokens)."


def snippets_button(segments: int) -> str:
    return f"Read {segments} segments of the corpus"


SNIPPETS_WAIT = ("Reading the corpus runs the model over every segment: press the button "
                 "(a bar shows its progress, Cancel stops it).")


# ------------------------------------------------------------- the why panel, in features

PAIRS_TOGGLE = "In features"
PAIRS_HELP = ("The same score split into the features of a dictionary of the stream entering "
              "this layer: query-side feature × key-side feature pairs, plus the dictionary's "
              "error, its decoder bias and the model's biases (Kamath et al. 2025).")


def pair_label(query_feature: str, key_feature: str) -> str:
    return f"{query_feature} × {key_feature}"


PART_LABELS = {"error": "error", "b_dec": "decoder bias", "bias": "biases"}


def pairs_title(layer: int, head: int, query: int, key: int) -> str:
    return f"{head_name(layer, head)}'s score, query {query} → key {key}, in features"


PAIRS_NOTE = ("query-side feature × key-side feature, strongest first; then every term of "
              "the error, the decoder bias and the biases, and the other pairs; the score last")


def pairs_sentence(pairs, dictionary: str) -> str:
    """The bars' sum, stated: the named pairs, the error, decoder-bias and bias terms, the
    other pairs: the score (FeaturePairs)."""
    parts = ", ".join(f"{PART_LABELS[name]} {signed(value)}"
                      for name, value in pairs.parts.items())
    return (f"**The sums, in the features of {md_escape(dictionary)}:** the {len(pairs.pairs)} "
            f"pairs named give {signed(pairs.named)}; the terms with {parts}; the other "
            f"{pairs.n_others:,} pairs {signed(pairs.others)}: {signed(pairs.total)} in all, "
            f"the score. The error's part is what the dictionary leaves out.")


def feature_line(name: str, side: str, activation: float, tokens: list[str], at: int) -> str:
    """One feature of the pairs: its side, its activation there and where it fires most on
    the text."""
    return (f"**{name}** ({side} side, activation {number(activation)}): fires most at "
            f"“{md_escape(snippet(tokens, at))}”")
