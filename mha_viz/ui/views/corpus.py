"""The Corpus page's view: every head's statistics over many texts, mean and spread over
segments, as the papers measure them. The texts are chosen (the demo corpus, an upload or
pasted texts), cut into segments and run as one job; each statistic the person picked is then
drawn by the section its registry entry names (analysis.head_statistics: view), in the
registry's order, with no section written for one statistic by hand."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import streamlit as st

from ... import InputError
from ... import analysis as A
from ... import corpus, plots, ui
from ...analysis import head_statistics
from ...server import export
from ..words import statistics as words

MAPS = ("self", "encoder", "decoder", "cross")  # the sets of maps the page reads (maps.sets)
SOURCES = words.CORPUS_SOURCES
INTRO = words.CORPUS_INTRO


def read_texts() -> corpus.CorpusText | None:
    """The texts the person chose, or None (with a message) when there are none yet."""
    source = ui.synced(st.radio, "csrc", "Corpus", "demo", options=list(SOURCES),
                       format_func=SOURCES.get, horizontal=True)
    if source == "demo":
        texts = ui.memo(demo_texts)
        return corpus.CorpusText(texts, "the demo corpus (paragraphs of Python's documentation)")
    if source == "paste":
        pasted = st.text_area("Texts, separated by blank lines (or one per line)", height=160,
                              key="corpus_pasted")
        if not pasted.strip():
            st.info("Paste some texts above to measure them.")
            return None
        return corpus.read_corpus(pasted.encode("utf-8", "replace"), "the pasted texts")
    upload = st.file_uploader("A .txt (a text per line, or per paragraph), .csv, .jsonl or "
                              ".parquet file", type=["txt", "csv", "jsonl", "ndjson", "parquet"],
                              key="corpus_file",
                              help=f"At most {corpus.MAX_CORPUS_BYTES // 2**20} MB; larger "
                                   f"corpora stream from the command line (python -m mha_viz "
                                   f"corpus). Read as text or as a Parquet table, never "
                                   f"executed or unpickled.")
    if upload is None:
        st.info("Choose a file to measure it.")
        return None
    data = upload.getvalue()
    column = None
    columns = corpus.columns_of(data, upload.name)
    if columns:
        default = "text" if "text" in columns else columns[0]
        column = st.selectbox("Column (CSV, Parquet) or field (JSON lines) holding the texts",
                              columns, index=columns.index(default), key="corpus_column")
    return corpus.read_corpus(data, upload.name, column)


def demo_texts() -> list[str]:
    return corpus.demo_texts()


def segment_texts(model, texts, seg_len, max_segments):
    return corpus.segment(model, texts, seg_len, max_segments=max_segments)


def heatmap_pair(result, name: str, title: str, unit: str, key: str, stem: str) -> None:
    """Mean and spread over segments of one [L, H] statistic, side by side, and its CSV."""
    left, right = ui.figure_columns(2)
    with left:
        ui.show_figure(plots.layer_head_heatmap(result.mean(name), f"{title}: mean", unit),
                       key=f"{key}_mean", share=ui.column_share(0.5),
                       alt=f"{title}, mean over segments")
    with right:
        ui.show_figure(plots.layer_head_heatmap(result.std(name), f"{title}: spread (std)",
                                                unit),
                       key=f"{key}_std", share=ui.column_share(0.5),
                       alt=f"{title}, standard deviation over segments")
    ui.download_csv(partial(result.table_csv, name),
                    export.safe_filename(stem, "corpus", name, suffix=".csv"),
                    f"{title} as CSV", key=f"dl_{key}",
                    help="layer, head, mean, standard deviation, segments")


# ---------------------------------------------------------------- a section per kind of view
# Each takes (the run's result, the statistic's registry entry, the model, the file stem).


def scale_section(result, statistic, model, stem: str) -> None:
    """A statistic with a raw and a normalized array (entropy): a switch between them."""
    st.subheader(statistic.label)
    arrays = result.arrays_of(statistic.name)
    normalized = ui.synced(st.toggle, "cnorm", words.NORMALIZED_SWITCH, False)
    scale = "normalized" if normalized else "raw"
    heatmap_pair(result, arrays[scale], statistic.label, words.SCALE_UNITS[scale],
                 f"c_{statistic.name}", stem)


def choice_section(result, statistic, model, stem: str) -> None:
    """A statistic with one array per member (a token class, a role): a picker of them."""
    choice = words.CHOICES[statistic.name]
    st.subheader(choice.heading)
    arrays = result.arrays_of(statistic.name)
    members = list(arrays)
    picked = ui.synced(st.selectbox, choice.url_name, choice.label,
                       choice.default if choice.default in members else members[0],
                       options=members)
    heatmap_pair(result, arrays[picked], choice.title(picked), statistic.unit, choice.key,
                 stem)


def compared_rows(info: dict) -> str:
    """Which query rows a run compared the heads on, in words (runs saved before rows were
    drawn said nothing of it: theirs were evenly spaced)."""
    rows = info.get("similarity_rows")
    if not rows:
        return "every query row"
    if info.get("similarity_sampling") == "stratified":
        return f"{rows} query rows, one drawn at random from each of {rows} equal stretches"
    return f"{rows} evenly spaced query rows"


def similarity_section(result, statistic, model, stem: str) -> None:
    """Head-to-head distances averaged over segments: clustered and mapped in 2-D."""
    st.subheader("Head similarity over the corpus")
    distances = result.mean(result.arrays_of(statistic.name)["js_divergence"])
    n_head = model.info.n_head
    order = ui.memo(A.cluster_order, distances)
    coords = ui.memo(A.mds_2d, distances)
    st.caption(f"The Jensen-Shannon divergence of every pair of heads, averaged over "
               f"segments (each on {compared_rows(result.info)}), then clustered and mapped "
               f"in 2-D as Clark et al. did.")
    left, right = ui.figure_columns(2)
    with left:
        ui.show_figure(plots.distance_heatmap(distances, n_head, order=order),
                       share=ui.column_share(0.5),
                       key="c_dist", alt="Head-to-head distances over the corpus")
    with right:
        ui.show_figure(plots.head_scatter(coords, n_head), key="c_mds",
                       share=ui.column_share(0.5), alt="Heads in 2-D over the corpus")


def heatmap_section(result, statistic, model, stem: str) -> None:
    """Any other per-head statistic: each of its arrays' mean and spread per head."""
    heading = words.heading(statistic)
    st.subheader(f"{heading} over the corpus")
    note = words.CORPUS_NOTES.get(statistic.name)
    if note:
        st.caption(note.format(score=model.info.score_name))
    for array in result.arrays_of(statistic.name).values():
        heatmap_pair(result, array, heading, statistic.unit,
                     words.SECTION_KEYS.get(statistic.name, f"c_{array}"), stem)


