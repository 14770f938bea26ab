"""Errors as the visitor sees them: a readable message with what to do, never a traceback
and never the server's own folders."""

from __future__ import annotations

import logging
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import streamlit as st

from .. import checkpoints
from ..core.errors import (CheckpointNotFoundError, ClusterError, InputError, LoadError,
                           MhaVizError, NotAllowedError, OfflineError)
from .settings import APP_DIR, as_sentence, md_escape

log = logging.getLogger("mha_viz.ui")

_HINTS = [
    (OfflineError, "Pick **SmolLM2** or **MiniLM** (bundled, work offline), or a local "
                   "checkpoint folder."),
    (NotAllowedError, "Pick **SmolLM2** or **MiniLM** (bundled), or a hub id such as `gpt2`."),
    (CheckpointNotFoundError, "Pick **SmolLM2** or **MiniLM** (bundled), a hub id, a folder "
                              "saved with `save_pretrained()`, or a .gguf file."),
    (InputError, "Change the text in the sidebar."),
    (ClusterError, "Turn off *Run on the Ray cluster* to run it on this server, or tell the "
                   "server's owner."),
]


def show_error(error: BaseException) -> None:
    """A MhaVizError as a readable message, with what to do about it."""
    if isinstance(error, LoadError):
        kind = "The model could not be loaded."
    elif isinstance(error, InputError):
        kind = "This text cannot be traced."
    elif isinstance(error, ClusterError):
        kind = "The Ray cluster could not run this."
    else:
        kind = "This cannot be shown."
    hint = next((h for cls, h in _HINTS if isinstance(error, cls)), "")
    message = md_escape(as_sentence(without_server_paths(str(error))))
    st.error(f"**{kind}** {message}" + (f"\n\n{hint}" if hint else ""))


def _server_folders() -> list[str]:
    """Folders whose names a visitor has no business seeing, longest first: the app's, the
    Python installation's, the Hugging Face cache, the allowed folders, home, temp."""
    import tempfile

    folders = [APP_DIR, Path(sys.prefix), Path(sys.base_prefix), Path.home(),
               Path(tempfile.gettempdir())]
    try:
        folders += checkpoints.allowed_dirs(APP_DIR / "models")
    except Exception:  # noqa: BLE001 - a message is still shown without this
        pass
    names = {str(f) for f in folders} | {str(f.resolve()) for f in folders}
    return sorted((n for n in names if len(n) > 1), key=len, reverse=True)


def without_server_paths(message: str) -> str:
    """The message with the server's own folders replaced by "…": a corrupt file in the
    Hugging Face cache, say, is named by its place in the checkpoint, not on the disk."""
    for folder in _server_folders():
        message = message.replace(folder, "…")
    return message


GENERIC_ERROR = ("Something went wrong on this page (an internal error; the details are in the "
                 "server's log). Try another text or model, or reload the page.")


def callback(fn: Callable) -> Callable:
    """Wrap a widget callback (on_change, on_click, on_select): callbacks run before the page
    script, outside ``guard()``, so an error in one is logged and otherwise ignored."""
    import functools

    @functools.wraps(fn)
    def safe(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception:  # noqa: BLE001
            log.exception("error in callback %s", getattr(fn, "__name__", fn))
            if os.environ.get("MHA_VIZ_RAISE"):
                raise

    return safe


@contextmanager
def guard():
    """Wrap a page body: a MhaVizError shows its message; any other exception shows a generic
    message and logs the traceback server-side (MHA_VIZ_RAISE=1 re-raises, for debugging)."""
    try:
        yield
        if os.environ.get("MHA_VIZ_TIMING"):
            start = st.session_state.get("_mv_run_start", time.perf_counter())
            print(f"[mha_viz] page ran in {1e3 * (time.perf_counter() - start):.0f} ms",
                  file=sys.stderr, flush=True)
    except MhaVizError as error:
        show_error(error)
    except Exception:  # noqa: BLE001 - the page boundary: never show a traceback
        log.exception("error on page")
        if os.environ.get("MHA_VIZ_RAISE"):
            raise
        st.error(GENERIC_ERROR)
