"""Models on demand against scripted engines: loads that requests share and wait for, failed loads
with backoff, idle unloads, the memory budget's LRU eviction and refusals, pinning, and unloads
that wait for the requests in flight (``ovserve.models.manager``). The end-to-end acceptance with
real engine processes is ``tests/e2e/test_models_on_demand.py``."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, get_args

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ovserve.api import keys
from ovserve.clock import ManualClock
from ovserve.dialects.openai.models import ModelParsersInfo
from ovserve.engine.client import EngineState
from ovserve.engine.messages import LoadStage
from ovserve.engine.spec import SchedulerSettings
from tests.fast.harness import FastModel, Served, eventually, fast_model, parse_sse
from tests.fast.scripted_engine import held_reply

MIB = 1 << 20
# What every scripted engine "holds" once running (the manager's memory reader is replaced).
ENGINE_BYTES = 100 * MIB


def on(fast: FastModel, **options: Any) -> FastModel:
    """``fast`` with per-model options, as config.json would give them (pinned, lazy_load, ...)."""
    fast.model.settings = fast.model.settings.model_copy(update=options)
    return fast


Start = Callable[..., Awaitable[Served]]


@pytest.fixture
def serve_on_demand(serve: Start) -> Start:
    """``serve``, where every running engine holds :data:`ENGINE_BYTES`."""
    return functools.partial(
        serve, measure=lambda model: ENGINE_BYTES if model.engine.running_pid is not None else None
    )


def chat(name: str, **extra: Any) -> dict[str, Any]:
    return {"model": name, "messages": [{"role": "user", "content": "Hi"}], **extra}


async def metrics(served: Served) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics as (name, sorted labels) -> value."""
    async with served.client.get("/metrics") as response:
        text = await response.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def model_object(served: Served, name: str) -> dict[str, Any]:
    async with served.client.get(f"/v3/models/{name}") as response:
        assert response.status == 200
        body: dict[str, Any] = await response.json()
        return body


async def state_of(served: Served, name: str) -> str:
    return str((await model_object(served, name))["ovserve"]["state"])


async def test_a_lazy_model_starts_unloaded_and_its_first_request_loads_it(serve_on_demand: Start) -> None:
    lazy = fast_model(name="lazy")
    served = await serve_on_demand(lazy, lazy_load=True)
    assert lazy.launcher.launched == []
    async with served.client.get("/v2/health/ready") as response:
        assert response.status == 200  # available on demand: it keeps the server ready
    async with served.client.get("/v2/models/lazy/ready") as response:
        assert response.status == 503  # not loaded now
    listed = await model_object(served, "lazy")
    assert listed["ovserve"] == {
        "state": "unloaded",
        "pinned": False,
        "lazy_load": True,
        "idle_unload_timeout": None,
        "memory_bytes": None,
        "memory_estimate_bytes": listed["ovserve"]["memory_estimate_bytes"],
        "last_used": None,
        "load_stage": None,  # no start under way
        "load_stage_seconds": None,
        "tool_parser": "hermes3",
        "reasoning_parser": None,
    }
    status, body = await served.post("/v3/chat/completions", chat("lazy"))
    assert status == 200, body
    assert len(lazy.launcher.launched) == 1
    listed = await model_object(served, "lazy")
    assert listed["ovserve"]["state"] == "loaded"
    assert listed["ovserve"]["memory_bytes"] == ENGINE_BYTES
    assert isinstance(listed["ovserve"]["last_used"], int)
    assert lazy.model.engine.restarts == 0


async def test_requests_arriving_while_a_model_loads_all_wait_for_the_same_load(serve_on_demand: Start) -> None:
    lazy = fast_model(name="lazy")
    lazy.launcher.gate.clear()  # the engine takes its time to load
    served = await serve_on_demand(lazy, lazy_load=True)
    requests = [asyncio.create_task(served.post("/v3/chat/completions", chat("lazy"))) for _ in range(8)]
    await eventually(lambda: lazy.launcher.launched)
    assert await state_of(served, "lazy") == "loading"
    await asyncio.sleep(0.2)
    assert not any(request.done() for request in requests)  # they wait; none is refused
    lazy.launcher.gate.set()
    results = await asyncio.gather(*requests)
    assert [status for status, _ in results] == [200] * 8
    assert len(lazy.launcher.launched) == 1