def curve_section(result, statistic, model, stem: str) -> None:
    """A curve over a sample of the corpus (the pruning curve)."""
    curve = {member: result.curves[array]
             for member, array in result.arrays_of(statistic.name).items()}
    if not curve:
        return
    st.subheader(f"{words.heading(statistic)} over the corpus")
    st.caption(words.CORPUS_NOTES[statistic.name].format(
        segments=result.info.get(f"{statistic.name}_segments")))
    ui.show_figure(plots.pruning_curve_figure(curve["fraction"], curve["score"],
                                              score_name=model.info.score_name),
                   key="c_curve", alt="Pruning curve over the corpus")


VIEWS = {"scale": scale_section, "choice": choice_section, "similarity": similarity_section,
         "heatmap": heatmap_section, "curve": curve_section}


@dataclass(frozen=True)
class CorpusRun:
    """What every section reads: the model the texts ran through (an encoder-decoder's
    encoder), the statistics picked and the run's result."""
    selection: ui.Selection
    model: object
    stats: list[str]
    result: object  # corpus.CorpusResult

    @property
    def stem(self) -> str:
        return self.selection.file_stem


def corpus_run(selection: ui.Selection) -> CorpusRun | None:
    """The texts, the segments and the run over them, its choices drawn above the sections
    (None, said on the page, while there is nothing to show yet)."""
    if selection.model is None:
        ui.show_error(selection.model_error)
        return None
    # what the texts run through: the model, or an encoder-decoder's encoder
    try:
        model = corpus.corpus_model(selection.model)
    except InputError as error:  # an encoder that reads images
        st.info(f"Corpus mode is not for this model: {error}.")
        return None
    if model is not selection.model:  # one stack of the model: the texts are its inputs
        st.info(words.SOURCES_ONLY)
    statistic_choices = list(corpus.statistics_for(model))
    read = read_texts()
    if read is None:
        return None
    seg_len, max_segments, stats = settings(model, statistic_choices)
    segments = ui.memo(segment_texts, model, read.texts, int(seg_len), int(max_segments))
    st.caption(words.segments_read(read, segments, corpus.MIN_SEGMENT_TOKENS))
    result = run(model, segments, stats)
    if result is None:
        st.caption(words.RUN_KEEPS_GOING)
        return None
    return CorpusRun(selection, model, stats, result)


