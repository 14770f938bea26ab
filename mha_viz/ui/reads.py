"""Which sets of a model's maps a page reads (maps.sets): each view declares them (MAPS, a
tuple of the sets' names, handed to ui.sidebar(reads=...)); the sidebar says where the set
chosen is not one of them, and which pages read a model's sets, from those declarations as
the page files name their views (read from the source, as Home reads the pages'
docstrings: nothing in ui imports a view)."""

from __future__ import annotations

import ast
import threading
from collections.abc import Callable
from pathlib import Path

from ..maps.sets import MapSet
from .settings import APP_DIR

EVERY_SET = ("self", "encoder", "decoder", "cross")  # a page that reads every set


_DECLARED_LOCK = threading.Lock()  # CPython 3.11's ast.parse is not safe in two threads
_declared: dict[str, tuple[str, ...]] = {}


def declared_sets(page_file: Path) -> tuple[str, ...]:
    """The sets the page's view declares it reads (its MAPS), or every set when it declares
    none: the view a page file imports (`from mha_viz.ui.views import <view>`), its MAPS.
    Read once per process, when a page first asks which pages read a model's maps."""
    with _DECLARED_LOCK:
        if str(page_file) not in _declared:
            _declared[str(page_file)] = _read_declared(page_file)
        return _declared[str(page_file)]


def _read_declared(page_file: Path) -> tuple[str, ...]:
    try:
        page = ast.parse(page_file.read_text(encoding="utf-8"))
        view = next(alias.name for node in page.body if isinstance(node, ast.ImportFrom)
                    and node.module == "mha_viz.ui.views" for alias in node.names)
        folder = Path(__file__).parent / "views"
        path = folder / view / "__init__.py" if (folder / view).is_dir() else (
            folder / f"{view}.py")
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "MAPS"
                                                    for t in node.targets):
                return tuple(ast.literal_eval(node.value))
    except (OSError, SyntaxError, UnicodeDecodeError, StopIteration, ValueError):
        pass
    return EVERY_SET


def refusal(model, chosen: MapSet, reads, page_files: Callable) -> str | None:
    """Why this page shows nothing of the set chosen (None: it reads it): the sets of the
    model it reads instead, or, reading none, the pages that do (page_files(): the app's
    pages, Home first, each with its path from the app's folder and its label)."""
    if chosen.name in reads:
        return None
    readable = [s for s in model.map_sets if s.name in reads]
    if readable:
        return set_not_read(chosen, readable)
    serving = [page.label for page in page_files()[1:]
               if any(s.name in declared_sets(APP_DIR / page.path) for s in model.map_sets)]
    return (f"This page does not read {model.info.model_type.upper()}'s maps ("
            + ", ".join(s.label for s in model.map_sets) + ")"
            + (f"; the {', '.join(serving)} pages do." if serving else "."))


def set_not_read(chosen: MapSet, readable: list[MapSet]) -> str:
    """The set chosen is not one the page reads: which it reads, and which to pick."""
    what = ("the self-attention of one stack" if all(s.square for s in readable)
            else ", ".join(s.label for s in readable))
    return (f"{chosen.label[:1].upper()}{chosen.label[1:]} maps are {chosen.queries} × "
            f"{chosen.keys}, and this page reads {what}: pick "
            + " or ".join(f"*{s.label}*" for s in readable) + " in the sidebar.")

