"""Memory read bandwidth, and the single-stream decode ceiling it sets for a model.

Decoding one stream reads every weight once per token, so on a CPU whose caches hold a small part
of the model, ``read bandwidth / weight bytes`` bounds one stream's tokens/s. Measured here with
numpy: each thread sums its slice of a buffer several times larger than the last-level cache
(numpy releases the GIL inside the reduction, so the threads read in parallel); the best of a few
repeats is reported, as a bandwidth test should (noise only ever slows a pass down).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WEIGHT_FILES = ("openvino_model.bin", "openvino_language_model.bin")


def last_level_cache_bytes() -> int | None:
    best = None
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        units = {"K": 1024, "M": 1024**2, "G": 1024**3}
        size = int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
        best = size if best is None else max(best, size)
    return best


def engine_threads() -> int:
    """The CPUs this process may run on: what OpenVINO's CPU plugin uses by default."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def read_bandwidth(threads: int | None = None, buffer_bytes: int | None = None, repeats: int = 5) -> dict[str, float]:
    """Read GB/s over a buffer of ``buffer_bytes`` (default: 8x the last-level cache, at least 512 MiB)."""
    import numpy as np

    threads = threads or engine_threads()
    llc = last_level_cache_bytes() or 32 * 1024**2
    size = buffer_bytes or max(8 * llc, 512 * 1024**2)
    buffer = np.ones(size // 8, dtype=np.int64)  # written once: every page is really mapped
    slices = np.array_split(buffer, threads)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(np.sum, slices))  # first touch, thread start-up
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            list(pool.map(np.sum, slices))
            best = min(best, time.perf_counter() - start)
    return {"read_gb_s": buffer.nbytes / best / 1e9, "threads": threads, "buffer_mib": buffer.nbytes / 1024**2,
            "llc_mib": llc / 1024**2}  # fmt: skip


def weight_bytes(model_dir: Path) -> int:
    """Bytes of the model's weights (its IR's .bin), what one decode step reads."""
    for name in WEIGHT_FILES:
        path = model_dir / name
        if path.exists():
            return path.stat().st_size
    raise FileNotFoundError(f"no {' or '.join(WEIGHT_FILES)} in {model_dir}")


def probe(model_dir: Path, threads: int | None = None) -> dict[str, float]:
    """Bandwidth, the model's weight bytes and the one-stream decode ceiling in tokens/s."""
    measured = read_bandwidth(threads)
    weights = weight_bytes(model_dir)
    return {**measured, "weights_mb": weights / 1e6, "ceiling_tok_s": measured["read_gb_s"] * 1e9 / weights}
