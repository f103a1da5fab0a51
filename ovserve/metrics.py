"""Prometheus metrics (prometheus-client), labelled by model: what operators graph for an LLM server.

Contract:

- One :class:`ServerMetrics` per app, with its own ``CollectorRegistry`` (no process-global
  state: tests and several apps in one process do not mix).
- Request-path metrics are recorded as events happen, through one :class:`RequestRecorder` per
  generation request: time to first token, queue time, inter-token latency, end-to-end latency,
  prompt and generated token counters, and exactly one outcome per request (its
  ``finish_reason``, or the error type, and the HTTP status); an audio request's seconds of audio
  (and characters, for speech) and its real-time factor.
- Everything else is *read* at scrape time from state the server process already holds: each
  model's admission counts (queue depth), its engine client (ready, in flight, restarts, stalls,
  the engine's last report: KV cache, pipeline requests), the engine process's resident memory
  (from ``/proc``), drafting totals, the Responses store's fault counts, and the event-loop lag
  histogram. Collecting never waits on an engine, so a stuck engine cannot slow or empty ``/metrics``.
- The server process's own ``process_*`` metrics (resident memory, CPU, open files) come from
  prometheus-client's process collector, on Linux.

Names follow Prometheus conventions (``ovserve_`` prefix, base units, ``_total`` counters); the
README lists them next to the vLLM / llama.cpp metrics they correspond to.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ovserve.engine.memory import resident_memory_bytes
from ovserve.engine.messages import EngineStats
from ovserve.loop_lag import BUCKETS as LOOP_LAG_BUCKETS
from ovserve.loop_lag import LoopLagMonitor


class _EngineState(Protocol):
    """What the collector reads of an engine client (``ovserve.engine.client.EngineClient``)."""

    @property
    def ready(self) -> bool: ...
    @property
    def inflight(self) -> int: ...
    @property
    def restarts(self) -> int: ...
    @property
    def start_failures(self) -> int: ...
    @property
    def stalls(self) -> int: ...
    @property
    def running_pid(self) -> int | None: ...
    @property
    def last_report(self) -> EngineStats | None: ...
    @property
    def last_report_at(self) -> float | None: ...


class _QueueState(Protocol):
    """What the collector reads of a model's admission counts (``ovserve.models.admission``)."""

    @property
    def waiting(self) -> int: ...
    @property
    def running(self) -> int: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def rejected(self) -> int: ...


class _DraftingState(Protocol):
    @property
    def requests(self) -> int: ...
    @property
    def accepted_tokens(self) -> int: ...
    @property
    def drafted_tokens(self) -> int: ...
    @property
    def verify_steps(self) -> int: ...


class ResponseStoreView(Protocol):
    """What the collector reads of the Responses store (``ovserve.dialects.openai.responses.store.ResponseStore``)."""

    @property
    def enabled(self) -> bool: ...
    @property
    def failures(self) -> Mapping[str, int]: ...


class ServedModelView(Protocol):
    """A served model as the metrics read it; ``ovserve.models.served.ServedModel`` is one.
    (A protocol, not an import: the services record metrics, so metrics must not import them.)"""

    @property
    def name(self) -> str: ...
    @property
    def engine(self) -> _EngineState: ...
    @property
    def admission(self) -> _QueueState: ...
    @property
    def drafting(self) -> _DraftingState: ...


class LoadCounts(Protocol):
    """A model's residency counters (``ovserve.models.residency.ResidencyCounters``)."""

    @property
    def loads(self) -> int: ...
    @property
    def unloads(self) -> Mapping[str, int]: ...
    @property
    def evictions(self) -> int: ...
    @property
    def load_buckets(self) -> Sequence[int]: ...
    @property
    def load_count(self) -> int: ...
    @property
    def load_seconds(self) -> float: ...


@dataclass(frozen=True)
class ResidencyRow:
    """One model as the residency metrics read it."""

    model: str
    state: str  # one of MODEL_STATES
    estimate_bytes: int  # what a load of it is expected to take
    counts: LoadCounts