async def test_a_loading_model_shows_its_engine_load_stage_and_a_loaded_one_none(serve_on_demand: Start) -> None:
    lazy = fast_model(name="lazy")
    lazy.launcher.gate.clear()  # the engine stays in its compiling stage
    served = await serve_on_demand(lazy, lazy_load=True)
    request = asyncio.create_task(served.post("/v3/chat/completions", chat("lazy")))

    def stage() -> LoadStage | None:
        progress = lazy.model.engine.load_progress()
        return progress[0] if progress else None

    await eventually(lambda: stage() is LoadStage.COMPILING)  # the engine's own report
    loading = (await model_object(served, "lazy"))["ovserve"]
    assert (loading["state"], loading["load_stage"]) == ("loading", "compiling")
    assert loading["load_stage_seconds"] >= 0
    lazy.launcher.gate.set()
    assert (await request)[0] == 200
    loaded = (await model_object(served, "lazy"))["ovserve"]
    assert (loaded["state"], loaded["load_stage"], loaded["load_stage_seconds"]) == ("loaded", None, None)
    # The documented values are the engine's stages.
    annotation = ModelParsersInfo.model_fields["load_stage"].annotation
    literal = next(arg for arg in get_args(annotation) if arg is not type(None))
    assert set(get_args(literal)) == {stage.value for stage in LoadStage}


@pytest.mark.parametrize("unload_by", ["api", "config"])
async def test_an_unload_during_a_load_serves_the_requests_waiting_for_it_first(
    serve_on_demand: Start, unload_by: str
) -> None:
    lazy = fast_model(name="lazy")
    lazy.launcher.gate.clear()  # the engine takes its time to load
    served = await serve_on_demand(lazy, lazy_load=True)
    residency = lazy.model.residency
    requests = [asyncio.create_task(served.post("/v3/chat/completions", chat("lazy"))) for _ in range(8)]
    await eventually(lambda: residency.load_waiters == 8)
    if unload_by == "api":
        unload: asyncio.Future[Any] = asyncio.ensure_future(served.client.post("/v3/models/lazy/unload"))
    else:  # a config reload that removes the model
        manager = served.client.app[keys.RESIDENCY]
        manager.models.remove("lazy")
        unload = manager.retire(lazy.model)
    await eventually(lambda: residency.unload_task is not None)
    lazy.launcher.gate.set()
    results = await asyncio.gather(*requests)
    assert [status for status, _ in results] == [200] * 8, results
    if unload_by == "api":
        async with await unload as response:
            assert response.status == 200
            assert (await response.json())["ovserve"]["state"] == "unloaded"
    else:
        await unload
    assert not lazy.launcher.engine.is_alive()  # then the unload took effect
    assert len(lazy.launcher.launched) == 1


async def test_a_failed_load_is_a_503_with_its_reason_and_is_retried_by_a_later_request(
    serve_on_demand: Start, clock: ManualClock
) -> None:
    lazy = fast_model(name="lazy", clock=clock)  # its backoff runs on the test's clock
    lazy.launcher.fatal = "could not load: out of coffee"
    served = await serve_on_demand(lazy, lazy_load=True)
    async with served.client.post("/v3/chat/completions", json=chat("lazy")) as response:
        assert response.status == 503
        error = (await response.json())["error"]
        assert error["code"] == "model_load_failed"
        assert "out of coffee" in error["message"]
        assert int(response.headers["Retry-After"]) >= 1
    assert await state_of(served, "lazy") == "failed"
    # Within the backoff: refused at once, no new attempt.
    status, body = await served.post("/v3/chat/completions", chat("lazy"))
    assert status == 503 and body["error"]["code"] == "model_load_failed"
    assert len(lazy.launcher.launched) == 1
    # After it, the next request tries again.
    lazy.launcher.fatal = None
    await clock.advance(lazy.model.engine.backoff_remaining())
    assert lazy.model.engine.backoff_remaining() == 0
    status, _ = await served.post("/v3/chat/completions", chat("lazy"))
    assert status == 200
    assert len(lazy.launcher.launched) == 2


