"""Process memory: a process's resident memory as /proc tells it, glibc allocator settings that
let large, short-lived buffers go back to the OS, and bounds on the JIT kernel caches of
OpenVINO's CPU plugin.

:func:`pin_malloc_thresholds` is called once, first thing, in the server process and in every
engine process; a no-op where the C library is not glibc. :func:`bound_kernel_caches` gives every
pipeline built on the CPU its cache bounds (see its doc).

Why pin: glibc serves allocations of at least ``M_MMAP_THRESHOLD`` bytes (128 KiB at start) with
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

import contextlib
import ctypes
import logging
import os
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from ovserve.json_types import JsonObject, JsonValue

log = logging.getLogger(__name__)

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def machine_memory_bytes() -> int | None:
    """The memory this process's machine offers: its physical RAM, or its cgroup's limit when that
    is lower (a container); None where neither can be read."""
    limits = []
    with contextlib.suppress(ValueError, OSError, AttributeError):
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))  # cgroup v1 writes a huge number for "no limit": min() drops it
    return min(limits) if limits else None


def resident_memory_bytes(pid: int) -> int | None:
    """A process's resident memory (``VmRSS``, read as pages from ``/proc/<pid>/statm``: half the
    cost of parsing ``status``, and it is read twice a second per engine); None when there is none
    to read: the process is gone or a zombie (no memory), or there is no ``/proc``."""
    try:
        fields = Path(f"/proc/{pid}/statm").read_bytes().split()
        pages = int(fields[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * _PAGE_SIZE if pages else None


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


# -- the CPU plugin's JIT kernel caches -----------------------------------------------------------
#
# Why bound them: a continuous-batching step runs the model on however many tokens the scheduler
# batched (1 to max_num_batched_tokens, a prompt's chunk plus one per running sequence), and the CPU
# plugin compiles kernels for each new input shape and keeps them in two LRU caches that hold JIT
# code: its runtime cache of per-node executors (CPU_RUNTIME_CACHE_CAPACITY, 5000 entries per
# executor kind by default) and oneDNN's process-wide primitive cache (1024 primitives). Under
# traffic with varied prompt and output lengths, rare shapes keep turning up, so the engine's heap
# grows for hours towards bounds of several hundred MB, never given back: the tiny demo model's
# engine went 169 -> 525 MiB over 40 minutes and was still growing. Measured on the raw pipeline
# (8 streams, prompts of 5-600 tokens, 1-200 output tokens; docs/operations.md has the server's
# figures): with OpenVINO's defaults the tiny model's process levels off near 488 MiB after ~2,000
# requests, and the 0.5B model's was still growing at 1,066 MiB after 160; with both caches off
# it stays at 158 MiB (heap flat) but runs about 2x slower. The bounds below keep it flat after the
# first ~100 requests (tiny 166 MiB, 0.5B 1,071 MiB) for 14% more time on the tiny model, whose
# steps are all overhead, and none measurable on the 0.5B model (side by side: 753 s vs 758 s for
# the same 160 requests). The runtime cache is the part that costs: at 100 entries it was no
# faster than off (tiny +16%); oneDNN's cache, which spares the JIT compile, is kept, small.

CPU_RUNTIME_CACHE_CAPACITY = "CPU_RUNTIME_CACHE_CAPACITY"
# 0: no executor cache; an executor is rebuilt when its node's input shape changes, from oneDNN's
# primitive cache when the kernel is there (no JIT compile then).
DEFAULT_CPU_RUNTIME_CACHE_CAPACITY = 0
# oneDNN reads the first of these that is set, once, when the process creates its first primitive.
PRIMITIVE_CACHE_ENV = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY")
DEFAULT_PRIMITIVE_CACHE_CAPACITY = 64


def bound_kernel_caches(
    device: str, plugin_config: Mapping[str, JsonValue], environ: MutableMapping[str, str] = os.environ
) -> JsonObject:
    """``plugin_config`` with the engine's bound on the CPU plugin's runtime cache under it (a
    ``CPU_RUNTIME_CACHE_CAPACITY`` the user set wins); on the CPU, also sets oneDNN's primitive
    cache capacity for this process unless its environment already does. Call it before the
    process's first pipeline is built; devices other than the CPU get ``plugin_config`` unchanged."""
    properties = dict(plugin_config)
    if device.upper() != "CPU":
        return properties
    properties.setdefault(CPU_RUNTIME_CACHE_CAPACITY, DEFAULT_CPU_RUNTIME_CACHE_CAPACITY)
    if not any(name in environ for name in PRIMITIVE_CACHE_ENV):
        environ[PRIMITIVE_CACHE_ENV[0]] = str(DEFAULT_PRIMITIVE_CACHE_CAPACITY)
    return properties
