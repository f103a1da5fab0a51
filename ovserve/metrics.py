"""Prometheus metrics (prometheus-client), labelled by model: what operators graph for an LLM server.

Contract:

- One :class:`ServerMetrics` per app, with its own ``CollectorRegistry`` (no process-global
  state: tests and several apps in one process do not mix).
- Request-path metrics are recorded by the services as events happen (:class:`RequestRecorder`):
  queue time, time to first token, inter-token latency, end-to-end latency, prompt and generated
  token counters, and one outcome per request (``finish_reason``, or the error type, and the HTTP
  status).
- Engine-side state is *read* at scrape time from values the server process already holds (the
  engine client's state, counters and last stats report): a scrape never waits on an engine, so a
  stuck engine cannot slow or empty ``/metrics``.

Names follow Prometheus conventions (``ovserve_`` prefix, ``_seconds``, ``_total``); the README
lists them with the vLLM / llama.cpp metrics they correspond to.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# Latency buckets (seconds): from a fast decode step on a small model to a multi-minute answer.
_TOKEN_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5)
_FIRST_TOKEN_BUCKETS = (0.02, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_REQUEST_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0)


class EngineView(Protocol):
    """What the collector reads from one model's engine (attributes, never awaited)."""

    @property
    def ready(self) -> bool: ...

    @property
    def restarts(self) -> int: ...

    @property
    def stalls(self) -> int: ...

    def gauges(self) -> dict[str, float]: ...


