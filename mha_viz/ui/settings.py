"""The app's settings and text helpers: defaults, the model picker's choices, the example
texts, limits, and how text goes into markdown."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from .. import checkpoints
from ..checkpoints.series import BUNDLED_SERIES
from ..core.folders import kept_folder

APP_DIR = Path(__file__).resolve().parents[2]  # where app.py and pages/ live

APP_NAME = "mha-viz"
DEFAULT_MODEL = "smollm2"  # a real causal LM: the first minute shows predictions


def default_model() -> str:
    """The model a visitor starts with: MHA_VIZ_DEFAULT_MODEL when it names a bundled model
    or a hub suggestion (a classroom may prefer MiniLM), else SmolLM2."""
    chosen = os.environ.get("MHA_VIZ_DEFAULT_MODEL", "").strip().lower()
    return chosen if chosen in MODEL_CHOICES and chosen != FOLDER_CHOICE else DEFAULT_MODEL


def prepared_folder() -> Path | None:
    """Where prepared results outlive the server (MHA_VIZ_PREPARED_DIR; "0" or "off" keeps
    them in memory only), by default the user's cache folder: the next start has them."""
    return kept_folder("MHA_VIZ_PREPARED_DIR", "prepared")


def ray_cluster() -> tuple[str, int] | None:
    """(address, workers) of the Ray cluster the server's owner configured for the Corpus
    page (MHA_VIZ_RAY_ADDRESS, MHA_VIZ_RAY_WORKERS, default 4), or None. Only the environment
    sets it: a visitor never chooses where the server connects."""
    address = os.environ.get("MHA_VIZ_RAY_ADDRESS", "").strip()
    if not address:
        return None
    try:
        workers = int(os.environ.get("MHA_VIZ_RAY_WORKERS", "4"))
    except ValueError:
        workers = 4
    return address, max(1, min(workers, 1024))


FOLDER_CHOICE = "folder"  # the model picker's "local checkpoint folder" entry
# the bundled models, the bundled training runs (their last checkpoints), hub ids, a folder
MODEL_CHOICES = [*checkpoints.BUNDLED, *BUNDLED_SERIES, *checkpoints.HUB_SUGGESTIONS,
                 FOLDER_CHOICE]
MODEL_LABELS = {
    "minilm": "MiniLM (bundled, offline)",
    "smollm2": "SmolLM2-135M (bundled, causal LM)",
    "t5-toy": "Toy T5 translator (bundled, encoder-decoder)",
    "reader-toy": "Toy digit reader (bundled, image to text)",
    "induction-toy": "Induction toy, trained (bundled, 2 layers, attention only)",
    "induction-toy-mlp": "Induction toy with MLPs, trained (bundled, 2 layers)",
    "gpt2": "gpt2: GPT-2 small (hub)",
    "distilgpt2": "distilgpt2 (hub)",
    "gpt2-medium": "gpt2-medium (hub)",
    "bert-base-uncased": "bert-base-uncased (hub)",
    "bert-base-cased": "bert-base-cased (hub)",
    FOLDER_CHOICE: "A local checkpoint folder…",
}

