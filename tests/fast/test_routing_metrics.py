"""The gauges an endpoint picker routes by (docs/routing.md), against scripted engines: queued and
running requests follow the requests, the KV cache's use is the engine's fraction (0-1), its
geometry is one ``ovserve_cache_config_info`` series, and a model without an engine process
(unloaded, not loaded yet) keeps its queue gauges but has no cache series. The same gauges from
a real engine: ``tests/e2e/test_operations.py``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families

from ovserve.engine.messages import AddRequest
from ovserve.models.served import ServedModel
from tests.fast.harness import FastModel, Served, eventually, fast_model
from tests.fast.scripted_engine import Script, ScriptedCache, Step, output

CACHE = ScriptedCache(block_size=32, num_blocks=100, blocks_per_request=10)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def held_after_first_token(release: threading.Event) -> Script:
    """A script: one token, then empty steps (the engine keeps stepping and reporting, unlike a
    script that blocks its thread) until the test sets ``release``."""

    def script(add: AddRequest) -> Iterator[Step]:
        yield [output(add, "word ")]
        while not release.is_set():
            yield []
        yield [output(add, "end", finish="stop")]

    return script


def engine_bytes(model: ServedModel) -> int | None:
    """The memory the residency manager reads of a running scripted engine (it has no process)."""
    return 100 << 20 if model.engine.running_pid is not None else None


def cached(fast: FastModel, cache: ScriptedCache = CACHE) -> FastModel:
    fast.launcher.cache = cache
    return fast


async def samples(served: Served, headers: dict[str, str] | None = None) -> Samples:
    async with served.client.get("/metrics", headers=headers) as response:
        assert response.status == 200
        text = await response.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def of(model: str) -> tuple[tuple[str, str], ...]:
    return (("model", model),)


def cache_series(found: Samples, model: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        labels: value
        for (name, labels), value in found.items()
        if name == "ovserve_cache_config_info" and ("model", model) in labels
    }


async def test_queue_running_and_kv_use_follow_the_requests_in_flight(serve, messages) -> None:
    release = threading.Event()
    fast = cached(fast_model(held_after_first_token(release)))
    served = await serve(fast)
    idle = await samples(served)
    assert idle[("ovserve_requests_waiting", of("fast-model"))] == 0
    assert idle[("ovserve_requests_running", of("fast-model"))] == 0
    assert idle[("ovserve_kv_cache_usage_ratio", of("fast-model"))] == 0.0
    streams = [asyncio.create_task(served.chat(messages=messages, stream=True)) for _ in range(2)]
    # Both generate (their first token came), each holding 10 of the cache's 100 blocks.
    await eventually(lambda: fast.model.admission.running == 2)
    busy = await samples(served)
    assert busy[("ovserve_requests_waiting", of("fast-model"))] == 0
    assert busy[("ovserve_requests_running", of("fast-model"))] == 2
    assert busy[("ovserve_kv_cache_usage_ratio", of("fast-model"))] == 0.2
    release.set()
    assert [status for status, _ in await asyncio.gather(*streams)] == [200, 200]
    after = await samples(served)
    assert after[("ovserve_requests_running", of("fast-model"))] == 0


async def test_cache_geometry_is_one_info_series_with_block_size_and_block_count(serve) -> None:
    served = await serve(cached(fast_model(name="a")), cached(fast_model(name="b"), ScriptedCache(16, 4096)))
    found = await samples(served)
    assert cache_series(found, "a") == {(("block_size", "32"), ("model", "a"), ("num_blocks", "100")): 1.0}
    assert cache_series(found, "b") == {(("block_size", "16"), ("model", "b"), ("num_blocks", "4096")): 1.0}


async def test_a_model_without_a_paged_cache_has_no_cache_geometry(serve) -> None:
    served = await serve(fast_model())  # its engine reports no block size or count
    found = await samples(served)
    assert cache_series(found, "fast-model") == {}
    assert found[("ovserve_kv_cache_usage_ratio", of("fast-model"))] == 0.0


async def test_an_unloaded_model_keeps_its_queue_gauges_and_drops_its_cache_series(serve) -> None:
    lazy = cached(fast_model(name="lazy"))
    served = await serve(lazy, lazy_load=True, measure=engine_bytes)
    before = await samples(served)  # not loaded yet: no engine, no cache
    assert before[("ovserve_requests_waiting", of("lazy"))] == 0
    assert before[("ovserve_requests_running", of("lazy"))] == 0
    assert ("ovserve_kv_cache_usage_ratio", of("lazy")) not in before
    assert cache_series(before, "lazy") == {}
    async with served.client.post("/v3/models/lazy/load") as response:
        assert response.status == 200
    loaded = await samples(served)
    assert loaded[("ovserve_kv_cache_usage_ratio", of("lazy"))] == 0.0
    assert len(cache_series(loaded, "lazy")) == 1
    async with served.client.post("/v3/models/lazy/unload") as response:
        assert response.status == 200
    unloaded = await samples(served)
    # The last process's report is not repeated: the model has no KV cache now.
    assert ("ovserve_kv_cache_usage_ratio", of("lazy")) not in unloaded
    assert ("ovserve_kv_cache_bytes", of("lazy")) not in unloaded
    assert cache_series(unloaded, "lazy") == {}
    assert unloaded[("ovserve_requests_waiting", of("lazy"))] == 0
    assert unloaded[("ovserve_model_loaded", of("lazy"))] == 0
