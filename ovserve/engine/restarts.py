"""When an engine is started again, and how long a refused request is told to wait.

Contract of :class:`RestartPolicy` (one per engine client; the caller brings the time, and the
:class:`~ovserve.clock.Clock` it waits on, so a test moves both by hand):

- a start that fails (the pipeline cannot load, the process dies while loading) is tried again after
  a delay that doubles with each failure in a row, up to :data:`RETRY_MAX_DELAY_S`: a model that can
  never load costs one attempt a minute, not a tight loop of loads and log lines;
- an engine that dies or stalls sooner than :data:`HEALTHY_AFTER_S` after it became ready counts as
  a failed start (an OOM under its first load, a crash at the first request) and waits as one; one
  that served longer is replaced at once;
- ``Retry-After`` is the wait for the next attempt, if one is pending, plus a load as long as the
  last one.
"""

from __future__ import annotations

import math

from ovserve.clock import Clock

RETRY_FIRST_DELAY_S = 1.0
RETRY_MAX_DELAY_S = 60.0
HEALTHY_AFTER_S = 60.0
# How long a load is assumed to take before one has been measured (for Retry-After).
ASSUMED_LOAD_S = 5.0


class RestartPolicy:
    """The failures in a row of one engine, its next attempt's time and its last load's duration."""

    def __init__(self) -> None:
        self.failures_in_a_row = 0  # failed starts in a row (an early death counts): the delay's exponent
        self.load_seconds = ASSUMED_LOAD_S  # the last load's duration
        self._next_attempt_at: float | None = None  # while waiting to retry
        self._ready_since: float | None = None

    def start_failed(self, now: float) -> float:
        """A start failed: the delay before the next attempt."""
        self.failures_in_a_row += 1
        delay = self._delay()
        self._next_attempt_at = now + delay
        return delay

    def became_ready(self, load_seconds: float, now: float) -> None:
        """The engine is ready, its load having taken ``load_seconds`` (measured, not on the clock)."""
        self.load_seconds = load_seconds
        self._ready_since = now

    def ready_for(self, now: float) -> float:
        """Seconds since the engine last became ready."""
        return now - (self._ready_since or 0.0)

    def engine_lost(self, now: float) -> None:
        """A ready engine died or stalled: its replacement waits as after a failed start if it was
        ready only briefly, else it starts at once."""
        self.failures_in_a_row = self.failures_in_a_row + 1 if self.ready_for(now) < HEALTHY_AFTER_S else 0
        self._next_attempt_at = now + self._delay()

    def forget(self) -> None:
        """The engine was unloaded on purpose: its next start is a fresh load, tried at once."""
        self.failures_in_a_row = 0
        self._next_attempt_at = None

    def remaining(self, now: float) -> float:
        """Seconds before the next attempt (0 when none is pending)."""
        return 0.0 if self._next_attempt_at is None else max(0.0, self._next_attempt_at - now)

    async def wait(self, clock: Clock) -> None:
        """Until the next attempt is due on ``clock`` (the one the times given here were read from)."""
        if self._next_attempt_at is not None:
            await clock.sleep_until(self._next_attempt_at)
        self._next_attempt_at = None

    def retry_after(self, now: float) -> int:
        """Seconds until the model is expected to serve again."""
        return max(1, math.ceil(self.remaining(now) + self.load_seconds))

    def _delay(self) -> float:
        if self.failures_in_a_row == 0:
            return 0.0
        return min(RETRY_MAX_DELAY_S, RETRY_FIRST_DELAY_S * 2.0 ** (self.failures_in_a_row - 1))
