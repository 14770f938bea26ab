"""The warm start: what the server prepares when it starts, and "prepare every page" for a
teacher's text, land under the keys the pages read, with the numbers the library gives."""

import functools
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("streamlit")

from mha_viz import load_model  # noqa: E402
from mha_viz.analysis import pruning  # noqa: E402
from mha_viz.ui import jobs, loading, stores, traces, warm  # noqa: E402
from mha_viz.ui.settings import DEFAULT_MAX_TOKENS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TEXT = "A warm start keeps the class from waiting for the model."


def stored_key(kind: str, name: str, text: str) -> str:
    """The key the pruning page derives for one of its results with its default choices."""
    model = loading.get_model(name)
    return {"score": stores.result_key(model.score, text, metric=None),
            "ablation": stores.result_key(pruning.ablation_effects, model, text, mode="zero"),
            "gradient": stores.result_key(pruning.gradient_importance, model, text),
            "curve": stores.result_key(pruning.pruning_curve, model, text, step=0.1,
                                        by="gradient", mode="zero")}[kind]


def prepared(name: str) -> list:
    steps = []
    warm.prepare(name, TEXT, progress=lambda done, total, what: steps.append((done, total)))
    assert steps == [(k, len(steps)) for k in range(1, len(steps) + 1)]
    return steps


def refusing(fn):
    """fn, refusing to run: it keeps fn's name and signature (functools.wraps), so a result
    stored under fn's key is still found and a recomputation raises."""
    @functools.wraps(fn)
    def not_again(*args, **kwargs):
        raise AssertionError(f"a prepared result was computed again: {fn.__name__}")
    return not_again


@pytest.fixture
def causal(gpt2_folder, monkeypatch) -> str:
    """A small causal model the app may open (a folder in its allowed folders): what the
    pages do first for a causal model is the same for SmolLM2, in a fraction of the time."""
    monkeypatch.setenv("MHA_VIZ_ALLOWED_DIRS", str(gpt2_folder.parent))
    return str(gpt2_folder)


@pytest.mark.slow
def test_prepare_fills_the_stores_the_pages_read(causal):
    """A causal model: what the pruning page runs by itself on opening, all of it."""
    assert len(prepared(causal)) == 6  # maps, run, score, sweep, gradient, curve
    store = stores._small_store()
    model = load_model(causal)
    found, effects = store.get(stored_key("ablation", causal, TEXT))
    assert found
    np.testing.assert_allclose(effects, pruning.ablation_effects(model, TEXT), atol=1e-5)
    found, gradient = store.get(stored_key("gradient", causal, TEXT))
    np.testing.assert_allclose(gradient, pruning.gradient_importance(model, TEXT), rtol=1e-4,
                               atol=1e-6)
    found, curve = store.get(stored_key("curve", causal, TEXT))
    np.testing.assert_allclose(curve.scores, pruning.pruning_curve(model, TEXT, step=0.1).scores,
                               atol=1e-4)
    assert store.get(stored_key("score", causal, TEXT))[1] == pytest.approx(
        model.score(TEXT), abs=1e-5)
    found, trace = stores.results_store().get(stores.result_key(
        loading.get_model(causal).trace, TEXT, max_tokens=DEFAULT_MAX_TOKENS, maps="budget"))
    assert found and trace.n_tokens == len(model.encode(TEXT).input_ids)


def test_prepare_does_only_what_the_page_does_by_itself():
    """MiniLM's score is the embedding shift: the page runs the score and the sweep, and waits
    for a button for the rest; so does the warm start."""
    assert len(prepared("minilm")) == 4  # maps, run, score, sweep
    store = stores._small_store()
    assert store.get(stored_key("ablation", "minilm", TEXT))[0]
    assert not store.get(stored_key("gradient", "minilm", TEXT))[0]


def test_the_pruning_page_uses_what_was_prepared(monkeypatch):
    from tests.support.app_pages import run_page, texts

    text = "Prepared before the lesson, read during it."
    warm.prepare("minilm", text)

    for name in ("ablation_effects",):  # what MiniLM's page runs by itself
        monkeypatch.setattr(pruning, name, refusing(getattr(pruning, name)))
    at = run_page("pages/4_Pruning_Impact.py", {"model": "minilm", "text": text}, {})
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    assert len(at.get("plotly_chart")) >= 1  # the sweep, drawn from the store