EXAMPLES = {
    "coreference": {
        "label": "Coreference: it → animal?",
        "help": "Which word does 'it' attend to? Look for heads linking 'it' to 'animal'.",
        "text": "The animal didn't cross the street because it was too tired.",
        "pair": "",
    },
    "induction": {
        "label": "Repeated text (induction)",
        "help": "A sequence seen twice: induction heads attend from a token to the token "
                "that followed its previous occurrence (clearest in causal models: SmolLM2, "
                "GPT-2).",
        "text": ("Mr and Mrs Dursley of number four Privet Drive were proud to say that they "
                 "were perfectly normal. Mr and Mrs Dursley of number four Privet Drive were "
                 "proud to say that they were perfectly normal."),
        # for a small context (the induction toy's 64 characters): repeated within it
        "short": "the cat sat on the mat. the cat sat on the mat.",
        "pair": "",
    },
    "ioi": {
        "label": "Indirect object (IOI)",
        "help": "Who gets the drink? A causal model should predict ' Mary', the indirect "
                "object (Wang et al. 2023). See the Predictions page: target ' Mary', "
                "contrast ' John'.",
        "text": "When Mary and John went to the store, John gave a drink to",
        "pair": "",
    },
    "translation": {
        "label": "Toy translation (t5-toy)",
        "help": "For the bundled toy T5 (encoder-decoder): it knows only its small toy "
                "vocabulary, and puts adjectives after their nouns. Pick cross-attention "
                "and watch each target word read the source word it translates.",
        "text": "red car follows small dog near old house",
        "pair": "",
        "corrupted": "red car follows small cat near old house",  # Circuits: one word swapped
    },
    "reading": {
        "label": "Digits in an image (reader-toy)",
        "help": "For the bundled digit reader (cross-modal attention): the digits are drawn "
                "in an image, its encoder reads the image in strips, and its decoder writes "
                "the digits. Pick cross-attention and watch each digit read its strips.",
        "text": "40721",
        "pair": "",
        "corrupted": "40821",  # Circuits: one digit changed
    },
    "pair": {
        "label": "Sentence pair (BERT)",
        "help": "A question and an answer as BERT's sentences A and B ([SEP] between them). "
                "A causal model reads them as one text.",
        "text": "Where did the cat sleep last night?",
        "pair": "The cat slept on the warm mat by the kitchen door.",
    },
}
DEFAULT_TEXT = EXAMPLES["coreference"]["text"]
SEQ2SEQ_TEXT = EXAMPLES["translation"]["text"]  # an encoder-decoder's source by default
IMAGE_TEXT = EXAMPLES["reading"]["text"]  # an image encoder's digits by default
# the text a model opens on, by what it reads (Model.reads)
DEFAULT_TEXTS = {"text": DEFAULT_TEXT, "source": SEQ2SEQ_TEXT, "image": IMAGE_TEXT}


def default_text(model) -> str:
    """The text the sidebar opens on for this model (and the warm start prepares)."""
    return DEFAULT_TEXTS[model.reads]
# Traces grow as L * H * T^2 floats (gpt2-medium at 1024 tokens: 1.6 GB), so by default a
# trace stops at 512 tokens; the sidebar lets a user go up to the model's context.
DEFAULT_MAX_TOKENS = 512


def max_tokens_within(value, context: int | None) -> int:
    """The sidebar's Max tokens as the pages read it: value when it is a whole number from 2
    to the model's context (100,000 with no model), else the default cut to the context."""
    limit = context or 100_000
    try:
        asked = int(value)
    except (TypeError, ValueError):
        asked = 0
    return asked if 2 <= asked <= limit else min(limit, DEFAULT_MAX_TOKENS)


URL_MAX_CHARS = 4000  # longer texts are not copied into the URL (browsers and proxies cut it)
# ... nor a value whose percent-encoded form is longer than this: the web server (uvicorn's
# h11) answers a bare HTTP 400, before the app sees it, to a request whose line and headers
# are still incomplete past 16 KiB (over a network: a URL of about 16 KB), and a character
# of another alphabet takes up to 12 characters in a link
URL_MAX_ENCODED = 12_000


def fits_in_link(text: str) -> bool:
    """Whether a value goes into a page's link (and is read from one): at most
    URL_MAX_CHARS characters and URL_MAX_ENCODED once percent-encoded."""
    if len(text) > URL_MAX_CHARS:
        return False
    return len(quote(text, safe="")) <= URL_MAX_ENCODED


# A link that reached the app has passed the web server already: a value is read from it up
# to this many characters (a long text shared by a script, a test or another tool), although
# the app itself writes only what fits_in_link
URL_READ_MAX_CHARS = 12_000


def readable_from_link(text: str) -> bool:
    """Whether a link's value is read (at most URL_READ_MAX_CHARS characters)."""
    return len(text) <= URL_READ_MAX_CHARS
