"""glibc allocator settings that let large, short-lived buffers go back to the OS.

Called once, first thing, in the server process and in every engine process; a no-op where
the C library is not glibc.

Why: glibc serves allocations of at least ``M_MMAP_THRESHOLD`` bytes (128 KiB at start) with
their own ``mmap``, returned to the OS on ``free``. But freeing such a block *raises* the threshold
to that block's size (up to 32 MiB), so the next blocks of that size come from the heap arenas,
and every executor thread has its own arena whose freed memory is kept for reuse by that thread
only. Decoding one 5800 x 5800 PNG allocates ~136 MB in 16 MiB blocks (Pillow's image arena):
after 16 such images decoded in turn on the executor's threads, the server kept 682 MB above its
idle RSS (peak 941 MB) although at most one full-size image was alive. Pinning the threshold
(which also switches off the dynamic adjustment) keeps every big block mmapped: the same request
peaked at one image above idle (+139 MB) and returned to within 5 MB of idle.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger(__name__)

# mallopt parameters (glibc malloc.h)
_M_MMAP_THRESHOLD = -3
# Blocks at least this big are mmapped and unmapped on free. 1 MiB: image planes, decoded files
# and pipe messages of any size are far above it; the many small objects of Python and of
# OpenVINO's bookkeeping stay in the arenas (an mmap per small block would cost syscalls).
MMAP_THRESHOLD_BYTES = 1 << 20


def pin_malloc_thresholds(mmap_threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Pin glibc's mmap threshold (see the module doc); False where that is not possible."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        # Only glibc has gnu_get_libc_version; musl's mallopt is a stub.
        libc.gnu_get_libc_version  # noqa: B018
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, mmap_threshold) != 1:
        log.warning("mallopt(M_MMAP_THRESHOLD, %d) failed; freed image memory may stay allocated", mmap_threshold)
        return False
    return True