def totals_section(c: CorpusRun) -> None:
    """How much was measured, and every statistic as one file."""
    result = c.result
    cols = st.columns(3)
    cols[0].metric("Segments", f"{result.n_segments:,}")
    cols[1].metric("Tokens", f"{result.n_tokens:,}")
    cols[2].metric("Seconds", f"{result.info.get('seconds', 0):,.1f}")
    ui.download_bytes(result.to_bytes, export.safe_filename(c.stem, "corpus", suffix=".npz"),
                      "⬇ Every statistic (.npz)", key="dl_corpus_npz",
                      help="entropy_mean, entropy_std, ..., n_segments: numpy arrays, "
                           "read with numpy.load(..., allow_pickle=False) or "
                           "mha_viz.corpus.CorpusResult.load.")


def statistics_section(c: CorpusRun) -> None:
    """Each statistic picked, drawn by the section its registry entry names, in the
    registry's order."""
    for name, statistic in head_statistics.REGISTRY.items():
        if name in c.stats:
            VIEWS[statistic.view](c.result, statistic, c.model, c.stem)
    ui.caveat()


SECTIONS = [totals_section, statistics_section]


def show() -> None:
    selection = ui.sidebar(shows_saved_traces=False, reads=MAPS)
    with ui.guard():
        found = corpus_run(selection)
        if found is None:
            st.stop()
        ui.show_sections(found, SECTIONS)


def settings(model, statistic_choices: list[str]) -> tuple[int, int, list[str]]:
    """The segment length, the most segments and the statistics, kept in the URL."""
    context = model.info.max_positions
    left, middle, right = st.columns(3)
    with left:
        seg_len = ui.synced(st.number_input, "seglen", "Segment length (tokens)",
                            min(128, context), min_value=8, max_value=context, step=8,
                            valid=lambda v: 8 <= int(v) <= context,
                            help="Clark et al. used 128-token segments. Special tokens "
                                 "([CLS], [SEP]) count toward the length.")
    with middle:
        max_segments = ui.synced(st.number_input, "maxseg", "At most this many segments", 200,
                                 min_value=1, max_value=5000, step=50,
                                 valid=lambda v: 1 <= int(v) <= 5000,
                                 help="Segments are taken in the order of the texts.")
    with right:
        labels = {name: s.label for name, s in head_statistics.REGISTRY.items()}
        stats = ui.synced(st.multiselect, "cstats", "Statistics", list(corpus.STATS),
                          options=statistic_choices, format_func=labels.get,
                          valid=lambda v: len(v) > 0 and set(v) <= set(statistic_choices),
                          help="The first four come from the maps. Head importance runs "
                               "the model again: the ablation effect once per head and "
                               f"segment (Michel et al.); the pruning curve on the first "
                               f"{corpus.PRUNING_SEGMENTS} segments.")
    return seg_len, max_segments, stats


def run(model, segments, stats):
    """The run over the segments (a job behind its button; on the owner's Ray cluster when
    one is configured and asked for), or None while it waits."""
    cluster = ui.ray_cluster()
    address = workers = None
    if cluster is not None:  # set by the server's owner, never by a visitor
        on_cluster = ui.synced(st.toggle, "cluster", "Run on the Ray cluster", False,
                               help=f"This server's owner has set up a Ray cluster: "
                                    f"{cluster[1]} workers, each loading the model once, "
                                    f"share the segments.")
        if on_cluster:
            address, workers = cluster
    return ui.run_or_wait(
        corpus.run, model, segments, stats=list(stats), workers=workers or 1,
        address=address, name="corpus",
        label=f"Measuring {len(segments.ids):,} segments",
        auto=ui.runs_on_open("corpus.run", len(segments.ids)),
        button=f"Run over {len(segments.ids):,} segments",
        unit=("segments", segments.n_tokens / max(len(segments.ids), 1)))
