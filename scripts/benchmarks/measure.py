"""Request traces and the figures (tokens/s, TTFT, inter-token latency) drawn from them.

The raw pipeline and the server fill the same :class:`Trace`, so a workload computes its figures
once for both: a token's time is when this process saw it (after the step that made it for the raw
pipeline, on arrival of its SSE chunk for the server).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

Figures = dict[str, float | None]


@dataclass
class Trace:
    """One request: when it was sent, and when its tokens arrived."""

    tag: str
    start: float
    events: list[tuple[float, int]] = field(default_factory=list)  # (time, tokens that arrived then)
    end: float | None = None
    text: str = ""
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, when reported
    # usage.completion_tokens, when reported: a server may put several tokens in one chunk (its
    # detokenizer holds back partial characters; it coalesces deltas for a slow reader), so
    # counting chunks would undercount the tokens.
    completion_tokens: int | None = None

    def add(self, now: float, tokens: int) -> None:
        if tokens > 0:
            self.events.append((now, tokens))

    @property
    def tokens(self) -> int:
        arrived = sum(count for _, count in self.events)
        return max(arrived, self.completion_tokens or 0)

    @property
    def first_token(self) -> float | None:
        return self.events[0][0] if self.events else None

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.start

    def gaps(self, window: tuple[float, float] | None = None) -> list[float]:
        """Inter-token latencies: a gap of ``dt`` carrying ``n`` tokens counts as ``n`` gaps of
        ``dt / n``; with ``window``, only gaps that end inside it."""
        result: list[float] = []
        for (before, _), (now, count) in zip(self.events, self.events[1:], strict=False):
            if window is None or window[0] <= now <= window[1]:
                result.extend([(now - before) / count] * count)
        return result


def percentile(values: Iterable[float | None], q: float) -> float | None:
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1 if q > 0 else 0)]


def ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def summary(traces: list[Trace], wall_s: float) -> Figures:
    """The figures every workload reports: aggregate output tokens/s, TTFT and ITL percentiles."""
    ttfts = [t.ttft for t in traces]
    gaps = [gap for t in traces for gap in t.gaps()]
    return {
        "tok_s": sum(t.tokens for t in traces) / wall_s if wall_s > 0 else None,
        "ttft_p50_ms": ms(percentile(ttfts, 50)),
        "ttft_p95_ms": ms(percentile(ttfts, 95)),
        "itl_p50_ms": ms(percentile(gaps, 50)),
        "itl_p95_ms": ms(percentile(gaps, 95)),
        "itl_p99_ms": ms(percentile(gaps, 99)),
        "wall_s": wall_s,
    }
