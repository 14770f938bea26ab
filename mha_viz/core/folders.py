"""Where mha-viz keeps files between runs: a folder an environment variable names, by default
one under the user's cache folder ($XDG_CACHE_HOME, else ~/.cache)."""

from __future__ import annotations

import os
from pathlib import Path

OFF = ("0", "off", "none")


def kept_folder(variable: str, name: str) -> Path | None:
    """The folder the environment variable names ("0", "off" or "none": None, nothing is
    kept), by default <the user's cache folder>/mha-viz/<name>."""
    chosen = os.environ.get(variable, "").strip()
    if chosen.lower() in OFF:
        return None
    if chosen:
        return Path(chosen).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache"
    return Path(cache) / "mha-viz" / name
