"""An opt-in profile of every page run, for finding what a visitor costs the server
(benchmarks/visitors.py --profile): MHA_VIZ_PROFILE=FOLDER writes one cProfile file per
script run there (cProfile follows the thread it is enabled in, and each run has its own);
unset, a run is not touched. Times are the run's thread's CPU (time.thread_time): with many
visitors at once a wall clock mostly counts the waits for the GIL, charged to whatever call
the thread was in when it was switched out."""

from __future__ import annotations

import cProfile
import itertools
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

_numbers = itertools.count()


@contextmanager
def profiled_run():
    """Profile the code run inside, when MHA_VIZ_PROFILE names a folder."""
    folder = os.environ.get("MHA_VIZ_PROFILE", "").strip()
    if not folder:
        yield
        return
    profile = cProfile.Profile(time.thread_time)
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        profile.dump_stats(out / f"run-{os.getpid()}-{threading.get_ident()}-"
                                 f"{next(_numbers)}.prof")
