"""Periodic housekeeping on one clock grid, so that the event loop wakes once for all of it.

Every periodic task of the server (the loop-lag probe, the residency sampler, each engine's stall
watchdog, the config-file poll) sleeps with :func:`sleep_to_next_tick` until the next multiple of
its interval on the loop's clock, not for an interval from whenever it last woke. Tasks whose
intervals divide one another then fall due at the same instants and run in one round of the loop.

Why: waking an idle event loop costs far more than the work each of these tasks does. On the
2-core test machine (a VM) the residency sampler's 2 wakes per second cost the server 1.0 ms of
CPU per second (reading the engine's memory, its work, costs 60 us); the whole idle server, before
the grid, used 4.1 ms per second. The cost per wake is the kernel's timer and the loop's round,
so fewer distinct wake-up instants is the saving: a streamed token pays for the idle work of the
time it takes.
"""

from __future__ import annotations

import math

from ovserve.clock import SYSTEM_CLOCK, Clock


def next_tick(now: float, interval: float) -> float:
    """The first multiple of ``interval`` (seconds) after ``now`` on the same clock."""
    return (math.floor(now / interval) + 1) * interval


async def sleep_to_next_tick(interval: float, clock: Clock = SYSTEM_CLOCK) -> float:
    """Sleep until the next multiple of ``interval`` on ``clock`` (by default the loop's); that
    tick's time.

    An absolute deadline (``call_at``), not a delay: two tasks that compute the same tick are
    due at the same instant and run in one round of the loop."""
    tick = next_tick(clock.monotonic(), interval)
    await clock.sleep_until(tick)
    return tick
