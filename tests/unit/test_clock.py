"""The timers' clock (ovserve.clock): the system clock is the event loop's, and the manual clock
tests use wakes each sleeper at its own instant, in order, without waiting."""

from __future__ import annotations

import asyncio

import pytest

from ovserve.clock import SYSTEM_CLOCK, ManualClock
from ovserve.models.residency import Residency
from ovserve.ticks import sleep_to_next_tick


async def test_the_system_clock_is_the_event_loops() -> None:
    loop = asyncio.get_running_loop()
    before = loop.time()
    now = SYSTEM_CLOCK.monotonic()
    assert before <= now <= loop.time()  # call_at takes its deadlines on this scale
    await SYSTEM_CLOCK.sleep_until(SYSTEM_CLOCK.monotonic() + 0.01)
    assert SYSTEM_CLOCK.monotonic() >= now + 0.01


async def test_a_manual_clock_wakes_each_sleeper_at_its_instant_in_order() -> None:
    clock = ManualClock(start=100.0, wall_start=5_000.0)
    woken: list[tuple[str, float]] = []

    async def sleeper(name: str, when: float) -> None:
        await clock.sleep_until(when)
        woken.append((name, clock.monotonic()))

    tasks = [asyncio.create_task(sleeper(name, when)) for name, when in (("late", 103.0), ("early", 101.0))]
    await asyncio.sleep(0)
    await clock.advance(1.5)
    assert woken == [("early", 101.0)]
    assert (clock.monotonic(), clock.wall()) == (101.5, 5_001.5)
    await clock.advance(10)
    assert woken == [("early", 101.0), ("late", 103.0)]
    await asyncio.gather(*tasks)


async def test_a_periodic_task_on_a_manual_clock_wakes_once_a_tick() -> None:
    clock = ManualClock(start=0.0)
    ticks: list[float] = []

    async def periodic() -> None:
        while True:
            ticks.append(await sleep_to_next_tick(0.5, clock))

    task = asyncio.create_task(periodic())
    await asyncio.sleep(0)
    await clock.advance(2.2)
    task.cancel()
    assert ticks == [0.5, 1.0, 1.5, 2.0]


async def test_a_cancelled_sleeper_is_skipped_when_its_time_comes() -> None:
    clock = ManualClock()
    task = asyncio.create_task(clock.sleep_until(clock.monotonic() + 1))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await clock.advance(2)  # nothing to wake, nothing raised
    assert clock.monotonic() == pytest.approx(ManualClock().monotonic() + 2)


async def test_a_residencys_idle_timer_and_expiry_read_its_clock() -> None:
    clock = ManualClock(start=10.0, wall_start=1_000.0)
    residency = Residency(idle_timeout=60.0, clock=clock)
    residency.touch()
    await clock.advance(45)
    assert residency.idle_for() == 45
    assert residency.expires_at() == 1_000.0 + 45 + 15  # the wall clock now, plus what is left
    assert residency.last_used == 1_000.0
