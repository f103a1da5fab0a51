"""Ollama's ``keep_alive`` on the fast layer (scripted engines, the real ``ollama`` client): a
request's ``keep_alive`` sets how long its model stays loaded after it, Ollama's load and unload
requests, pinned models winning, ``/api/ps``'s ``expires_at``, ``load_duration`` as the wait for a
load. The end-to-end acceptance on real engine processes is in ``tests/e2e/test_ollama.py``."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import ollama
import pytest

from ovserve.api import keys
from ovserve.engine.client import EngineState
from tests.fast.harness import MODEL, FastModel, Served, eventually, fast_model
from tests.fast.scripted_engine import held_reply

ASK = [{"role": "user", "content": "Hi"}]
ENGINE_BYTES = 100 << 20  # what a running scripted engine "holds" (the memory reader is replaced)
NEVER_YEAR = 2318  # Ollama's expires_at for a model that never unloads

Serve = Callable[..., Awaitable[Served]]


async def started(serve: Serve, *models: FastModel, **settings: Any) -> tuple[Served, ollama.AsyncClient]:
    served = await serve(*models, measure=lambda model: ENGINE_BYTES if model.engine.ready else None, **settings)
    return served, ollama.AsyncClient(host=str(served.client.make_url("")).rstrip("/"))


async def running(client: ollama.AsyncClient) -> dict[str, Any]:
    """/api/ps: the loaded models by name."""
    return {model.model: model for model in (await client.ps()).models}


def pinned(fast: FastModel) -> FastModel:
    fast.model.settings = fast.model.settings.model_copy(update={"pinned": True})
    return fast


async def collect(lines: AsyncIterator[Any]) -> list[Any]:
    return [line async for line in lines]


async def unloads(served: Served, reason: str) -> float:
    async with served.client.get("/metrics") as response:
        text = await response.text()
    prefix = f'ovserve_model_unloads_total{{model="{MODEL}",reason="{reason}"}} '
    (line,) = [line for line in text.splitlines() if line.startswith(prefix)]
    return float(line.removeprefix(prefix))


async def unloaded(served: Served, reason: str, count: float) -> None:
    """Wait until the model's ``count``-th unload for ``reason`` is done (its engine gone, counted)."""
    for _ in range(3000):
        if await unloads(served, reason) >= count:
            break
        await asyncio.sleep(0.01)
    assert await unloads(served, reason) == count
    assert served.models[0].model.engine.state is EngineState.UNLOADED


async def test_keep_alive_zero_unloads_the_model_as_its_answer_ends_and_the_next_request_loads_it(serve) -> None:
    fast = fast_model()
    served, client = await started(serve, fast)  # loaded at start, no idle timeout
    first = fast.launcher.engine
    answer = await client.chat(model=MODEL, messages=ASK, keep_alive=0, stream=False)
    assert answer.done_reason == "stop" and answer.message.content == "Hello!"
    assert await running(client) == {}  # already unloading when the answer arrived
    await eventually(lambda: not first.is_alive())
    assert fast.model.engine.state is EngineState.UNLOADED
    # Streamed: the model is given back before the last line, so /api/ps is empty once it is read.
    lines = await collect(await client.chat(model=MODEL, messages=ASK, keep_alive="0s", stream=True))
    assert lines[-1].done and "".join(line.message.content for line in lines) == "Hello!"
    assert len(fast.launcher.launched) == 2  # the model loaded at start loaded again on demand
    assert await running(client) == {}
    await eventually(lambda: not fast.launcher.engine.is_alive())
    # Without keep_alive, the next load keeps the model's own policy: loaded.
    await client.chat(model=MODEL, messages=ASK, stream=False)
    assert MODEL in await running(client)
    assert await unloads(served, "keep_alive") == 2
    assert fast.model.engine.restarts == 0


async def test_load_duration_is_the_wait_for_the_models_load(serve) -> None:
    fast = fast_model()
    _, client = await started(serve, fast, lazy_load=True)
    fast.launcher.gate.clear()  # the engine takes its time to load
    cold = asyncio.create_task(client.generate(model=MODEL, prompt="Hi", stream=False))
    await eventually(lambda: fast.launcher.launched)
    await asyncio.sleep(0.3)
    fast.launcher.gate.set()
    loaded = await cold
    warm = await client.generate(model=MODEL, prompt="Hi", stream=False)
    assert loaded.load_duration is not None and warm.load_duration is not None
    assert loaded.load_duration >= 300_000_000  # it waited at least as long as the engine was held back
    assert 0 < warm.load_duration < loaded.load_duration / 10  # loaded: nothing to wait for
    for answer in (loaded, warm):
        assert answer.total_duration is not None and answer.prompt_eval_duration is not None
        assert answer.eval_duration is not None
        assert answer.total_duration >= answer.load_duration + answer.prompt_eval_duration + answer.eval_duration


async def test_a_keep_alive_duration_shows_in_ps_and_unloads_the_model_once_it_ran_out(serve, clock) -> None:
    fast = fast_model()
    served, client = await started(serve, fast, clock=clock)
    await client.generate(model=MODEL, prompt="Hi", keep_alive="1s", stream=False)
    listed = (await running(client))[MODEL]
    assert listed.expires_at.timestamp() == pytest.approx(clock.wall() + 1)  # the request's end plus one second
    assert listed.size == ENGINE_BYTES and listed.size_vram == 0
    await clock.advance(0.9)  # past a sampler tick, not past its keep_alive
    assert fast.model.engine.ready and await unloads(served, "keep_alive") == 0
    await clock.advance(0.6)  # past it, and the next tick
    await unloaded(served, "keep_alive", 1)
    assert await running(client) == {}


