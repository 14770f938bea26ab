"""Results ready before anyone asks for them: when the server starts, the default model and
what the pages compute first for the example text (app.py's lifespan starts it in a thread,
so the server answers at once); and, for a teacher, the same for their own text ("prepare
this lesson" on Home). Everything goes into the stores the pages read, under the keys they
use, and the pruning page's work through the job runner, so a visitor who arrives while it
runs waits for the same computation instead of starting a second one. The pruning results
are also kept on disk (mha_viz.server.results_on_disk, settings.prepared_folder): the next start of
the server reads them instead of recomputing the sweep, so a lesson prepared the day before
is ready the moment the server answers."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from typing import Callable

from ..analysis import long_range, pruning
from ..server import jobs
from ..server.results_on_disk import ResultsOnDisk
from ..server.startup import PAGE_RUNS, settle_heap
from .jobs import job_runner
from .loading import get_model
from .stores import _small_store, result_key
from .traces import cached_seq2seq_trace, cached_trace, run_cached
from .settings import (DEFAULT_MAX_TOKENS, LONG_RANGE_DEFAULTS, PRUNING_DEFAULTS, RUNS_ON_OPEN,
                       default_model, default_text, kept_whole, long_range_window,
                       prepared_folder, pruning_runs_on_open, runs_on_open)

log = logging.getLogger("mha_viz.ui")


@functools.cache
def _results_on_disk() -> ResultsOnDisk | None:
    folder = prepared_folder()
    return None if folder is None else ResultsOnDisk(folder)


def _through_runner(model, text: str, fn: Callable, *args, **kwargs):
    """fn(*args, **kwargs) as the pages' job, its result in their store under the key the
    pages derive for the same call (stores.result_key): read from the disk when an earlier
    start of the server computed it, else computed and kept. -> the result (None when the
    job did not finish)."""
    key = result_key(fn, *args, **kwargs)
    store = _small_store()
    found, value = store.get(key)
    if found:
        return value
    on_disk = _results_on_disk()
    name = None if on_disk is None else on_disk.name(model, key, text)
    kept = None if on_disk is None else on_disk.load(name)
    if kept is not None:
        store.put(key, kept)
        return kept
    runner = job_runner()
    job = runner.submit(key, fn, *args, label="Preparing the page", **kwargs)
    job.wait()
    if job.state != jobs.DONE:
        return None
    store.put(key, job.result)
    runner.forget(key, job)
    if on_disk is not None:
        on_disk.save(name, job.result)
    return job.result


def prepare(model_name: str, text: str, pair: str | None = None,
            max_tokens: int | None = DEFAULT_MAX_TOKENS,
            progress: Callable[[int, int, str], None] | None = None,
            at_start: bool = False, after_maps: Callable[[], object] | None = None) -> None:
    """Load the model and compute what the pages compute first for this text: its trace and
    kept run, and what settings.RUNS_ON_OPEN marks warm (the pruning page's score, ablation
    sweep, gradient importance and pruning curve, with its default choices, PRUNING_DEFAULTS;
    for a causal language model the Long range page's needles, sinks, window losses and
    window costs, with LONG_RANGE_DEFAULTS). progress(done, total, what) after each step.
    at_start: the server's own start, which leaves out what takes minutes (OnOpen.at_start).
    after_maps: called once the maps are ready, before the rest (the server's start waits
    there for its first visitor's page).
    """
    model = get_model(model_name)
    steps: list[tuple[str, Callable[[], object]]] = []
    if model.info.encoder_decoder:
        steps.append(("the maps", lambda: cached_seq2seq_trace(model_name, text, None)))
    else:
        steps += [("the maps", lambda: cached_trace(model_name, text, pair, max_tokens)),
                  ("the predictions", lambda: run_cached(model_name, text, pair, max_tokens))]
        steps += _pruning_steps(model, text, _warm("pruning.", at_start))
        steps += _long_range_steps(model, text, _warm("long_range.", at_start))
    for done, (what, step) in enumerate(steps, 1):
        step()
        if progress is not None:
            progress(done, len(steps), what)
        if done == 1:
            if after_maps is not None:
                after_maps()
            # a cached GGUF's trace needs no transformers; a visitor's later question of its
            # tokenizer would wait for its import (a second): built now, before the rest
            model.build_tokenizer()


def _warm(page: str, at_start: bool) -> set[str]:
    """The results of a page ("pruning.") that RUNS_ON_OPEN marks warm, by their short name;
    at the server's start only those marked at_start."""
    return {name.split(".", 1)[1] for name, policy in RUNS_ON_OPEN.items()
            if name.startswith(page) and policy.warm and (policy.at_start or not at_start)}


def _pruning_steps(model, text: str, warm: set[str]) -> list[tuple[str, Callable[[], object]]]:
    """What the pruning page computes by itself on opening, and nothing more."""
    mode, by, step, metric = (PRUNING_DEFAULTS[k] for k in ("mode", "by", "step", "metric"))
    runs_itself = pruning_runs_on_open(model.info.score_kind, model.n_tokens(text),
                                       metric, by)
    steps = []
    if runs_itself["ablation"] and "ablation" in warm:
        steps += [
            ("the score", lambda: _through_runner(model, text, model.score, text,
                                                  metric=metric)),
            ("the ablation sweep", lambda: _through_runner(
                model, text, pruning.ablation_effects, model, text, mode=mode, metric=metric))]
    if runs_itself["gradient"] and "gradient" in warm:
        steps.append(("gradient importance", lambda: _through_runner(
            model, text, pruning.gradient_importance, model, text, metric=metric)))
    if runs_itself["curve"] and "curve" in warm:
        steps.append(("the pruning curve", lambda: _through_runner(
            model, text, pruning.pruning_curve, model, text, step=step, by=by, mode=mode,
            metric=metric)))
    return steps


def _long_range_steps(model, text: str,
                      warm: set[str]) -> list[tuple[str, Callable[[], object]]]:
    """What the Long range page computes by itself on opening with its default choices (the
    bundled documentation as its long text), and nothing more: none for a model it does not
    read."""
    info = model.info
    if not (info.causal and info.has_lm_head):
        return []
    chosen = LONG_RANGE_DEFAULTS
    lengths = tuple(n for n in chosen["lengths"]
                    if n in long_range.needle_length_options(model))
    tokens = chosen["tokens"]
    if tokens not in long_range.text_lengths(info.max_positions):
        return []  # a short context: the page opens on other choices
    window = dict(sink=chosen["sink"], window=long_range_window(info.max_positions))
    steps = []

    def ids():
        return tuple(long_range.haystack_ids(model, tokens))

    if lengths and "needles" in warm and runs_on_open("long_range.needles", max(lengths)):
        cases = tuple(long_range.needle_cases(model, lengths=lengths,
                                              depths=long_range.needle_depths(chosen["depths"]),
                                              seed=chosen["seed"]))
        steps.append(("the needles", lambda: _through_runner(
            model, text, long_range.needle_study, model, cases)))
    for name, fn, kwargs in (("sinks", long_range.sink_scores, {}),
                             ("table", long_range.window_losses, window),
                             ("costs", long_range.window_costs, window)):
        if name in warm and runs_on_open(f"long_range.{name}", tokens):
            steps.append((f"the long text's {name}", lambda fn=fn, kwargs=kwargs: _through_runner(
                model, text, fn, model, ids(), **kwargs)))
    if {"costs", "table"} <= warm and runs_on_open("long_range.costs", tokens):
        steps.append(("the loss with the costliest heads kept whole", lambda: _kept_loss(
            model, text, ids(), window)))
    return steps


def _kept_loss(model, text: str, ids: tuple, window: dict) -> None:
    """The Long range page's loss with all but its default number of costliest heads
    restricted (it reads the costs first)."""
    costs = _through_runner(model, text, long_range.window_costs, model, ids, **window)
    if costs is None:
        return
    info = model.info
    restricted = long_range.streaming_heads(costs.costs,
                                            kept_whole(info.n_layer * info.n_head))
    _through_runner(model, text, long_range.window_losses, model, ids, heads=restricted,
                    **window)


# The warm start's work past the default text's maps (the pruning sweep, the long text's
# studies: seconds of both cores) waits for the first visitor's page run to end, or this long
# when nobody comes: the first figure is not drawn behind it.
FIRST_PAGE_WAIT_SECONDS = 15.0
# ...and then this long more: the run has sent its figures, and the visitor's browser, on the
# same machine as often as not (a teacher's laptop), lays them out and draws them
BROWSER_DRAWS_SECONDS = 1.0
_page_run_over = threading.Event()
# past this long with page runs always in flight, pandas is left to the first page needing it
QUIET_MOMENT_SECONDS = 60.0
_start_over_once = threading.Lock()
_start_is_over = False


def _after_first_page() -> None:
    if _page_run_over.wait(FIRST_PAGE_WAIT_SECONDS):
        time.sleep(BROWSER_DRAWS_SECONDS)
    _start_over()


def _start_over() -> None:
    """What the server's start put off for its first figure (mha_viz.server.startup), once:
    the garbage collector settled and on again, pandas imported between page runs."""
    global _start_is_over
    with _start_over_once:
        if _start_is_over:
            return
        _start_is_over = True
    settle_heap()
    if not PAGE_RUNS.between_runs(_import_pandas, QUIET_MOMENT_SECONDS):
        log.info("no moment without a page run in %.0f s: pandas is left to the first page "
                 "that needs it", QUIET_MOMENT_SECONDS)


def _import_pandas() -> None:
    import pandas  # noqa: F401


def page_run_over() -> None:
    """A visitor's page run has drawn its page (app.py calls it after each run that ends by
    itself, not cut short by a rerun): the warm start goes on."""
    _page_run_over.set()


def prepare_default() -> None:
    """The default model and example text (what a first visitor sees), the maps first and the
    rest after the first visitor's page run; a failure is logged, never raised: the pages then
    compute as usual. MHA_VIZ_WARM_START=0 turns it off. app.py's lifespan runs it in a
    thread of its own, the server answering meanwhile."""
    try:
        if os.environ.get("MHA_VIZ_WARM_START", "1").strip() == "0":
            return
        started = time.perf_counter()
        name = default_model()
        model = get_model(name)
        prepare(name, default_text(model), at_start=True,
                after_maps=_after_first_page)
        log.info("prepared %s and the example text in %.1f s", name,
                 time.perf_counter() - started)
    except Exception:  # noqa: BLE001 - a warm-up must not take the server down
        log.exception("preparing the default model failed; pages will compute on demand")
    finally:
        _start_over()  # at the latest: with the warm start off, failed, or done
