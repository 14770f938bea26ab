"""The bundled training runs' last checkpoints in the model picker (issue 51, item 14 and its
rule "every bundled model in the model picker"): the picker lists both induction toys under
names a person understands, the name loads the run's last step, and every page opens on each
with no exception and no error, and none tells a touch screen to hover (issue 51's rule: no
"hover" instructions)."""

from pathlib import Path

import pytest

pytest.importorskip("streamlit")

from tests.support.app_pages import run_page, texts  # noqa: E402

from mha_viz.checkpoints.series import BUNDLED_SERIES, checkpoint_series  # noqa: E402
from mha_viz.dictionaries import bundled_saes  # noqa: E402
from mha_viz.ui.settings import MODEL_CHOICES, MODEL_LABELS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["app.py", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "pages").glob("*.py"))]
NO_CHART = ("app.py", "pages/8_Corpus.py")
# Circuits opens on its indirect-object prompt, whose targets (' Mary', ' John') are several
# characters: the page says so (its own engineer's item 12 checks a prompt's targets)
CIRCUITS = "pages/9_Circuits.py"
# Features reads a bundled dictionary of the model: the MLP toy has none, and the page says so
FEATURES = "pages/12_Features.py"


def test_the_picker_lists_every_bundled_run_at_its_last_step():
    from mha_viz import load_model

    for name in BUNDLED_SERIES:
        assert name in MODEL_CHOICES
        label = MODEL_LABELS[name]
        assert "Induction toy" in label and "bundled" in label
        last = checkpoint_series(name).checkpoints[-1]
        model = load_model(name)
        assert f"step {last.step:,}" in model.info.source
        # the weights of the last step: its folder's own tensors
        from safetensors.numpy import load_file

        stored = load_file(str(last.folder() / "model.safetensors"))
        embedding = next(v for k, v in stored.items() if k.endswith("embed_in.weight"))
        assert (model.network.tok_emb.weight.detach().float().numpy()
                == embedding.astype("float32")).all()


def shown_words(at) -> str:
    """Every word a page writes or puts in a tooltip (figures' specs aside: their hover
    templates are Plotly's, and the browser tests read their titles)."""
    words = []

    def walk(node) -> None:
        if getattr(node, "type", None) == "plotly_chart":
            return
        children = getattr(node, "children", None)
        if children:
            for child in children.values():
                walk(child)
        elif getattr(node, "proto", None) is not None:
            words.append(str(node.proto))

    walk(at._tree)
    return " ".join(words)


@pytest.mark.parametrize("name", list(BUNDLED_SERIES))
def test_every_page_opens_on_the_induction_toys(name, monkeypatch):
    monkeypatch.setenv("MHA_VIZ_RAISE", "1")  # a bug raises instead of a generic message
    for page in PAGES:
        at = run_page(page, {"model": name})
        assert not at.exception, (page, texts(at.exception))
        errors = [e for e in texts(at.error)
                  if not (page == CIRCUITS and "a target must be a single token" in e)]
        assert not errors, (page, errors)
        assert at.get("plotly_chart") or page in NO_CHART + (CIRCUITS,) or (
            page == FEATURES and not bundled_saes(name)
            and "No dictionary of this model" in " ".join(texts(at.info))), page
        told = shown_words(at)
        assert "hover" not in told.lower(), (page, told[told.lower().find("hover") - 80:][:200])
        pickers = [box.value for box in at.selectbox if box.key == "_mv_w_model"]
        assert pickers == [name] or page == "pages/10_Training.py", (page, pickers)