IMAGE_FORMATS = ("png", "svg")
MAX_UPLOAD_BYTES = 200 * 2**20  # also server.maxUploadSize in .streamlit/config.toml

CAVEAT = ("Attention weights show where each token reads information from, not why the model "
          "made a prediction (Jain & Wallace 2019, *Attention is not Explanation*; Wiegreffe & "
          "Pinter 2019). Read the maps as hypotheses to test, e.g. with head ablation.")
NUMBERING = "Layers and heads count from 0: L5.H1 = layer 5, head 1, counted from 0."
# the mark every token axis, table and download shows on the tokens the model wrote after the
# sidebar's text (Continue, on Home)
WRITTEN_MARK = "✎"


# --------------------------------------------------------- what runs on opening


@dataclass(frozen=True)
class OnOpen:
    """A result a page computes by itself when it opens, while the input is at most
    ``up_to`` of ``what`` (inclusive); past that the page waits for its button. ``warm``:
    the warm start prepares it too (for the default model and text, and Home's "Prepare
    every page" button), with the page's default choices. ``at_start``: a warm result that
    takes minutes is prepared by ``python -m mha_viz prepare`` and Home's button only, not as
    the server starts (it would hold a core while the first visitors wait)."""
    up_to: int
    what: str = "tokens"
    warm: bool = False
    at_start: bool = True


# The one table of run policies: the views and the warm start read it, nothing else decides.
RUNS_ON_OPEN = {
    # Predictions: the exact sweep of one target metric (every head, the layers above it)
    "predictions.ablation": OnOpen(32),
    # Pruning impact: its L x H passes, the gradient and the curve (when one backward pass
    # gives them: not for an embedding shift, whose gradient is 0 at its optimum)
    "pruning.ablation": OnOpen(256, warm=True),
    "pruning.gradient": OnOpen(256, warm=True),
    "pruning.curve": OnOpen(256, warm=True),
    # an encoder-decoder's pruning curve: every head of every kind, one run per head a step
    "pruning.seq2seq_curve": OnOpen(200, "heads"),
    # Circuits: one pair is patched in every view but path patching (a run per sender)
    "circuits.patching": OnOpen(64),
    "circuits.seq2seq_patching": OnOpen(200, "heads"),
    # Corpus: a run over many texts always waits for its button
    "corpus.run": OnOpen(0, "segments"),
    # Features: where a head's features fire most over the demo corpus, sized as the tokens
    # read times the layers they run through (the toys' 64 segments run by themselves)
    "features.snippets": OnOpen(20_000, "tokens x layers"),
    # Long range: the needle study (one forward per case) up to its longest prompt; the
    # sinks and StreamingLLM's table (a few forwards) on the page's long text; the sweep of
    # every head restricted alone (about L x H / 2 forwards); masking always waits
    "long_range.needles": OnOpen(1024, "tokens (the longest prompt)", warm=True,
                                 at_start=False),
    "long_range.sinks": OnOpen(2048, warm=True),
    "long_range.table": OnOpen(2048, warm=True),
    "long_range.costs": OnOpen(512, warm=True, at_start=False),
    "long_range.masking": OnOpen(0),
}
# The pruning page's default choices: its widgets open on them and the warm start prepares
# its results with them.
PRUNING_DEFAULTS = {"mode": "zero", "by": "gradient", "step": 0.1, "metric": None}
# The Long range page's default choices (its widgets open on them; the warm start prepares
# them): needles of three lengths at five depths, 512 tokens of the bundled documentation
# read with StreamingLLM's four sink tokens and a window of 64
LONG_RANGE_DEFAULTS = {"lengths": [256, 512, 1024], "depths": 5, "seed": 0, "tokens": 512,
                       "sink": 4, "window": 64}