async def test_an_idle_model_unloads_and_the_next_request_loads_it_again(
    serve_on_demand: Start, clock: ManualClock
) -> None:
    model = fast_model(name="m")
    served = await serve_on_demand(model, clock=clock, idle_unload_timeout=30)
    (first,) = model.launcher.launched  # loaded at start: no lazy_load
    await clock.advance(29)
    assert first.is_alive()  # not idle long enough
    await clock.advance(1.5)  # past the idle timeout, and the sampler's next tick
    unload = model.model.residency.unload_task
    assert unload is not None  # started by the sampler's tick
    # The unload to its end: its engine stops first, and the model is "unloading" until then.
    await eventually(unload.done, timeout=5)
    assert not first.is_alive()
    assert model.model.engine.state is EngineState.UNLOADED
    assert await state_of(served, "m") == "unloaded"
    async with served.client.get("/v2/health/ready") as response:
        assert response.status == 200
    status, _ = await served.post("/v3/chat/completions", chat("m"))
    assert status == 200
    assert len(model.launcher.launched) == 2
    assert model.model.engine.restarts == 0  # an unload and a load are no restart
    samples = await metrics(served)
    assert samples[("ovserve_model_unloads_total", (("model", "m"), ("reason", "idle")))] == 1
    assert samples[("ovserve_model_loads_total", (("model", "m"),))] == 2
    assert samples[("ovserve_engine_restarts_total", (("model", "m"),))] == 0


async def test_the_budget_evicts_the_least_recently_used_unpinned_model(serve_on_demand: Start) -> None:
    pinned = on(fast_model(name="pinned"), pinned=True)
    b, c = fast_model(name="b"), fast_model(name="c")
    # Running engines take 100 MiB; one never measured is estimated (and counted) at 160 MiB, one
    # measured is placed with its 100 MiB: two fit in 400 MiB, three do not.
    served = await serve_on_demand(pinned, b, c, lazy_load=True, models_memory_budget=400 * MIB)
    assert (len(pinned.launcher.launched), len(b.launcher.launched), len(c.launcher.launched)) == (1, 0, 0)
    assert (await served.post("/v3/chat/completions", chat("b")))[0] == 200
    assert (await served.post("/v3/chat/completions", chat("c")))[0] == 200
    assert not b.launcher.engine.is_alive()  # b was the least recently used unpinned model
    assert [await state_of(served, name) for name in ("pinned", "b", "c")] == ["loaded", "unloaded", "loaded"]
    assert (await served.post("/v3/chat/completions", chat("b")))[0] == 200
    assert not c.launcher.engine.is_alive()
    assert pinned.launcher.engine.is_alive()
    samples = await metrics(served)
    assert samples[("ovserve_model_evictions_total", (("model", "b"),))] == 1
    assert samples[("ovserve_model_evictions_total", (("model", "c"),))] == 1
    assert samples[("ovserve_models_memory_budget_bytes", ())] == 400 * MIB
    assert samples[("ovserve_models_memory_in_use_bytes", ())] == (160 + 100) * MIB
    assert samples[("ovserve_model_state", (("model", "b"), ("state", "loaded")))] == 1
    assert samples[("ovserve_model_loaded", (("model", "c"),))] == 0


async def test_a_model_larger_than_the_budget_is_refused_and_the_others_keep_serving(serve_on_demand: Start) -> None:
    small = fast_model(name="small")
    big = on(fast_model(name="big"), scheduler=SchedulerSettings(cache_size=1))  # a 1 GB KV cache
    served = await serve_on_demand(small, big, lazy_load=True, models_memory_budget=300 * MIB)
    async with served.client.post("/v3/chat/completions", json=chat("big")) as response:
        assert response.status == 503
        assert "Retry-After" not in response.headers  # retrying cannot help
        error = (await response.json())["error"]
    assert error["code"] == "model_too_large_for_budget"
    assert "budget" in error["message"]
    assert big.launcher.launched == []
    assert (await served.post("/v3/chat/completions", chat("small")))[0] == 200


