"""One compilation of a model at a time in an OpenVINO model cache (``CACHE_DIR``), across processes.

Why: OpenVINO's cache is not safe for concurrent writers of the same entry. A process that finds a
blob another process is still writing fails to import it, removes it as corrupt, and the writer
then fails with ``filesystem error: cannot set permissions: No such file or directory
[<cache>/<hash>.blob]``. Engines compiling the same model into one cache at once are ordinary
here: several served names over one model directory (config.json lets them), a speculative
pipeline's draft shared by two models, a restart racing an on-demand load, or two servers on
one host sharing ``--cache_dir``. Four processes compiling one tiny model into a fresh cache
lost a load in 2 of 8 rounds.

:func:`compile_cache_lock` takes an exclusive ``flock`` per model directory a pipeline compiles
(its model's, and its draft's), on ``<CACHE_DIR>/.ovserve-<digest of the directory>.lock``, while the
pipeline is built: engines of different models still load side by side, and one slow compile
holds back only the loads of its own model. The locks are taken in one order (sorted), so two
speculative pipelines sharing a draft cannot deadlock. A lock belongs to the process: the kernel
drops it when the process exits, so a crashed or killed engine never leaves it held. A cache
directory the lock files cannot be created in (read-only, a pre-filled cache) needs no lock:
nothing is written there.

``flock`` is only as good as the filesystem under it: on a network filesystem shared by several
hosts (a Kubernetes volume mounted by several pods) it may lock per host only. Two copies of one
model in different directories are not recognised as one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("ovserve.engine")


def lock_file_name(model_dir: Path) -> str:
    """The lock file, in the cache directory, of the model in ``model_dir`` (as resolved)."""
    digest = hashlib.sha256(str(model_dir.resolve()).encode("utf-8", "surrogateescape")).hexdigest()
    return f".ovserve-{digest[:16]}.lock"


@contextlib.contextmanager
def compile_cache_lock(plugin_config: Mapping[str, Any], model_dirs: Iterable[Path]) -> Iterator[None]:
    """Hold, for the block, the models in ``model_dirs`` in the cache directory of ``plugin_config``
    (its ``CACHE_DIR``); nothing to hold without one."""
    cache_dir = plugin_config.get("CACHE_DIR")
    if not cache_dir:
        yield
        return
    directory = Path(str(cache_dir))
    with contextlib.ExitStack() as held:
        try:
            directory.mkdir(parents=True, exist_ok=True)  # OpenVINO would make it; the lock comes first
            for name in sorted({lock_file_name(model_dir) for model_dir in model_dirs}):
                fd = os.open(directory / name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
                held.callback(os.close, fd)  # closing the only descriptor releases the lock
                fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            log.debug("model cache %s not locked (%s): it cannot be written either", cache_dir, exc)
        yield