def long_range_window(context: int) -> int:
    """The Long range page's window by default: LONG_RANGE_DEFAULTS' (64), or an eighth of a
    shorter model's context (the bundled induction toys read 64 characters)."""
    return min(LONG_RANGE_DEFAULTS["window"], max(1, int(context) // 8))


def kept_whole(total_heads: int) -> int:
    """How many heads the Long range page keeps reading the whole context by default (the
    costliest tenth, at least one)."""
    return max(1, int(total_heads) // 10)


def runs_on_open(name: str, size: int) -> bool:
    """Whether the result ``name`` of RUNS_ON_OPEN computes by itself for an input of
    ``size`` (its tokens, heads or segments, as the table says)."""
    return int(size) <= RUNS_ON_OPEN[name].up_to


def pruning_runs_on_open(score_kind: str, n_tokens: int, metric=None,
                         by: str = PRUNING_DEFAULTS["by"]) -> dict[str, bool]:
    """What the pruning page computes on opening for a model whose score is ``score_kind``
    (the warm start prepares exactly this): {"ablation", "gradient", "curve"} -> bool. The
    gradient and a gradient-ranked curve only when one backward pass gives them."""
    one_backward = metric is not None or score_kind != "embedding_shift"
    return {"ablation": runs_on_open("pruning.ablation", n_tokens),
            "gradient": runs_on_open("pruning.gradient", n_tokens) and one_backward,
            "curve": runs_on_open("pruning.curve", n_tokens) and one_backward
            and by == "gradient"}


def configure_torch() -> None:
    """One intra-op thread per request by default: a web server runs many sessions at once,
    and OpenMP threads spinning against each other on a shared machine made a 30-token trace
    ~20x slower. MHA_VIZ_TORCH_THREADS overrides."""
    try:
        import torch

        torch.set_num_threads(max(1, int(os.environ.get("MHA_VIZ_TORCH_THREADS", "1"))))
    except (ImportError, ValueError):  # pragma: no cover
        pass


# --------------------------------------------------------------- text helpers


_MD_SPECIAL = "\\`*_[]|$<>~"


def md_escape(text: object) -> str:
    """Text shown inside st.markdown/st.error as itself: no emphasis, links, LaTeX or HTML.
    (For text inside a line; a line starting with "- " or "1." would still become a list.)"""
    return "".join("\\" + c if c in _MD_SPECIAL else c for c in str(text))


def clean_str(text: object) -> str:
    """Lone surrogates (broken copy-paste) cannot travel to the browser: make them U+FFFD."""
    return str(text).encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def as_sentence(message: str) -> str:
    message = str(message).strip()
    return message[:1].upper() + message[1:] if message else message


# One line for each technical word, shown by a help icon where a page first uses it
# (terms_in finds them in a text). Keys are matched as words, case-sensitively.
TERMS = {
    "nats": "nats: the unit of entropy with the natural logarithm (ln); ln 2 ≈ 0.693 nats is "
            "one bit. Uniform attention over n tokens has ln n nats.",
    "Jensen-Shannon": "Jensen-Shannon divergence: how different two probability "
                      "distributions are, the mean KL divergence of each from their average; "
                      "0 when equal, at most ln 2 nats. Its square root is a distance.",
    "MDS": "MDS (multidimensional scaling): places points in 2-D so that their distances on "
           "the map match a given distance matrix as closely as possible.",
    "RMSNorm": "RMSNorm: divides each token's vector by its root mean square and multiplies by "
               "a learned scale (LayerNorm without subtracting the mean).",
    "LayerNorm": "LayerNorm: subtracts each token's mean, divides by its standard deviation, "
                 "then applies a learned scale and shift.",
    "logit difference": "logit difference: the logit of the target token minus the logit of "
                        "the contrast token at one position; positive when the model prefers "
                        "the target. It is the log of the ratio of their probabilities.",
    "gate": "gate (ξ): a number multiplying a head's output before W_O; 1 keeps the head, 0 "
            "switches it off. Its gradient estimates how much the head matters.",
}


def terms_in(text: str) -> str | None:
    """The one-line explanations of the TERMS a text uses (for a help icon), or None."""
    found = [line for word, line in TERMS.items()
             if re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text or "")]
    return "\n\n".join(found) or None