@dataclass
class ServerMetrics:
    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        labels = ["model"]
        self.queue_time = Histogram(
            "ovserve_request_queue_time_seconds",
            "Time from a request's admission until the engine produced its first output (waiting + prefill).",
            labels,
            buckets=_FIRST_TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.time_to_first_token = Histogram(
            "ovserve_time_to_first_token_seconds",
            "Time from the request's arrival until its first generated token.",
            labels,
            buckets=_FIRST_TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.inter_token_latency = Histogram(
            "ovserve_inter_token_latency_seconds",
            "Time between generated tokens of one sequence (a step delivering k tokens counts k times).",
            labels,
            buckets=_TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.request_latency = Histogram(
            "ovserve_e2e_request_latency_seconds",
            "Time from a request's arrival until its last byte.",
            labels,
            buckets=_REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.prompt_tokens = Counter(
            "ovserve_prompt_tokens", "Prompt tokens of admitted requests.", labels, registry=self.registry
        )
        self.generation_tokens = Counter(
            "ovserve_generation_tokens", "Tokens generated.", labels, registry=self.registry
        )
        self.requests = Counter(
            "ovserve_requests",
            "Requests by outcome: the finish_reason of a completed request, else the error type; and the status.",
            ["model", "endpoint", "outcome", "status"],
            registry=self.registry,
        )
        self.rejected = Counter(
            "ovserve_requests_rejected",
            "Requests refused before any engine work by admission control (429) or readiness (503).",
            ["model", "reason"],
            registry=self.registry,
        )
        self.waiting = Gauge(
            "ovserve_requests_waiting",
            "Admitted requests without a first token yet (in the engine's queue or prefilling): the queue depth.",
            labels,
            registry=self.registry,
        )
        self.running = Gauge("ovserve_requests_running", "Requests generating tokens.", labels, registry=self.registry)
        self._engines: dict[str, EngineView] = {}
        self.registry.register(_EngineCollector(self._engines))

    def watch_engine(self, model: str, engine: EngineView) -> None:
        self._engines[model] = engine
        for gauge in (self.waiting, self.running):
            gauge.labels(model=model).set(0)

    def add_collector(self, collect: Callable[[], Iterable[Metric]]) -> None:
        """Extra families computed at scrape time (e.g. the event-loop lag histogram)."""
        self.registry.register(_CallableCollector(collect))

    def recorder(self, model: str, endpoint: str) -> RequestRecorder:
        return RequestRecorder(self, model, endpoint)


class RequestRecorder:
    """One request's timeline; every method is cheap enough to call per streamed chunk."""

    def __init__(self, metrics: ServerMetrics, model: str, endpoint: str) -> None:
        self._metrics = metrics
        self._model = model
        self._endpoint = endpoint
        self.arrived = time.monotonic()
        self._admitted: float | None = None
        self._last_token: dict[int, float] = {}
        self._first_token = False
        self._finished = False

    def admitted(self, prompt_tokens: int) -> None:
        self._admitted = time.monotonic()
        self._metrics.prompt_tokens.labels(model=self._model).inc(prompt_tokens)
        self._metrics.waiting.labels(model=self._model).inc()

    def tokens(self, index: int, count: int) -> None:
        """``count`` new tokens of choice ``index`` arrived now."""
        if count <= 0:
            return
        now = time.monotonic()
        model = self._model
        if not self._first_token:
            self._first_token = True
            self._metrics.time_to_first_token.labels(model=model).observe(now - self.arrived)
            if self._admitted is not None:
                self._metrics.queue_time.labels(model=model).observe(now - self._admitted)
                self._metrics.waiting.labels(model=model).dec()
                self._metrics.running.labels(model=model).inc()
        previous = self._last_token.get(index)
        if previous is not None:
            gap = (now - previous) / count
            histogram = self._metrics.inter_token_latency.labels(model=model)
            for _ in range(count):
                histogram.observe(gap)
        self._last_token[index] = now
        self._metrics.generation_tokens.labels(model=model).inc(count)

    def finished(self, outcome: str, status: int) -> None:
        """Exactly once per admitted or refused request: ``outcome`` is a finish_reason or an error type."""
        if self._finished:
            return
        self._finished = True
        model = self._model
        if self._admitted is not None:
            gauge = self._metrics.running if self._first_token else self._metrics.waiting
            gauge.labels(model=model).dec()
        self._metrics.request_latency.labels(model=model).observe(time.monotonic() - self.arrived)
        self._metrics.requests.labels(model=model, endpoint=self._endpoint, outcome=outcome, status=str(status)).inc()


class _EngineCollector(Collector):
    def __init__(self, engines: dict[str, EngineView]) -> None:
        self._engines = engines

    def collect(self) -> Iterator[Metric]:
        ready = GaugeMetricFamily(
            "ovserve_engine_ready", "1 when the model's engine is loaded and making progress.", labels=["model"]
        )
        restarts = CounterMetricFamily(
            "ovserve_engine_restarts", "Engine processes restarted after dying or stalling.", labels=["model"]
        )
        stalls = CounterMetricFamily(
            "ovserve_engine_stalls", "Times the watchdog found the engine making no progress.", labels=["model"]
        )
        families: dict[str, GaugeMetricFamily] = {}
        for model, engine in self._engines.items():
            ready.add_metric([model], 1.0 if engine.ready else 0.0)
            restarts.add_metric([model], engine.restarts)
            stalls.add_metric([model], engine.stalls)
            for name, value in engine.gauges().items():
                if name not in families:
                    families[name] = GaugeMetricFamily(name, _ENGINE_GAUGE_HELP.get(name, name), labels=["model"])
                families[name].add_metric([model], value)
        yield ready
        yield restarts
        yield stalls
        yield from families.values()


_ENGINE_GAUGE_HELP = {
    "ovserve_kv_cache_usage_ratio": "Fraction of the KV cache in use (pipeline metrics, last engine report).",
    "ovserve_kv_cache_bytes": "Size of the KV cache the engine has allocated.",
    "ovserve_engine_requests": "Requests held by the pipeline (last engine report).",
    "ovserve_engine_scheduled_requests": "Requests the pipeline scheduled in its last step.",
    "ovserve_engine_report_age_seconds": "Seconds since the engine last reported its state.",
}


class _CallableCollector(Collector):
    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        return self._collect()