async def test_a_negative_keep_alive_outlasts_the_idle_timeout_until_the_model_unloads(serve, clock) -> None:
    fast = fast_model()
    served, client = await started(serve, fast, clock=clock, idle_unload_timeout=0.3)
    await client.generate(model=MODEL, prompt="Hi", keep_alive=-1, stream=False)
    assert (await running(client))[MODEL].expires_at.year == NEVER_YEAR
    await client.generate(model=MODEL, prompt="Hi", stream=False)  # no keep_alive: the last one holds
    await clock.advance(1.0)  # past the idle timeout, two sampler ticks
    assert fast.model.engine.ready
    assert (await running(client))[MODEL].expires_at.year == NEVER_YEAR
    # A config reload that applies the model's policy again ends the client's keep_alive.
    idle_unloads = await unloads(served, "idle")
    served.client.app[keys.RESIDENCY].apply_policy(fast.model)
    await clock.advance(0.5)  # the sampler's next tick
    await unloaded(served, "idle", idle_unloads + 1)
    # keep_alive lasts one residency: loaded again without one, the idle timeout applies.
    await client.generate(model=MODEL, prompt="Hi", keep_alive=-1, stream=False)
    assert (await client.generate(model=MODEL, keep_alive=0)).done_reason == "unload"
    await client.generate(model=MODEL, prompt="Hi", stream=False)
    await clock.advance(1.0)
    await unloaded(served, "idle", idle_unloads + 2)
    assert await unloads(served, "keep_alive") == 1


@pytest.mark.parametrize("keep_alive", [1e300, "99999999999h"])
async def test_a_keep_alive_past_gos_longest_duration_keeps_the_model_and_ps_still_answers(
    serve, clock, keep_alive: float | str
) -> None:
    """Found by fuzzing /openapi.json: such a keep_alive made every later /api/ps a 500 (its
    expiry was no date), until the model unloaded, which it never did."""
    fast = fast_model()
    served, client = await started(serve, fast, clock=clock, idle_unload_timeout=0.3)
    async with served.client.post("/api/generate", json={"model": MODEL, "keep_alive": keep_alive}) as response:
        assert response.status == 200 and (await response.json())["done_reason"] == "load"
    await clock.advance(1.0)  # past the idle timeout, two sampler ticks
    assert (await running(client))[MODEL].expires_at.year == NEVER_YEAR
    assert fast.model.engine.ready


async def test_ollamas_load_and_unload_requests(serve, clock) -> None:
    fast = fast_model()
    _, client = await started(serve, fast, clock=clock, lazy_load=True)
    assert await running(client) == {}
    loaded = await client.generate(model=MODEL)  # no prompt: ollama run's first request
    assert (loaded.done, loaded.done_reason, loaded.response) == (True, "load", "")
    assert MODEL in await running(client)
    unloaded = await client.generate(model=MODEL, keep_alive=0)  # what ollama stop sends
    assert (unloaded.done, unloaded.done_reason) == (True, "unload")
    assert await running(client) == {}
    assert not fast.launcher.engine.is_alive()  # an idle model: answered once its engine exited
    chat_loaded = await client.chat(model=MODEL, messages=[], keep_alive="10m")
    assert (chat_loaded.done_reason, chat_loaded.message.content) == ("load", "")
    expires = (await running(client))[MODEL].expires_at.timestamp()
    assert expires == pytest.approx(clock.wall() + 600)
    assert (await client.chat(model=MODEL, messages=[], keep_alive=0)).done_reason == "unload"
    assert await running(client) == {}
    # Not loaded: still "unload", as Ollama answers; nothing is started for it.
    assert (await client.generate(model=MODEL, keep_alive=0)).done_reason == "unload"
    assert len(fast.launcher.launched) == 2


async def test_an_unload_request_while_a_stream_runs_answers_at_once_and_unloads_as_it_ends(serve) -> None:
    release = threading.Event()
    fast = fast_model(held_reply(50, release))
    _, client = await started(serve, fast)
    stream = asyncio.create_task(collect(await client.chat(model=MODEL, messages=ASK, stream=True)))
    await eventually(lambda: fast.model.engine.inflight == 1)
    assert (await client.generate(model=MODEL, keep_alive=0)).done_reason == "unload"
    assert not stream.done()  # answered without waiting for the stream
    assert MODEL in await running(client)  # still serving it
    release.set()
    lines = await stream
    assert "".join(line.message.content for line in lines).count("word") == 50  # the stream was not cut
    assert await running(client) == {}
    await eventually(lambda: not fast.launcher.engine.is_alive())


async def test_a_pinned_model_ignores_keep_alive_and_refuses_the_unload_request(
    serve, caplog: pytest.LogCaptureFixture
) -> None:
    fast = pinned(fast_model())
    _, client = await started(serve, fast)
    with caplog.at_level(logging.DEBUG, logger="ovserve.models.manager"):
        await client.chat(model=MODEL, messages=ASK, keep_alive=0, stream=False)
    assert "pinned: keep_alive 0 s ignored" in caplog.text
    assert (await running(client))[MODEL].expires_at.year == NEVER_YEAR
    with pytest.raises(ollama.ResponseError) as refused:
        await client.generate(model=MODEL, keep_alive=0)
    assert refused.value.status_code == 409 and "pinned" in refused.value.error
    assert len(fast.launcher.launched) == 1 and fast.launcher.engine.is_alive()