@pytest.mark.slow
def test_a_lesson_prepared_before_a_restart_is_read_from_disk(monkeypatch, tmp_path, causal):
    """The next start of the server (its memory empty) reads what the last one computed from
    the disk: the same numbers, and the sweep, gradient and curve are not computed again."""
    monkeypatch.setenv("MHA_VIZ_PREPARED_DIR", str(tmp_path))
    warm._results_on_disk.cache_clear()
    text = "Prepared yesterday, taught today."
    warm.prepare(causal, text)
    assert len(list(tmp_path.glob("*.npz"))) == 4  # score, sweep, gradient, curve
    keys = [stored_key(kind, causal, text)
            for kind in ("score", "ablation", "gradient", "curve")]
    first = [stores._small_store().get(key)[1] for key in keys]
    jobs.clear()  # a new server

    for name in ("ablation_effects", "gradient_importance", "pruning_curve"):
        monkeypatch.setattr(pruning, name, refusing(getattr(pruning, name)))
    warm.prepare(causal, text)
    again = [stores._small_store().get(key)[1] for key in keys]
    assert again[0] == first[0]
    np.testing.assert_array_equal(again[1], first[1])
    np.testing.assert_array_equal(again[2], first[2])
    np.testing.assert_array_equal(again[3].scores, first[3].scores)
    assert again[3].removed == first[3].removed and again[3].by == first[3].by
    np.testing.assert_array_equal(np.stack(again[3].masks), np.stack(first[3].masks))
    # another text is another question: computed (here: refused by the patch), not reused
    other = text + " Another one."
    warm.prepare(causal, other)
    assert not stores._small_store().get(stored_key("ablation", causal, other))[0]
    jobs.clear()
    warm._results_on_disk.cache_clear()


def test_the_command_line_prepares_for_the_next_server_start(monkeypatch, tmp_path, capsys):
    """`mha-viz prepare` (the Dockerfile runs it) keeps the results where the server reads
    them; with the disk turned off it says so and fails."""
    from mha_viz.__main__ import main

    monkeypatch.setenv("MHA_VIZ_PREPARED_DIR", str(tmp_path))
    warm._results_on_disk.cache_clear()
    assert main(["prepare", "--model", "minilm", "--text", "Ready before class."]) == 0
    assert len(list(tmp_path.glob("*.npz"))) == 2  # MiniLM's page: the score and the sweep
    assert "[4/4] the ablation sweep" in capsys.readouterr().out
    assert main(["prepare", "--model", "no-such-model-anywhere"]) == 2
    assert "error:" in capsys.readouterr().err
    monkeypatch.setenv("MHA_VIZ_PREPARED_DIR", "off")
    warm._results_on_disk.cache_clear()
    assert main(["prepare", "--model", "minilm"]) == 2
    assert "nothing would be kept" in capsys.readouterr().err
    warm._results_on_disk.cache_clear()


def test_home_prepares_a_teachers_text_with_progress():
    from tests.support.app_pages import run_page, texts

    text = "A teacher's own sentence about the cat."
    at = run_page("app.py", {"model": "minilm", "text": text}, {})
    at = [b for b in at.button if b.label == "Prepare every page for this text"][0].click().run()
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    assert at.get("progress")[-1].proto.text == "Every page is ready for this text."
    assert stores._small_store().get(stored_key("ablation", "minilm", text))[0]


