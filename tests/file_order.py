"""The order xdist hands out test files in: the slowest first, as the last run timed them.

``scripts/test.sh`` runs the suite with ``--dist loadfile``: a worker takes a whole file at a time
and the run ends when the file a worker took last does. xdist's own order (the files with the most
tests first) puts the files of two or three slow tests last, where the other worker idles for as
long as they take. Here the controller sums each file's test durations into pytest's cache at
the end of a run; the next run sorts the collected files by them, slowest first, and xdist keeps
that order (``--no-loadscope-reorder`` in pyproject). Files not timed yet (a new file, a fresh
clone) go first, the most tests first, as xdist would order them; a file keeps its own order.
A fresh clone (CI's) has no cache: it orders by ``tests/file_seconds.json``, the committed times of
a whole run, which the cache's newer times override. Refresh it after a full run with
``python -m tests.file_order`` (it copies the cache's times into it).
Every worker must collect the same order: the controller reads the cache once and hands its copy
to the workers, so a concurrent run that rewrites the cache cannot split them.

Only the order of files changes, never which tests run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

CACHE_KEY = "ovserve/file-seconds"
COMMITTED = Path(__file__).with_name("file_seconds.json")
_WORKER_KEY = "ovserve_file_seconds"
_timed: dict[str, float] = {}


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _last_run(config: pytest.Config) -> dict[str, float]:
    worker_input = getattr(config, "workerinput", None)
    if worker_input is not None:  # an xdist worker: the controller's copy
        return dict(worker_input.get(_WORKER_KEY, {}))
    cache = getattr(config, "cache", None)  # None with -p no:cacheprovider
    seconds = cache.get(CACHE_KEY, {}) if cache is not None else {}
    return {**_committed(), **(seconds if isinstance(seconds, dict) else {})}


def _committed() -> dict[str, float]:
    try:
        seconds = json.loads(COMMITTED.read_text())
    except (OSError, ValueError):
        return {}
    return seconds if isinstance(seconds, dict) else {}


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput[_WORKER_KEY] = _last_run(node.config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seconds = _last_run(config)
    counts: dict[str, int] = {}
    for item in items:
        counts[_file(item.nodeid)] = counts.get(_file(item.nodeid), 0) + 1

    def rank(item: pytest.Item) -> tuple[bool, float]:
        name = _file(item.nodeid)
        if name in seconds:
            return True, -float(seconds[name])
        return False, -counts[name]

    items.sort(key=rank)  # stable: a file's tests keep their order


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Setups and calls: the last test's teardown also ends the session's fixtures (a server's stop).
    if report.when != "teardown":
        _timed[_file(report.nodeid)] = _timed.get(_file(report.nodeid), 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workerinput") or getattr(config, "cache", None) is None or not _timed:
        return  # a worker's share is the controller's to record
    config.cache.set(CACHE_KEY, {**_last_run(config), **{name: round(value, 3) for name, value in _timed.items()}})


def refresh_committed(root: Path) -> int:
    """Write the cache's file times (a whole run's) into :data:`COMMITTED`; the number of files."""
    cached = root / ".pytest_cache" / "v" / CACHE_KEY
    seconds = json.loads(cached.read_text())
    COMMITTED.write_text(json.dumps(dict(sorted(seconds.items())), indent=1) + "\n")
    return len(seconds)


if __name__ == "__main__":
    print(f"{refresh_committed(Path.cwd())} files timed in {COMMITTED}")
