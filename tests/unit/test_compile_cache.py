"""compile_cache_lock: no CACHE_DIR needs no lock; a cache directory that cannot be written (or made)
loads without one instead of failing the engine; the lock file lives in the cache it guards."""

from __future__ import annotations

from pathlib import Path

from ovserve.engine.compile_cache import LOCK_FILE, compile_cache_lock


def test_without_a_cache_directory_nothing_is_created(tmp_path: Path) -> None:
    with compile_cache_lock({"PERFORMANCE_HINT": "LATENCY"}):
        pass
    assert list(tmp_path.iterdir()) == []


def test_the_lock_is_taken_in_the_cache_directory_made_for_it(tmp_path: Path) -> None:
    cache = tmp_path / "not-yet" / "cache"
    with compile_cache_lock({"CACHE_DIR": str(cache)}):
        assert (cache / LOCK_FILE).is_file()


def test_a_cache_directory_that_cannot_be_made_loads_without_a_lock(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    entered = False
    with compile_cache_lock({"CACHE_DIR": str(blocker / "cache")}):
        entered = True
    assert entered
