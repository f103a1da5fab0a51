"""The stall watchdog tells a long step at work from a hung engine (``ovserve.engine.watchdog``).

A step that works in silence for several stall timeouts (a long prefill on a loaded CPU) is left
alone and its request answered; an engine that goes silent *and* idle (a deadlock, SIGSTOP) is still
replaced within the stall timeout, even in the middle of a long step; one that works in silence past
``--engine_step_timeout`` is taken for a step that spins. The scripted engine's thread really burns
CPU, and the watchdog reads it from ``/proc`` as it reads an engine process's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from ovserve.engine.messages import AddRequest
from tests.conftest import contention_factor
from tests.fast.harness import eventually, fast_model
from tests.fast.scripted_engine import Busy, Script, Step, output

STALL_TIMEOUT_S = 0.5
LONG_STEP = "a long step, not a stall"


def working_in_silence(seconds: float) -> Script:
    def script(add: AddRequest) -> Iterator[Step]:
        yield Busy(seconds)  # one step's worth of work, without a word
        yield [output(add, "Hello", finish="stop")]

    return script


def messages_of(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if text in record.getMessage()]


@pytest.mark.parametrize("attempt", range(3))  # under load too: it must never be taken for a stall
async def test_a_step_that_works_in_silence_for_three_stall_timeouts_is_left_alone(
    serve, messages, caplog, attempt: int
) -> None:
    fast = fast_model(working_in_silence(3 * STALL_TIMEOUT_S), stall_timeout=STALL_TIMEOUT_S)
    served = await serve(fast)
    status, body = await served.chat(messages=messages)
    assert status == 200, body
    assert body["choices"][0]["message"]["content"] == "Hello"
    assert served.engine.busy_steps == 1  # the silent work ran to its end
    engine = fast.model.engine
    assert (engine.stalls, engine.restarts, len(fast.launcher.launched)) == (0, 0, 1)
    # The operator hears of the long step once, as a warning.
    (noted,) = messages_of(caplog, LONG_STEP)
    assert noted.levelno == logging.WARNING


async def test_an_engine_that_hangs_in_a_long_step_is_replaced_within_the_stall_timeout(
    serve, messages, caplog
) -> None:
    step_timeout = 600.0  # far away: only the stall timeout can catch it
    fast = fast_model(working_in_silence(step_timeout), stall_timeout=STALL_TIMEOUT_S, step_timeout=step_timeout)
    served = await serve(fast)
    pending = asyncio.ensure_future(served.chat(messages=messages))
    # First left alone while it works...
    await eventually(lambda: messages_of(caplog, LONG_STEP), timeout=10 * contention_factor())
    assert fast.model.engine.stalls == 0
    served.engine.hung.set()  # ...then silent and idle, as after SIGSTOP or a deadlock
    status, body = await pending
    assert status == 503
    assert body["error"]["code"] == "engine_stalled"
    assert fast.model.engine.stalls == 1
    (stall,) = messages_of(caplog, "killing and restarting the engine")
    assert "no report and no CPU used" in stall.getMessage()
    assert served.engine.busy_steps == 0  # stopped in the middle of its work, long before the step bound
    await eventually(lambda: fast.model.engine.ready and len(fast.launcher.launched) == 2)


async def test_a_step_that_works_in_silence_past_the_step_timeout_is_a_stall(serve, messages, caplog) -> None:
    step_timeout = 3 * STALL_TIMEOUT_S
    fast = fast_model(working_in_silence(600.0), stall_timeout=STALL_TIMEOUT_S, step_timeout=step_timeout)
    served = await serve(fast)
    status, body = await served.chat(messages=messages)
    assert status == 503
    assert body["error"]["code"] == "engine_stalled"
    engine = fast.model.engine
    assert engine.stalls == 1
    # Left alone as a long step first, then given up on as a spin, once past the step bound.
    (noted,) = messages_of(caplog, LONG_STEP)
    (stall,) = messages_of(caplog, "killing and restarting the engine")
    assert caplog.records.index(noted) < caplog.records.index(stall)
    assert "busy in one step" in stall.getMessage()
    assert f"--engine_step_timeout {step_timeout:g} s" in stall.getMessage()
    assert fast.launcher.launched[0].busy_steps == 0  # killed mid-spin
    await eventually(lambda: engine.ready and len(fast.launcher.launched) == 2)
