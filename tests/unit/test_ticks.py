"""The housekeeping grid (``ovserve.ticks``): ticks are multiples of the interval, and tasks with
intervals that divide one another wake at the same instants (one round of the loop)."""

from __future__ import annotations

import asyncio
import selectors

import pytest

from ovserve.ticks import next_tick, sleep_to_next_tick


@pytest.mark.parametrize(
    ("now", "interval", "tick"),
    [(0.0, 0.5, 0.5), (0.49, 0.5, 0.5), (0.5, 0.5, 1.0), (1234.56, 1.0, 1235.0), (10.01, 0.1, 10.1)],
)
def test_the_next_tick_is_the_first_multiple_of_the_interval_after(now: float, interval: float, tick: float) -> None:
    assert next_tick(now, interval) == pytest.approx(tick, abs=1e-9)


class CountingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """Counts the loop's waits: callbacks that see the same count ran in one round."""

    waits = 0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self.waits += 1
        return super().select(timeout)


def test_tasks_on_dividing_intervals_wake_in_the_same_round_of_the_loop() -> None:
    selector = CountingSelector()

    async def run() -> tuple[set[int], list[int]]:
        fast_rounds: set[int] = set()
        slow_rounds: list[int] = []

        async def fast() -> None:
            while True:
                await sleep_to_next_tick(0.01)
                fast_rounds.add(selector.waits)

        async def slow() -> None:
            for _ in range(3):
                await sleep_to_next_tick(0.05)
                slow_rounds.append(selector.waits)

        fast_task = asyncio.create_task(fast())
        await slow()
        await asyncio.sleep(0)  # the fast task's wake of the last tick is queued behind this one
        fast_task.cancel()
        return fast_rounds, slow_rounds

    loop = asyncio.SelectorEventLoop(selector)
    try:
        fast_rounds, slow_rounds = loop.run_until_complete(run())
    finally:
        loop.close()
    assert len(slow_rounds) == 3
    assert set(slow_rounds) <= fast_rounds  # no wait of the loop of its own for the slow task


def test_a_task_cancelled_while_asleep_leaves_no_timer_behind() -> None:
    async def run() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(sleep_to_next_tick(3600.0))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return sum(1 for handle in loop._scheduled if not handle.cancelled())  # type: ignore[attr-defined]

    assert asyncio.run(run()) == 0
