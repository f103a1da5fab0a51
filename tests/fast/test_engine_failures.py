"""What a client sees when the engine is not there, refuses, is overloaded, fails or dies."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from ovserve.engine import restarts
from ovserve.engine.client import EngineState
from ovserve.engine.messages import AddRequest, EngineErrorKind
from tests.fast.harness import MODEL, choices_by_index, eventually, fast_model, streamed_text
from tests.fast.scripted_engine import DIE, HEARTBEAT_INTERVAL_S, Step, end_with, output, reply


async def test_a_request_while_the_model_loads_is_503_until_it_is_ready(serve, messages) -> None:
    fast = fast_model()
    fast.launcher.gate.clear()  # the engine has not finished loading
    served = await serve(fast, wait=False)
    status, body = await served.chat(messages=messages)
    assert status == 503
    assert body["error"]["code"] == "model_not_ready"
    assert "loading" in body["error"]["message"]
    async with served.client.get("/v2/health/ready") as response:
        assert response.status == 503

    fast.launcher.gate.set()
    await eventually(lambda: fast.model.engine.ready)
    status, body = await served.chat(messages=messages)
    assert status == 200, body
    async with served.client.get("/v2/health/ready") as response:
        assert response.status == 200


async def test_a_request_the_scheduler_cannot_take_is_503_engine_overloaded(serve, messages) -> None:
    message = "the engine could not schedule the request (not enough KV cache for its prompt)"
    served = await serve(fast_model(end_with(EngineErrorKind.IGNORED, message)))
    status, body = await served.chat(messages=messages)
    assert status == 503
    assert body["error"] == {
        "message": message,
        "type": "service_unavailable",
        "param": None,
        "code": "engine_overloaded",
    }


async def test_a_streamed_request_the_scheduler_cannot_take_ends_with_an_error_event(serve, messages) -> None:
    served = await serve(fast_model(end_with(EngineErrorKind.IGNORED, "no room")))
    status, events = await served.chat(messages=messages, stream=True)
    assert status == 200  # the headers went before the engine answered
    *_, error, done = events
    assert error["error"]["code"] == "engine_overloaded"
    assert done == "[DONE]"


async def test_generation_settings_the_engine_refuses_are_400(serve, messages) -> None:
    message = "the engine refused the request's generation settings (the server log has the engine's reason)"
    served = await serve(fast_model(end_with(EngineErrorKind.REFUSED, message)))
    status, body = await served.chat(messages=messages, temperature=0.5)
    assert status == 400
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"] == message


async def test_a_request_failed_by_the_engine_is_500_and_the_engine_keeps_serving(serve, messages) -> None:
    fast = fast_model(end_with(EngineErrorKind.ENGINE, "the engine failed while generating this request"))
    served = await serve(fast)
    status, body = await served.chat(messages=messages)
    assert status == 500
    assert body["error"]["code"] == "engine_error"

    fast.launcher.script = reply("fine")
    status, body = await served.chat(messages=messages)
    assert status == 200 and body["choices"][0]["message"]["content"] == "fine"


def dies_after_hello(add: AddRequest) -> Iterator[Step]:
    yield [output(add, "Hel")]
    yield DIE


async def test_engine_death_mid_stream_sends_an_error_event_then_done_and_the_engine_restarts(
    serve, messages, clock
) -> None:
    fast = fast_model(dies_after_hello, clock=clock)
    served = await serve(fast)
    status, events = await served.chat(messages=messages, stream=True)
    assert status == 200
    (chunks,) = choices_by_index(events).values()
    assert streamed_text(chunks) == "Hel"
    *_, error, done = events
    assert error["error"]["code"] == "engine_died"
    assert error["error"]["type"] == "service_unavailable"
    assert "died" in error["error"]["message"]
    assert done == "[DONE]"

    # A new engine is started, after the delay of a failed start (the dead one had served only
    # briefly: ovserve.engine.restarts); requests are served again once it is ready.
    fast.launcher.script = reply("Back")
    await clock.advance(restarts.RETRY_FIRST_DELAY_S)
    await eventually(lambda: fast.model.engine.state is EngineState.READY and len(fast.launcher.launched) == 2)
    assert fast.model.engine.restarts == 1
    status, body = await served.chat(messages=messages)
    assert status == 200 and body["choices"][0]["message"]["content"] == "Back"


async def test_engine_death_during_a_unary_request_is_a_retryable_503(serve, messages) -> None:
    served = await serve(fast_model(dies_after_hello))
    async with served.client.post("/v3/chat/completions", json={"model": MODEL, "messages": messages}) as response:
        assert response.status == 503
        assert int(response.headers["Retry-After"]) >= 1
        body = await response.json()
    assert body["error"]["code"] == "engine_died"
    assert body["error"]["type"] == "service_unavailable"


async def test_engine_death_during_a_completion_is_a_retryable_503(serve) -> None:
    served = await serve(fast_model(dies_after_hello))
    async with served.client.post("/v3/completions", json={"model": MODEL, "prompt": "Hi"}) as response:
        assert response.status == 503
        assert "Retry-After" in response.headers
        assert (await response.json())["error"]["code"] == "engine_died"


async def test_a_hung_idle_engine_turns_not_ready_refuses_at_once_and_is_replaced(serve, messages, clock) -> None:
    fast = fast_model(stall_timeout=0.5, clock=clock)
    served = await serve(fast)
    status, _ = await served.chat(messages=messages)
    assert status == 200
    hung = fast.launcher.engine
    assert fast.model.engine.running_pid == hung.pid  # whose memory /metrics reads
    fast.launcher.gate.clear()  # the replacement takes a while to load, as a real one does
    hung.hang()  # idle and silent, as after SIGSTOP

    async def readiness() -> int:
        async with served.client.get("/v2/health/ready") as response:
            return response.status

    await clock.advance(0.4)  # silent and idle, but not yet for the stall timeout
    assert fast.model.engine.stalls == 0
    await clock.advance(0.4)  # past it, and the watchdog's next tick (every stall timeout / 4)
    await eventually(lambda: fast.model.engine.stalls == 1)
    # Known to be stalled: refused with Retry-After before any engine work, not after a timeout.
    async with served.client.post("/v3/chat/completions", json={"model": MODEL, "messages": messages}) as response:
        assert response.status == 503
        assert "Retry-After" in response.headers
    assert len(hung.adds()) == 1
    assert await readiness() == 503
    assert fast.model.engine.running_pid is None  # the killed one's pid is no longer read
    # A new engine process takes over (after the delay of a failed start: the hung one had served
    # only briefly) and serves.
    fast.launcher.gate.set()
    await clock.advance(restarts.RETRY_FIRST_DELAY_S)
    await eventually(lambda: fast.model.engine.ready and len(fast.launcher.launched) == 2)
    assert await readiness() == 200
    assert fast.model.engine.running_pid == fast.launcher.launched[1].pid
    status, body = await served.chat(messages=messages)
    assert status == 200, body
    assert fast.model.engine.restarts == 1


async def test_a_healthy_idle_engine_is_never_taken_for_stalled(serve, messages, clock) -> None:
    fast = fast_model(stall_timeout=0.5, clock=clock)
    served = await serve(fast)
    engine = fast.model.engine
    step = 1.25 * HEARTBEAT_INTERVAL_S  # a heartbeat falls due in each
    for _ in range(int(1.5 / step)):  # three stall timeouts of idleness, which only its heartbeats break
        last_report_at = engine.last_report_at
        await clock.advance(step)
        await eventually(lambda before=last_report_at: engine.last_report_at != before)  # heard from it
    assert engine.stalls == 0
    status, _ = await served.chat(messages=messages)
    assert status == 200


async def test_a_model_that_fails_at_every_start_is_retried_with_growing_delays(serve, messages, caplog, clock) -> None:
    broken = fast_model(name="broken", clock=clock)  # its restart delays run on the test's clock
    broken.launcher.fatal = "Incorrect weights in bin file!"
    good = fast_model(name="good", script=reply("fine"))
    served = await serve(good, broken, wait=False)
    await eventually(lambda: good.model.engine.ready)
    engine = broken.model.engine
    delays = [restarts.RETRY_FIRST_DELAY_S * 2**attempt for attempt in range(4)]
    for failures, delay in enumerate(delays[:3], start=1):
        await eventually(lambda count=failures: engine.start_failures == count)
        await clock.advance(delay)
    await eventually(lambda: engine.start_failures == 4)
    assert engine.state is EngineState.FAILED

    # The good model answers and the server is ready; the broken one is 503 with its own code.
    status, body = await served.post("/v3/chat/completions", {"model": "good", "messages": messages})
    assert status == 200 and body["choices"][0]["message"]["content"] == "fine"
    async with served.client.get("/v2/health/ready") as response:
        assert response.status == 200
    async with served.client.get("/v2/models/broken/ready") as response:
        assert response.status == 503
    async with served.client.post("/v3/chat/completions", json={"model": "broken", "messages": messages}) as response:
        assert response.status == 503
        assert "Retry-After" in response.headers
        assert (await response.json())["error"]["code"] == "model_load_failed"

    # Each attempt came its doubled delay after the last (on the clock, where no busy machine adds
    # to it), and said why in one line.
    launches = [engine.launched_at for engine in broken.launcher.launched]
    assert [later - earlier for earlier, later in itertools.pairwise(launches)] == delays[:3]
    failures = [record for record in caplog.records if "could not start" in record.getMessage()]
    assert len(failures) == engine.start_failures
    assert all("Incorrect weights in bin file!" in record.getMessage() for record in failures)
    async with served.client.get("/metrics") as response:
        text = await response.text()
    assert f'ovserve_engine_start_failures_total{{model="broken"}} {float(engine.start_failures)}' in text
    assert 'ovserve_engine_start_failures_total{model="good"} 0.0' in text

    # Once the model can load again, the next attempt serves it.
    broken.launcher.fatal = None
    await clock.advance(delays[3])
    await eventually(lambda: engine.ready)
    status, _ = await served.post("/v3/chat/completions", {"model": "broken", "messages": messages})
    assert status == 200


async def test_a_client_that_disconnects_mid_stream_cancels_its_engine_request(serve, messages) -> None:
    def endless(add: AddRequest) -> Iterator[Step]:
        while True:
            yield [output(add, "word ")]

    served = await serve(fast_model(endless))
    body = {"model": "fast-model", "messages": messages, "stream": True}
    async with served.client.post("/v3/chat/completions", json=body) as response:
        assert response.status == 200
        await response.content.readline()  # the first event arrived: generation is running
    engine = served.engine
    await eventually(engine.cancels)
    assert engine.cancels() == [engine.adds()[0].request_id]
    await eventually(lambda: served.models[0].model.engine.inflight == 0)