def _served_app():
    """app.py imported as `streamlit run app.py` imports it (not __main__: no page is drawn)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mha_viz_served_app", ROOT / "app.py")
    served = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(served)
    return served


def test_the_server_finds_the_app_and_its_warm_start():
    from streamlit.web.server.app_discovery import discover_asgi_app

    found = discover_asgi_app(ROOT / "app.py")
    assert found.is_asgi_app and found.import_string.endswith(":app")
    assert type(_served_app().app).__name__ == "App"


def test_the_server_reads_no_installed_distribution_for_components(monkeypatch):
    """app.py, imported by the server, tells Streamlit there are no packaged components
    before its runtime looks for them: the runtime's scan (every installed distribution's
    metadata, 0.36 s of a start and threads beside the warm start) reads nothing."""
    import importlib.metadata

    from streamlit.components.v2 import manifest_scanner
    from streamlit.components.v2.component_manager import BidiComponentManager

    # Streamlit's own scan (tests/conftest.py runs it once for every AppTest), put back after
    scan = manifest_scanner.scan_component_manifests
    while hasattr(scan, "__wrapped__"):  # an earlier import of app.py replaced it too
        scan = scan.__wrapped__
    monkeypatch.setattr(manifest_scanner, "scan_component_manifests", scan)
    read = []
    monkeypatch.setattr(importlib.metadata, "distributions", lambda *a, **k: read.append(1)
                        or iter(()))
    manifest_scanner.scan_component_manifests()
    assert read, "the check itself would not see a scan"
    read.clear()
    _served_app()
    manager = BidiComponentManager()
    manager.discover_and_register_components(start_file_watching=False)
    assert read == [] and manifest_scanner.scan_component_manifests() == []


def test_the_warm_start_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_WARM_START", "0")
    monkeypatch.setattr(warm, "get_model", lambda name: pytest.fail("it loaded a model"))
    warm.prepare_default()


def test_a_failing_warm_start_is_logged_not_raised(monkeypatch, caplog):
    monkeypatch.setenv("MHA_VIZ_WARM_START", "1")
    monkeypatch.setattr(warm, "default_model", lambda: "no-such-model-anywhere")
    warm.prepare_default()
    assert "preparing the default model failed" in caplog.text


@pytest.fixture
def small_causal(gpt2_folder, monkeypatch) -> str:
    monkeypatch.setenv("MHA_VIZ_ALLOWED_DIRS", str(gpt2_folder.parent))
    return str(gpt2_folder)


@pytest.fixture
def server_start(small_causal, monkeypatch):
    """prepare_default on a small causal model and TEXT, with what follows the maps replaced
    by one step that records when it runs; -> (the thread to start, the steps done, in order)."""
    causal = small_causal
    monkeypatch.setenv("MHA_VIZ_WARM_START", "1")
    monkeypatch.setattr(warm, "default_model", lambda: causal)
    monkeypatch.setattr(warm, "default_text", lambda model: TEXT)
    monkeypatch.setattr(warm, "_page_run_over", threading.Event())
    done = []
    monkeypatch.setattr(warm, "_pruning_steps", lambda model, text, chosen: [
        ("the rest", lambda: None)])
    monkeypatch.setattr(warm, "_long_range_steps", lambda model, text, chosen: [])
    real = warm.prepare
    monkeypatch.setattr(warm, "prepare", lambda *args, **kwargs: real(
        *args, progress=lambda n, total, what: done.append(what), **kwargs))
    return threading.Thread(target=warm.prepare_default, daemon=True), done


def wait_for(condition, seconds=120.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_server_start_prepares_the_maps_then_waits_for_the_first_page(server_start,
                                                                           small_causal):
    """The first visitor's figure is not drawn behind the warm start's long work: past the
    maps it waits for a page run to end, holding nothing the page needs."""
    thread, done = server_start
    thread.start()
    wait_for(lambda: "the maps" in done)
    # the page reads the maps the warm start computed (a recomputation would raise), at once
    model = loading.get_model(small_causal)
    page_reads = threading.Thread(target=lambda: done.append(traces.cached_trace(
        small_causal, TEXT, None, DEFAULT_MAX_TOKENS)), daemon=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(model), "trace", refusing(type(model).trace))
        page_reads.start()
        page_reads.join(10)
    assert not page_reads.is_alive() and len(done) == 2 and done[0] == "the maps"
    time.sleep(0.3)
    assert "the predictions" not in done and "the rest" not in done
    warm.page_run_over()
    thread.join(60)
    assert done[2:] == ["the predictions", "the rest"]


def test_with_no_visitor_the_server_start_goes_on(server_start, monkeypatch):
    monkeypatch.setattr(warm, "FIRST_PAGE_WAIT_SECONDS", 0.2)
    thread, done = server_start
    thread.start()
    thread.join(60)
    assert done == ["the maps", "the predictions", "the rest"]


def test_the_servers_start_runs_every_page_under_the_navigation(monkeypatch):
    """app.py's lifespan: from the first visitor on, a link straight to a page runs through
    app.py's st.navigation (Streamlit would otherwise run that page's file alone first, then
    again through app.py: a whole page run more before the first figure)."""
    import asyncio

    from streamlit.runtime.pages_manager import PagesManager

    monkeypatch.setenv("MHA_VIZ_WARM_START", "0")
    monkeypatch.setattr(PagesManager, "uses_pages_directory", None)  # a fresh server
    served = _served_app()

    async def start_and_look():
        async with served.prepare_on_start(served.app):
            return PagesManager.uses_pages_directory

    assert asyncio.run(start_and_look()) is False


def test_the_servers_first_element_does_not_look_for_a_repl(monkeypatch):
    """app.py's lifespan: Streamlit's first element of a process checks whether it runs in a
    REPL with inspect.stack(), which reads the source of every frame (0.2-0.5 s of the first
    visitor's first page, with torch's modules loaded); a server is never one."""
    import asyncio
    import inspect

    from streamlit import delta_generator

    monkeypatch.setenv("MHA_VIZ_WARM_START", "0")
    monkeypatch.setattr(delta_generator, "_use_warning_has_been_displayed", False)
    stacks = []
    monkeypatch.setattr(inspect, "stack", lambda *a, **k: stacks.append(1) or [("", "<x>")])
    delta_generator._maybe_print_use_warning()  # Streamlit's own check, unchanged: it looks
    assert stacks == [1]
    monkeypatch.setattr(delta_generator, "_use_warning_has_been_displayed", False)
    served = _served_app()

    async def start_and_enqueue():
        async with served.prepare_on_start(served.app):
            delta_generator._maybe_print_use_warning()  # what DeltaGenerator._enqueue calls

    asyncio.run(start_and_enqueue())
    assert stacks == [1]
