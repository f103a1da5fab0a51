"""The server's clock for timers: idle unloads, ``keep_alive``, the stall watchdog, the loop-lag probe.

Contract: every timer of the server reads time and sleeps through a :class:`Clock`, never through
``time.monotonic`` or ``asyncio.sleep`` directly, so that a test can run it on a clock it moves
by hand (:class:`ManualClock`) instead of waiting for the wall clock to get there.

- :meth:`Clock.monotonic` is the timers' scale (seconds, only differences mean anything); on the
  :data:`SYSTEM_CLOCK` it is the event loop's own (``loop.time()`` is ``time.monotonic()``), so
  a deadline computed from it can be handed to ``loop.call_at``;
- :meth:`Clock.wall` is Unix time, for what a client is shown (``/api/ps``'s ``expires_at``,
  ``last_used``); it moves with :meth:`Clock.monotonic`;
- :meth:`Clock.sleep_until` returns once :meth:`Clock.monotonic` has reached ``when`` and leaves
  no timer behind when cancelled.

Durations that are measured, not waited for (a load's seconds, a request's latency), keep reading
the real clock: they report what happened.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> float: ...

    async def sleep_until(self, when: float) -> None: ...


class SystemClock:
    """The real clock: ``time.monotonic`` (the event loop's), ``time.time``, ``loop.call_at``."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep_until(self, when: float) -> None:
        # An absolute deadline (call_at), not a delay: tasks that compute the same instant are
        # due together and run in one round of the loop (ovserve.ticks).
        loop = asyncio.get_running_loop()
        woken = loop.create_future()
        handle = loop.call_at(when, _wake, woken)
        try:
            await woken
        finally:
            handle.cancel()  # cancelled while asleep: the timer must not outlive the task


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that moves only when told (:meth:`advance`): tests of timers run without waiting.

    Starts at ``start`` on the monotonic scale and at ``wall_start`` Unix time."""

    def __init__(self, start: float = 1000.0, wall_start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._wall_offset = wall_start - start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()  # ties wake in the order they went to sleep

    def monotonic(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now + self._wall_offset

    async def sleep_until(self, when: float) -> None:
        if when <= self._now:
            await asyncio.sleep(0)
            return
        woken = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (when, next(self._order), woken))
        try:
            await woken
        finally:
            woken.cancel()  # a cancelled sleeper is skipped when its time comes

    async def advance(self, seconds: float, *, settle: int = 20) -> None:
        """Move the clock ``seconds`` on, waking each sleeper at its own instant in turn: after
        each wake the loop runs ``settle`` rounds, so a periodic task sleeps again (at the next
        tick) before the clock moves past it, as it would in real time."""
        target = self._now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            when, _, woken = heapq.heappop(self._sleepers)
            self._now = max(self._now, when)
            if not woken.done():
                woken.set_result(None)
            for _ in range(settle):
                await asyncio.sleep(0)
        self._now = target
        for _ in range(settle):
            await asyncio.sleep(0)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
