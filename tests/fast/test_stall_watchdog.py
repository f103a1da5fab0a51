"""The stall watchdog tells a long step at work from a hung engine (``ovserve.engine.watchdog``).

A step that works in silence for several stall timeouts (a long prefill on a loaded CPU) is left
alone and its request answered; an engine that goes silent *and* idle (a deadlock, SIGSTOP) is still
replaced within the stall timeout, even in the middle of a long step; one that works in silence past
``--engine_step_timeout`` is taken for a step that spins.

Time is the test's :class:`~ovserve.clock.ManualClock`: the watchdog's ticks, the engine's long
step and the CPU time the watchdog samples of it (the scripted engine's ``WorkMeter``, which grows
by its share of a core while it works) all move when the test moves the clock, so seconds of
silence take none. Reading a real process's CPU time from ``/proc`` is ``tests/unit/test_stall_watch.py``'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from ovserve.clock import ManualClock
from ovserve.engine import restarts
from ovserve.engine.messages import AddRequest
from tests.fast.harness import FastModel, Served, eventually, fast_model
from tests.fast.scripted_engine import Busy, Script, Step, output

STALL_TIMEOUT_S = 0.5
TICK_S = STALL_TIMEOUT_S / 4  # the watchdog's interval (ovserve.engine.client)
LONG_STEP = "a long step, not a stall"


def working_in_silence(seconds: float, cpu_share: float = 1.0) -> Script:
    def script(add: AddRequest) -> Iterator[Step]:
        yield Busy(seconds, cpu_share)  # one step's worth of work, without a word
        yield [output(add, "Hello", finish="stop")]

    return script


def messages_of(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if text in record.getMessage()]


async def request_in_a_long_step(
    served: Served, fast: FastModel, messages: list[dict[str, str]]
) -> asyncio.Future[tuple[int, Any]]:
    """A chat request, once the engine has begun its silent step (the clock has not moved since)."""
    pending = asyncio.ensure_future(served.chat(messages=messages))
    await eventually(lambda: fast.launcher.engine.meter.working)
    return pending


# A whole core, a crowded machine's share of one, and a trickle still above BUSY_CPU_FRACTION:
# all of them work, none of them is a stall.
@pytest.mark.parametrize("cpu_share", [1.0, 0.25, 0.1])
async def test_a_step_that_works_in_silence_for_three_stall_timeouts_is_left_alone(
    serve, messages, caplog, clock: ManualClock, cpu_share: float
) -> None:
    fast = fast_model(working_in_silence(3 * STALL_TIMEOUT_S, cpu_share), stall_timeout=STALL_TIMEOUT_S, clock=clock)
    served = await serve(fast)
    pending = await request_in_a_long_step(served, fast, messages)
    await clock.advance(3 * STALL_TIMEOUT_S)
    status, body = await pending
    assert status == 200, body
    assert body["choices"][0]["message"]["content"] == "Hello"
    assert served.engine.busy_steps == 1  # the silent work ran to its end
    engine = fast.model.engine
    assert (engine.stalls, engine.restarts, len(fast.launcher.launched)) == (0, 0, 1)
    # The operator hears of the long step once, as a warning.
    (noted,) = messages_of(caplog, LONG_STEP)
    assert noted.levelno == logging.WARNING


async def test_an_engine_that_hangs_in_a_long_step_is_replaced_within_the_stall_timeout(
    serve, messages, caplog, clock: ManualClock
) -> None:
    step_timeout = 600.0  # far away: only the stall timeout can catch it
    fast = fast_model(
        working_in_silence(step_timeout), stall_timeout=STALL_TIMEOUT_S, step_timeout=step_timeout, clock=clock
    )
    served = await serve(fast)
    pending = await request_in_a_long_step(served, fast, messages)
    # First left alone while it works, for longer than the stall timeout...
    await clock.advance(2 * STALL_TIMEOUT_S)
    assert messages_of(caplog, LONG_STEP)
    assert fast.model.engine.stalls == 0
    served.engine.hang()  # ...then silent and idle, as after SIGSTOP or a deadlock
    await clock.advance(STALL_TIMEOUT_S + TICK_S)  # the stall timeout, and the watchdog's next tick
    assert fast.model.engine.stalls == 1
    status, body = await pending
    assert status == 503
    assert body["error"]["code"] == "engine_stalled"
    (stall,) = messages_of(caplog, "killing and restarting the engine")
    assert "no report and no CPU used" in stall.getMessage()
    assert served.engine.busy_steps == 0  # stopped in the middle of its work, long before the step bound
    await replaced(fast, clock)


async def test_a_step_that_works_in_silence_past_the_step_timeout_is_a_stall(
    serve, messages, caplog, clock: ManualClock
) -> None:
    step_timeout = 3 * STALL_TIMEOUT_S
    fast = fast_model(working_in_silence(600.0), stall_timeout=STALL_TIMEOUT_S, step_timeout=step_timeout, clock=clock)
    served = await serve(fast)
    pending = await request_in_a_long_step(served, fast, messages)
    await clock.advance(step_timeout - TICK_S)
    assert messages_of(caplog, LONG_STEP)
    assert fast.model.engine.stalls == 0  # a long step until the step bound...
    await clock.advance(2 * TICK_S)  # ...and a spin once past it
    assert fast.model.engine.stalls == 1
    status, body = await pending
    assert status == 503
    assert body["error"]["code"] == "engine_stalled"
    # Left alone as a long step first, then given up on as a spin, once past the step bound.
    (noted,) = messages_of(caplog, LONG_STEP)
    (stall,) = messages_of(caplog, "killing and restarting the engine")
    assert caplog.records.index(noted) < caplog.records.index(stall)
    assert "busy in one step" in stall.getMessage()
    assert f"--engine_step_timeout {step_timeout:g} s" in stall.getMessage()
    assert fast.launcher.launched[0].busy_steps == 0  # killed mid-spin
    await replaced(fast, clock)


async def replaced(fast: FastModel, clock: ManualClock) -> None:
    """A stalled engine is replaced after the delay of a failed start (it had served only briefly:
    ``ovserve.engine.restarts``), on the clock."""
    await clock.advance(restarts.RETRY_FIRST_DELAY_S)
    await eventually(lambda: fast.model.engine.ready and len(fast.launcher.launched) == 2)
