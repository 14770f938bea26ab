"""Every code block of README.md runs (issue 57 item 12: `run.attribution` raised
AttributeError, `mask` and `ids_clean` were used before they were defined, and nothing
noticed). Each ```python block runs in README's order in one namespace, as a notebook
session would (and a line whose comment opens with a number, a tuple or a list gives it:
`lm.score(ioi, metric=metric)  # 6.12`), in a folder of its own holding the files a reader brings (notes.csv,
notes.jsonl: a few texts; book.txt: a long one); figures' .show() draws nothing. The
`mha-viz` and `python -m mha_viz` commands of the ```bash blocks run too, where this
machine can run them; the rest (pip, Streamlit, a Ray cluster, a folder that is not here)
are skipped, each with its reason. A block that loads SmolLM2 (or reads what one defined)
or reads every checkpoint of a training run is slow; MiniLM's and the corpus's are not."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
from tests.support.readme_blocks import ROOT, blocks, claims, commands, holds

PYTHON = blocks("python")
BASH = blocks("bash")
# commands of the bash blocks this machine does not run, and why
NOT_HERE = {"pip install": "installs packages", "streamlit run": "starts the app's server",
            "pytest": "runs the test suite itself", "--address auto": "joins a Ray cluster",
            "--workers 4": "starts a local Ray cluster of four workers",
            "runs/pythia-70m/": "reads a folder of Pythia checkpoints that is not here"}
TEXTS = ["The animal didn't cross the street because it was too tired.",
         "Attention heads read from earlier tokens; some copy what followed a match.",
         "A corpus averages what one sentence only hints at."]


@pytest.fixture(scope="module")
def reader_folder(tmp_path_factory):
    """A folder with the files README's blocks open, as the working directory."""
    folder = tmp_path_factory.mktemp("readme")
    (folder / "notes.csv").write_text("text\n" + "\n".join(f'"{t}"' for t in TEXTS) + "\n")
    (folder / "notes.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    # a long text, whose maps the long-input block computes on demand
    (folder / "book.txt").write_text(" ".join(TEXTS) * 120)
    return folder


@pytest.fixture(scope="module")
def session(reader_folder):
    """One namespace for every python block, run in reader_folder, figures not shown; its
    "ran" entry: the blocks run so far."""
    import plotly.basedatatypes

    before, show = os.getcwd(), plotly.basedatatypes.BaseFigure.show
    os.chdir(reader_folder)
    plotly.basedatatypes.BaseFigure.show = lambda self, *args, **kwargs: None
    try:
        yield {"__name__": "readme", "ran": set()}
    finally:
        plotly.basedatatypes.BaseFigure.show = show
        os.chdir(before)


def run_block(block, session) -> None:
    exec(compile(block.code, f"README.md:{block.line}", "exec"), session)
    session["ran"].add(block.line)


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id, marks=[pytest.mark.slow]
                                                if b.slow else [])
                                   for b in PYTHON])
def test_python_block_runs(block, session):
    import torch

    torch.set_num_threads(1)  # OpenMP threads spinning on a shared machine cost 20x
    # what a reader ran before it (when a lane left those tests out): a fast block reads
    # only fast blocks' names
    for earlier in PYTHON[:PYTHON.index(block)]:
        if earlier.line not in session["ran"] and (block.slow or not earlier.slow):
            run_block(earlier, session)
    run_block(block, session)
    # what its comments say a line gives, it gives
    for claim in claims(block):
        value = eval(claim.expression, session)
        assert holds(claim, value), (f"README.md:{claim.line}: {claim.expression} gives "
                                     f"{value!r}, the comment says {claim.written}")


def _why_not(command: str) -> str | None:
    return next((why for words, why in NOT_HERE.items() if words in command), None)


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id, marks=[pytest.mark.slow]
                                                if b.slow else [])
                                   for b in BASH])
def test_bash_blocks_commands_run(block, reader_folder):
    ran = 0
    for command in commands(block):
        if _why_not(command) or not command.startswith(("mha-viz ", "python -m mha_viz ")):
            continue
        args = command.split(" ", 1)[1] if command.startswith("mha-viz ") else \
            command[len("python -m mha_viz "):]
        # the console script is `python -m mha_viz`; the shell splits its words (one thread:
        # OpenMP threads spinning on a shared machine cost 20x)
        done = subprocess.run([sys.executable, "-m", "mha_viz", *shlex.split(args)],
                              cwd=reader_folder, capture_output=True, text=True, timeout=900,
                              env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
                                       TOKENIZERS_PARALLELISM="false"))
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        ran += 1
    if not ran:
        reasons = {_why_not(c) or "not an mha-viz command" for c in commands(block)}
        pytest.skip("; ".join(sorted(reasons)))
