"""Give freed memory back to the operating system.

A long input's forward allocates and frees blocks of tens of MB (a block of attention
scores, an MLP's hidden state) while it keeps others of the same size (each layer's input).
glibc's malloc raises its mmap threshold each time such a block is freed, after which blocks
of that size come from the heap, where a freed block between kept ones cannot be returned:
SmolLM2's 8,192-token trace then ends with 1.0 GB resident for 0.57 GB it holds, and peaks
at 2.4 GB. A fixed threshold of 1 MiB makes every large block its own mapping, returned
when freed: the same trace peaks at 1.8 GB (benchmarks/long_inputs.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MMAP_THRESHOLD_BYTES = 1 << 20
_done = False


def return_large_blocks() -> bool:
    """Serve every allocation of 1 MiB or more by its own mapping (glibc only; once per
    process; MHA_VIZ_KEEP_MALLOC=1 leaves malloc alone). True when the setting took."""
    global _done
    if _done or os.environ.get("MHA_VIZ_KEEP_MALLOC"):
        return _done
    _done = True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    except (OSError, AttributeError):  # not glibc (macOS, musl, Windows): nothing to do
        return False