async def test_with_nothing_to_evict_a_request_waits_then_gets_model_capacity_exceeded(serve_on_demand: Start) -> None:
    pinned = on(fast_model(name="pinned"), pinned=True)
    busy, waiting = fast_model(name="busy"), fast_model(name="waiting")
    served = await serve_on_demand(
        pinned, busy, waiting, lazy_load=True, models_memory_budget=400 * MIB, request_timeout=1.0
    )
    lease = await busy.model.lease(None)  # as a request in flight would
    started = time.monotonic()
    async with served.client.post("/v3/chat/completions", json=chat("waiting")) as response:
        assert response.status == 503
        assert response.headers["Retry-After"] == "5"
        error = (await response.json())["error"]
    assert error["code"] == "model_capacity_exceeded"
    assert time.monotonic() - started >= 0.9  # it waited for room until its deadline
    assert waiting.launcher.launched == []
    # Once the busy model is idle, it is the one evicted.
    lease.release()
    assert (await served.post("/v3/chat/completions", chat("waiting")))[0] == 200
    assert not busy.launcher.engine.is_alive()


async def test_an_unload_waits_for_the_stream_in_flight_and_a_request_meanwhile_reloads(
    serve_on_demand: Start,
) -> None:
    release = threading.Event()
    model = fast_model(held_reply(40, release), name="m")
    served = await serve_on_demand(model)
    stream = asyncio.create_task(served.post("/v3/chat/completions", chat("m", stream=True)))
    await eventually(lambda: model.model.engine.inflight == 1)
    first = model.launcher.engine
    unload = asyncio.create_task(served.client.post("/v3/models/m/unload"))
    await eventually(lambda: model.model.residency.unload_task is not None)
    assert await state_of(served, "m") == "unloading"
    later = asyncio.create_task(served.post("/v3/chat/completions", chat("m")))
    release.set()
    status, events = await stream
    assert status == 200
    assert events[-1] == "[DONE]" and not any("error" in event for event in events[:-1])
    assert sum((event["choices"][0]["delta"].get("content") or "").count("word") for event in events[:-1]) == 40
    async with await unload as response:
        assert response.status == 200
        assert (await response.json())["ovserve"]["state"] == "unloaded"
    assert not first.is_alive()
    assert (await later)[0] == 200  # it waited for the unload, then loaded the model again
    assert len(model.launcher.launched) == 2


async def test_a_pinned_model_cannot_be_unloaded_and_load_loads_a_lazy_one(serve_on_demand: Start) -> None:
    pinned = on(fast_model(name="pinned"), pinned=True)
    lazy = fast_model(name="lazy")
    served = await serve_on_demand(pinned, lazy, lazy_load=True)
    async with served.client.post("/v3/models/pinned/unload") as response:
        assert response.status == 409
        assert (await response.json())["error"]["code"] == "model_pinned"
    async with served.client.post("/v1/models/lazy/load") as response:
        assert response.status == 200
        assert (await response.json())["ovserve"]["state"] == "loaded"
    assert len(lazy.launcher.launched) == 1
    async with served.client.post("/v3/models/nope/load") as response:
        assert response.status == 404


async def test_a_stream_parsed_after_a_load_on_demand_is_complete(serve_on_demand: Start) -> None:
    lazy = fast_model(name="lazy")
    served = await serve_on_demand(lazy, lazy_load=True)
    async with served.client.post("/v3/chat/completions", json=chat("lazy", stream=True)) as response:
        assert response.status == 200
        events = parse_sse(await response.text())
    assert events[-1] == "[DONE]"


async def test_load_unload_and_config_reload_need_the_api_key(serve_on_demand: Start) -> None:
    lazy = fast_model(name="lazy")
    served = await serve_on_demand(lazy, lazy_load=True, api_key=["sk-ops"])
    for path in ("/v3/models/lazy/load", "/v3/models/lazy/unload", "/v1/config/reload"):
        async with served.client.post(path) as response:
            assert response.status == 401, path
    assert lazy.launcher.launched == []
    headers = {"Authorization": "Bearer sk-ops"}
    async with served.client.post("/v3/models/lazy/load", headers=headers) as response:
        assert response.status == 200
    async with served.client.post("/v1/config/reload", headers=headers) as response:
        assert response.status == 400  # no --config_path here
        assert "config_path" in (await response.json())["error"]["message"]