class ResidencyView(Protocol):
    """What the collector reads of the residency manager (``ovserve.models.manager``)."""

    @property
    def budget(self) -> int | None: ...

    def in_use(self) -> int: ...

    def metric_rows(self) -> Iterable[ResidencyRow]: ...


# The states of a model (``ovserve.models.residency.ModelState``), one series each.
MODEL_STATES = ("loaded", "loading", "unloading", "unloaded", "failed")
# Why a model was unloaded, one series each from the start.
UNLOAD_REASONS = ("idle", "keep_alive", "evicted", "api", "config")
# Load durations (seconds), from the tiny model's to a large model's cold compile.
LOAD_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0)

# Latency buckets (seconds): from a fast decode step on a small model to a multi-minute answer.
_TOKEN_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5)
_FIRST_TOKEN_BUCKETS = (0.02, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_REQUEST_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0)
# Real-time factor (processing seconds per audio second): below 1 is faster than real time; a
# tiny Whisper on 2 cores is ~0.02-0.1, a loaded server or a large model nears or passes 1.
_REAL_TIME_FACTOR_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
# The audio operations, one real-time-factor series each.
AUDIO_OPERATIONS = ("transcribe", "translate", "speech")


@dataclass
class ServerMetrics:
    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        model = ["model"]
        self.time_to_first_token = Histogram(
            "ovserve_time_to_first_token_seconds",
            "Time from a request's arrival until its first generated token.",
            model,
            buckets=_FIRST_TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.queue_time = Histogram(
            "ovserve_request_queue_time_seconds",
            "Time from a request's admission until its first token (waiting in the engine, then prefill).",
            model,
            buckets=_FIRST_TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.inter_token_latency = Histogram(
            "ovserve_inter_token_latency_seconds",
            "Time between generated tokens of one choice (an output of k tokens counts k gaps).",
            model,
            buckets=_TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.request_latency = Histogram(
            "ovserve_e2e_request_latency_seconds",
            "Time from a generation request's arrival until its answer is complete.",
            model,
            buckets=_REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.prompt_tokens = Counter(
            "ovserve_prompt_tokens", "Prompt tokens of admitted requests.", model, registry=self.registry
        )
        self.generation_tokens = Counter(
            "ovserve_generation_tokens", "Tokens generated.", model, registry=self.registry
        )
        # vLLM's pair (prefix_cache_queries / prefix_cache_hits, in tokens): hits / queries is the
        # hit rate. Counted by the engine's model of its prefix cache (ovserve.engine.prefix_cache).
        self.prefix_cache_queries = Counter(
            "ovserve_prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache (prefix caching on, text prompts).",
            model,
            registry=self.registry,
        )
        self.prefix_cache_hits = Counter(
            "ovserve_prefix_cache_hits",
            "Prompt tokens served from the prefix cache instead of being prefilled.",
            model,
            registry=self.registry,
        )
        self.requests = Counter(
            "ovserve_requests",
            "Generation requests by outcome (the finish_reason of a completed request, else the error type) "
            "and HTTP status.",
            ["model", "endpoint", "outcome", "status"],
            registry=self.registry,
        )
        self.audio_input_seconds = Counter(
            "ovserve_audio_input_seconds",
            "Seconds of audio transcribed or translated (operation: transcribe, translate).",
            ["model", "operation"],
            registry=self.registry,
        )
        self.speech_characters = Counter(
            "ovserve_speech_input_characters",
            "Characters of text synthesized to speech.",
            model,
            registry=self.registry,
        )
        self.speech_seconds = Counter(
            "ovserve_speech_output_seconds", "Seconds of speech synthesized.", model, registry=self.registry
        )
        self.audio_real_time_factor = Histogram(
            "ovserve_audio_real_time_factor",
            "Seconds the engine took per second of audio, by operation (transcribe, translate, speech): "
            "below 1 is faster than real time.",
            ["model", "operation"],
            buckets=_REAL_TIME_FACTOR_BUCKETS,
            registry=self.registry,
        )
        self.auth_failures = Counter(
            "ovserve_auth_failures",
            "Requests refused for a missing or wrong API key, by reason (missing_key, invalid_key).",
            ["reason"],
            registry=self.registry,
        )
        for reason in ("missing_key", "invalid_key"):
            self.auth_failures.labels(reason=reason)  # exported as 0 before the first failure
        self._models: Iterable[ServedModelView] = ()
        self._loop_lag: LoopLagMonitor | None = None
        self._store: ResponseStoreView | None = None
        self._residency: ResidencyView | None = None
        self.registry.register(_ServerCollector(self))
        ProcessCollector(registry=self.registry)

    def watch(
        self,
        models: Iterable[ServedModelView],
        loop_lag: LoopLagMonitor,
        store: ResponseStoreView | None = None,
        residency: ResidencyView | None = None,
    ) -> None:
        """Read these at every scrape (``models`` is iterated each time: a config reload changes it)."""
        self._models = models
        self._loop_lag = loop_lag
        self._store = store
        self._residency = residency

    def recorder(self, endpoint: str) -> RequestRecorder:
        return RequestRecorder(self, endpoint)


class RequestRecorder:
    """One generation request's timeline; :meth:`tokens` is cheap enough for every output."""

    def __init__(self, metrics: ServerMetrics, endpoint: str) -> None:
        self._metrics = metrics
        self._endpoint = endpoint
        # Only a served model's name becomes a label value (a client's typo would add a series).
        self.model = ""
        self.arrived = time.monotonic()
        self._admitted: float | None = None
        self._last_token: dict[int, float] = {}
        self._first_token = False
        self._finished = False
        # The per-token series, looked up once (labels() takes a lock and builds a key per call).
        self._per_token: tuple[Histogram, Counter] | None = None

    def admitted(self, prompt_tokens: int) -> None:
        self._admitted = time.monotonic()
        self._metrics.prompt_tokens.labels(model=self.model).inc(prompt_tokens)

    def tokens(self, index: int, count: int) -> None:
        """``count`` new tokens of choice ``index`` arrived now."""
        now = time.monotonic()
        model = self.model
        if not self._first_token:
            self._first_token = True
            self._metrics.time_to_first_token.labels(model=model).observe(now - self.arrived)
            if self._admitted is not None:
                self._metrics.queue_time.labels(model=model).observe(now - self._admitted)
        if self._per_token is None:
            metrics = self._metrics
            self._per_token = (
                metrics.inter_token_latency.labels(model=model),
                metrics.generation_tokens.labels(model=model),
            )
        inter_token_latency, generation_tokens = self._per_token
        previous = self._last_token.get(index)
        if previous is not None:
            gap = (now - previous) / count
            for _ in range(count):
                inter_token_latency.observe(gap)
        self._last_token[index] = now
        generation_tokens.inc(count)

    def prefix_cache(self, prompt_tokens: int, cached_tokens: int) -> None:
        """A request's prompt tokens looked up in the prefix cache, and how many it served."""
        self._metrics.prefix_cache_queries.labels(model=self.model).inc(prompt_tokens)
        self._metrics.prefix_cache_hits.labels(model=self.model).inc(cached_tokens)

    def audio(self, operation: str, audio_seconds: float, processing_seconds: float, characters: int = 0) -> None:
        """An audio request's engine work: ``operation`` (one of AUDIO_OPERATIONS) took
        ``processing_seconds`` for ``audio_seconds`` of audio (read, or made from ``characters``)."""
        metrics, model = self._metrics, self.model
        if operation == "speech":
            metrics.speech_characters.labels(model=model).inc(characters)
            metrics.speech_seconds.labels(model=model).inc(audio_seconds)
        else:
            metrics.audio_input_seconds.labels(model=model, operation=operation).inc(audio_seconds)
        if audio_seconds > 0:
            factor = processing_seconds / audio_seconds
            metrics.audio_real_time_factor.labels(model=model, operation=operation).observe(factor)

    def finished(self, outcome: str, status: int) -> None:
        """Once per request; ``outcome`` is a finish_reason or an error type."""
        if self._finished:
            return
        self._finished = True
        self._metrics.request_latency.labels(model=self.model).observe(time.monotonic() - self.arrived)
        labels = {"model": self.model, "endpoint": self._endpoint, "outcome": outcome, "status": str(status)}
        self._metrics.requests.labels(**labels).inc()


def _gauge(name: str, documentation: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=["model"])


def _counter(name: str, documentation: str) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, labels=["model"])


class _ServerCollector(Collector):
    """Scrape-time families: read from what the server process holds, never awaited."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        ready = _gauge("ovserve_engine_ready", "1 when the model's engine is loaded and making progress.")
        inflight = _gauge("ovserve_inflight_requests", "Engine requests the server is waiting on.")
        waiting = _gauge(
            "ovserve_requests_waiting",
            "Admitted requests without a first token yet (queued in the engine or prefilling): the queue depth.",
        )
        running = _gauge("ovserve_requests_running", "Admitted requests generating tokens.")
        prompt_tokens = _gauge("ovserve_prompt_tokens_in_flight", "Prompt tokens of admitted, unfinished requests.")
        rejected = _counter("ovserve_requests_rejected", "Requests refused by admission control (429).")
        restarts = _counter(
            "ovserve_engine_restarts", "Engine processes started again after the first (each attempt counts)."
        )
        start_failures = _counter(
            "ovserve_engine_start_failures",
            "Engine starts that failed (the pipeline could not load, the process died).",
        )
        stalls = _counter("ovserve_engine_stalls", "Times the watchdog found the engine making no progress.")
        engine_requests = _gauge("ovserve_engine_requests", "Requests held by the pipeline (engine's last report).")
        handles = _gauge("ovserve_engine_handles", "Generation handles the engine process still drives.")
        scheduled = _gauge("ovserve_engine_scheduled_requests", "Requests the pipeline scheduled in its last step.")
        kv_usage = _gauge("ovserve_kv_cache_usage_ratio", "Fraction of the KV cache in use (engine's last report).")
        kv_bytes = _gauge("ovserve_kv_cache_bytes", "KV cache the engine has allocated.")
        report_age = _gauge("ovserve_engine_report_age_seconds", "Seconds since the engine last reported its state.")
        memory = _gauge(
            "ovserve_engine_resident_memory_bytes", "Resident memory of the model's engine process (VmRSS at scrape)."
        )
        accepted = _counter("ovserve_draft_accepted_tokens", "Draft tokens the main model accepted.")
        proposed = _counter("ovserve_draft_proposed_tokens", "Draft tokens proposed (num_assistant_tokens mode).")
        verify = _counter("ovserve_draft_verify_steps", "Main-model verification steps of drafting requests.")
        now = time.monotonic()
        models = list(self._metrics._models)
        for model in models:
            name = [model.name]
            engine, admission = model.engine, model.admission
            ready.add_metric(name, 1.0 if engine.ready else 0.0)
            inflight.add_metric(name, engine.inflight)
            waiting.add_metric(name, admission.waiting)
            running.add_metric(name, admission.running)
            prompt_tokens.add_metric(name, admission.prompt_tokens)
            rejected.add_metric(name, admission.rejected)
            restarts.add_metric(name, engine.restarts)
            start_failures.add_metric(name, engine.start_failures)
            stalls.add_metric(name, engine.stalls)
            pid = engine.running_pid
            rss = None if pid is None else resident_memory_bytes(pid)
            if rss is not None:
                memory.add_metric(name, rss)
            report = engine.last_report
            if report is not None and engine.last_report_at is not None:
                engine_requests.add_metric(name, report.engine_requests)
                handles.add_metric(name, report.active_requests + report.releasing_requests)
                scheduled.add_metric(name, report.scheduled_requests)
                kv_usage.add_metric(name, report.cache_usage)
                kv_bytes.add_metric(name, report.kv_cache_bytes)
                report_age.add_metric(name, now - engine.last_report_at)
            if model.drafting.requests:
                accepted.add_metric(name, model.drafting.accepted_tokens)
                proposed.add_metric(name, model.drafting.drafted_tokens)
                verify.add_metric(name, model.drafting.verify_steps)
        yield from (ready, inflight, waiting, running, prompt_tokens, rejected, restarts, start_failures, stalls)
        yield from (engine_requests, handles, scheduled, kv_usage, kv_bytes, report_age, memory)
        if any(model.drafting.requests for model in models):
            yield from (accepted, proposed, verify)
        if self._metrics._residency is not None:
            yield from _residency_families(self._metrics._residency)
        store = self._metrics._store
        if store is not None and store.enabled:
            failures = CounterMetricFamily(
                "ovserve_responses_store_failures",
                "Responses store operations that failed on a disk or database fault (full, read-only, deleted "
                "file); housekeeping is store work no request waited for.",
                labels=["operation"],
            )
            for operation, count in store.failures.items():
                failures.add_metric([operation], count)
            yield failures
        lag = self._metrics._loop_lag
        if lag is not None:
            cumulative, buckets = 0, []
            for bound, count in zip(LOOP_LAG_BUCKETS, lag.counts, strict=False):
                cumulative += count
                buckets.append((repr(bound), cumulative))
            buckets.append(("+Inf", lag.samples))
            yield HistogramMetricFamily(
                "ovserve_event_loop_lag_seconds",
                f"How late the event loop woke from a {lag.interval * 1000:.0f} ms sleep.",
                buckets=buckets,
                sum_value=lag.total,
            )


def _residency_families(view: ResidencyView) -> Iterator[Metric]:
    """Models on demand: each model's state, loads, unloads, evictions, load durations and
    estimated memory; the memory the loaded models take against the budget."""
    state = GaugeMetricFamily(
        "ovserve_model_state", "1 for the model's current state (loaded, loading, unloading, unloaded, failed).",
        labels=["model", "state"],
    )  # fmt: skip
    loaded = _gauge("ovserve_model_loaded", "1 when the model's engine is loaded and serving, 0 otherwise.")
    loads = _counter("ovserve_model_loads", "Loads of the model's engine that succeeded (at start or on demand).")
    unloads = CounterMetricFamily(
        "ovserve_model_unloads",
        "Unloads of the model's engine by reason: idle (--idle_unload_timeout), keep_alive (an Ollama request's "
        "keep_alive ran out, or asked for the unload), evicted (to fit the memory budget), api (POST .../unload), "
        "config (removed or replaced by a config reload).",
        labels=["model", "reason"],
    )
    evictions = _counter("ovserve_model_evictions", "Unloads made to fit another model in --models_memory_budget.")
    estimate = _gauge(
        "ovserve_model_memory_estimate_bytes",
        "Memory a load of the model is expected to take: its engine's peak in its last residency, else an estimate "
        "from its files and KV cache size.",
    )
    durations = HistogramMetricFamily(
        "ovserve_model_load_duration_seconds", "Time a load of the model's engine took until it served.",
        labels=["model"],
    )  # fmt: skip
    for row in view.metric_rows():
        name = [row.model]
        for value in MODEL_STATES:
            state.add_metric([row.model, value], 1.0 if value == row.state else 0.0)
        loaded.add_metric(name, 1.0 if row.state == "loaded" else 0.0)
        counts = row.counts
        loads.add_metric(name, counts.loads)
        for reason in UNLOAD_REASONS:
            unloads.add_metric([row.model, reason], counts.unloads.get(reason, 0))
        evictions.add_metric(name, counts.evictions)
        estimate.add_metric(name, row.estimate_bytes)
        cumulative, buckets = 0, []
        for bound, count in zip(LOAD_BUCKETS, counts.load_buckets, strict=True):
            cumulative += count
            buckets.append((repr(bound), cumulative))
        buckets.append(("+Inf", counts.load_count))
        durations.add_metric(name, buckets, counts.load_seconds)
    yield from (state, loaded, loads, unloads, evictions, estimate, durations)
    yield GaugeMetricFamily(
        "ovserve_models_memory_in_use_bytes",
        "Memory the resident models take as the budget counts it (each one's measured peak, or its estimate while "
        "it loads).",
        value=view.in_use(),
    )
    if view.budget is not None:
        yield GaugeMetricFamily(
            "ovserve_models_memory_budget_bytes", "--models_memory_budget: memory the loaded models may take.",
            value=view.budget,
        )  # fmt: skip
