"""Exact stop-sequence handling on text.

The engine matches stop strings at token granularity (a stop inside a token keeps or drops the
whole token), so the server finds the exact position itself. While streaming it holds back the
last ``len(longest stop) - 1`` characters, which could be the start of a stop sequence.
"""

from __future__ import annotations


class StopTrimmer:
    def __init__(self, stops: tuple[str, ...] | list[str], *, include_stop: bool) -> None:
        self._stops = tuple(stops)
        self._include = include_stop
        self._holdback = max((len(stop) for stop in self._stops), default=1) - 1
        self._pending = ""
        self.stopped = False
        self.matched: str | None = None  # the stop sequence found (Anthropic's stop_sequence)

    def push(self, text: str) -> str:
        """Return the text that is safe to emit; sets :attr:`stopped` once a stop matched."""
        if self.stopped:
            return ""
        if not self._stops:
            return text
        self._pending += text
        match = self._earliest_match()
        if match is not None:
            position, stop = match
            end = position + len(stop) if self._include else position
            emitted, self._pending = self._pending[:end], ""
            self.stopped = True
            self.matched = stop
            return emitted
        cut = len(self._pending) - self._holdback
        if cut <= 0:
            return ""
        emitted, self._pending = self._pending[:cut], self._pending[cut:]
        return emitted

    def flush(self) -> str:
        emitted, self._pending = self._pending, ""
        return emitted

    def _earliest_match(self) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for stop in self._stops:
            position = self._pending.find(stop)
            if position != -1 and (best is None or position < best[0]):
                best = (position, stop)
        return best
