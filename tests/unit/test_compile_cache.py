"""compile_cache_lock: one build at a time per model directory in a cache, builds of other models
side by side; no CACHE_DIR needs no lock; a cache directory that cannot be written (or made) loads
without one instead of failing the engine."""

from __future__ import annotations

import threading
from pathlib import Path

from ovserve.engine.compile_cache import compile_cache_lock, lock_file_name

MODEL = Path("models/a")
OTHER = Path("models/b")


def test_without_a_cache_directory_nothing_is_created(tmp_path: Path) -> None:
    with compile_cache_lock({"PERFORMANCE_HINT": "LATENCY"}, [MODEL]):
        pass
    assert list(tmp_path.iterdir()) == []


def test_the_lock_is_taken_in_the_cache_directory_made_for_it(tmp_path: Path) -> None:
    cache = tmp_path / "not-yet" / "cache"
    with compile_cache_lock({"CACHE_DIR": str(cache)}, [MODEL]):
        assert (cache / lock_file_name(MODEL)).is_file()


def test_a_cache_directory_that_cannot_be_made_loads_without_a_lock(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    entered = False
    with compile_cache_lock({"CACHE_DIR": str(blocker / "cache")}, [MODEL]):
        entered = True
    assert entered


def test_a_model_waits_for_its_own_build_only(tmp_path: Path) -> None:
    # flock conflicts between two open() of one file even in one process: threads stand in for engines.
    config = {"CACHE_DIR": str(tmp_path)}
    entered: dict[str, threading.Event] = {"other": threading.Event(), "same": threading.Event()}

    def build(name: str, model: Path) -> None:
        with compile_cache_lock(config, [model]):
            entered[name].set()

    with compile_cache_lock(config, [MODEL, OTHER.parent / "draft"]):
        other = threading.Thread(target=build, args=("other", OTHER))
        same = threading.Thread(target=build, args=("same", MODEL))
        other.start()
        same.start()
        assert entered["other"].wait(10)  # another model's build goes ahead
        assert not entered["same"].wait(0.5)  # the same model's waits
    assert entered["same"].wait(10)  # until this build is done
    other.join()
    same.join()
