"""The scrape-time half of ``/metrics``: families read, at each scrape, from state the server process
already holds.

Contract:

- :class:`ScrapeCollector` reads each watched model's admission counts (queue depth), its engine
  client (ready, in flight, restarts, stalls, the engine's last report: KV cache use and geometry,
  pipeline requests), the engine process's resident memory (from ``/proc``), drafting totals; the
  residency manager's models on demand (state, loads, unloads, evictions, load durations, memory
  against the budget); the Responses store's fault counts; and the event-loop lag histogram.
- Collecting never waits on an engine, so a stuck engine cannot slow or empty ``/metrics``.
- The engine's report is exported only while its process is attached: a model unloaded (or
  restarting, or not loaded yet) has no KV cache, so its cache series go away rather than repeat
  the last process's values; its queue gauges stay (requests may wait for its load).
- The routing gauges (queue, running, KV-cache use 0-1, ``ovserve_cache_config_info``) are
  ovserve's side of the Gateway API Inference Extension's model server protocol (docs/routing.md):
  their names and meanings are a contract with the endpoint picker's configuration.
- What it reads is declared here as protocols (the views), not imported: the served models and
  the residency manager import this module (``ResidencyRow``, ``LOAD_BUCKETS``), so it must not
  import them.

``ovserve.metrics`` owns the registry this collector is registered in, and the request path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ovserve.engine.client import EngineClient
from ovserve.engine.memory import resident_memory_bytes
from ovserve.engine.messages import EngineStats
from ovserve.loop_lag import BUCKETS as LOOP_LAG_BUCKETS
from ovserve.loop_lag import LoopLagMonitor


class _QueueState(Protocol):
    """What the collector reads of a model's admission counts (``ovserve.models.admission.Admission``)."""

    waiting: int
    running: int
    prompt_tokens: int
    rejected: int
    batch: int


class _DraftingState(Protocol):
    """What it reads of a model's drafting totals (``ovserve.models.drafting.DraftingStats``)."""

    requests: int
    accepted_tokens: int
    drafted_tokens: int
    verify_steps: int


class ResponseStoreView(Protocol):
    """What the collector reads of the Responses store (``ovserve.dialects.openai.responses.store.ResponseStore``)."""

    @property
    def enabled(self) -> bool: ...
    @property
    def failures(self) -> Mapping[str, int]: ...


class FilesStoreView(Protocol):
    """What the collector reads of the files store (``ovserve.dialects.openai.files.store.FileStore``)."""

    @property
    def faults(self) -> _FaultCount: ...


class _FaultCount(Protocol):
    count: int


class ServedModelView(Protocol):
    """A served model as the metrics read it; ``ovserve.models.served.ServedModel`` is one.
    (A protocol, not an import: the services record metrics, so metrics must not import them; the
    engine client is below both, so it is read as itself.)"""

    @property
    def name(self) -> str: ...
    @property
    def engine(self) -> EngineClient: ...
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


# The families an endpoint picker reads, by the field of its engine config (llm-d's
# ``engineConfigs`` entry) that names each: the chart renders that entry (deploy/helm/ovserve,
# ``inferencePool``) and docs/routing.md describes it. A rename here breaks routing.
ROUTING_METRICS = {
    "queuedRequestsSpec": "ovserve_requests_waiting",
    "runningRequestsSpec": "ovserve_requests_running",
    "kvUsageSpec": "ovserve_kv_cache_usage_ratio",
    "cacheInfoSpec": "ovserve_cache_config_info",
}
# The states of a model (``ovserve.models.residency.ModelState``), one series each.
MODEL_STATES = ("loaded", "loading", "unloading", "unloaded", "failed")
# Why a model was unloaded, one series each from the start.
UNLOAD_REASONS = ("idle", "keep_alive", "evicted", "api", "config")
# Load durations (seconds), from the tiny model's to a large model's cold compile.
LOAD_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0)


def _gauge(name: str, documentation: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=["model"])


def _counter(name: str, documentation: str) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, labels=["model"])


def _cumulative(bounds: Sequence[float], counts: Iterable[int], total: int) -> list[tuple[str, float]]:
    """A histogram's buckets from per-bucket ``counts`` (``total`` in all, the last bucket +Inf)."""
    cumulative, buckets = 0, list[tuple[str, float]]()
    for bound, count in zip(bounds, counts, strict=False):  # counts may hold the +Inf bucket too
        cumulative += count
        buckets.append((repr(bound), cumulative))
    buckets.append(("+Inf", total))
    return buckets


# A per-model family: its kind, name and help, and what it reads of a model (None: no sample for
# that model: no engine report yet, no engine process, no drafting request).
_Read = Callable[[ServedModelView], float | None]
_Row = tuple[type[GaugeMetricFamily | CounterMetricFamily], str, str, _Read]
_G, _C = GaugeMetricFamily, CounterMetricFamily


def _report(model: ServedModelView) -> EngineStats | None:
    """The engine's last report while its process is attached (see the module's contract)."""
    engine = model.engine
    if engine.running_pid is None or engine.last_report_at is None:
        return None
    return engine.last_report


def _reported(read: Callable[[EngineStats], float]) -> _Read:
    """A value of the engine's last report (:func:`_report`)."""

    def value(model: ServedModelView) -> float | None:
        report = _report(model)
        return None if report is None else read(report)

    return value


def _report_age(model: ServedModelView) -> float | None:
    at = model.engine.last_report_at
    return None if at is None or _report(model) is None else time.monotonic() - at


def _rss(model: ServedModelView) -> int | None:
    pid = model.engine.running_pid
    return None if pid is None else resident_memory_bytes(pid)


def _drafting(read: Callable[[_DraftingState], int]) -> _Read:
    return lambda model: read(model.drafting) if model.drafting.requests else None


_ENGINE_ROWS: tuple[_Row, ...] = (
    (_G, "ovserve_engine_ready", "1 when the model's engine is loaded and making progress.",
     lambda model: 1.0 if model.engine.ready else 0.0),
    (_G, "ovserve_inflight_requests", "Engine requests the server is waiting on.", lambda model: model.engine.inflight),
    (_G, "ovserve_requests_waiting",
     "Admitted requests without a first token yet (queued in the engine or prefilling): the queue depth.",
     lambda model: model.admission.waiting),
    (_G, "ovserve_requests_running", "Admitted requests generating tokens.", lambda model: model.admission.running),
    # Batch requests are not in waiting/running (they never queue interactive requests out), but
    # they do load the engine: a router weighing replicas needs to see them.
    (_G, "ovserve_batch_requests_admitted",
     "Batch requests admitted to the model (in its engine or about to be); not counted in waiting or running.",
     lambda model: model.admission.batch),
    (_G, "ovserve_prompt_tokens_in_flight", "Prompt tokens of admitted, unfinished requests.",
     lambda model: model.admission.prompt_tokens),
    (_C, "ovserve_requests_rejected", "Requests refused by admission control (429).",
     lambda model: model.admission.rejected),
    (_C, "ovserve_engine_restarts", "Engine processes started again after the first (each attempt counts).",
     lambda model: model.engine.restarts),
    (_C, "ovserve_engine_start_failures", "Engine starts that failed (the pipeline could not load, the process died).",
     lambda model: model.engine.start_failures),
    (_C, "ovserve_engine_stalls", "Times the watchdog found the engine making no progress.",
     lambda model: model.engine.stalls),
    (_G, "ovserve_engine_requests", "Requests held by the pipeline (engine's last report).",
     _reported(lambda report: report.engine_requests)),
    (_G, "ovserve_engine_handles", "Generation handles the engine process still drives.",
     _reported(lambda report: report.active_requests + report.releasing_requests)),
    (_G, "ovserve_engine_scheduled_requests", "Requests the pipeline scheduled in its last step.",
     _reported(lambda report: report.scheduled_requests)),
    (_G, "ovserve_kv_cache_usage_ratio",
     "Fraction of the KV cache's blocks in use, 0-1 (engine's last report; the endpoint picker's KV-cache scorer).",
     _reported(lambda report: report.cache_usage)),
    (_G, "ovserve_kv_cache_bytes", "KV cache the engine has allocated.",
     _reported(lambda report: report.kv_cache_bytes)),
    (_G, "ovserve_engine_report_age_seconds", "Seconds since the engine last reported its state.", _report_age),
    (_G, "ovserve_engine_resident_memory_bytes", "Resident memory of the model's engine process (VmRSS at scrape).",
     _rss),
)  # fmt: skip
# Exported only while some model has served a drafting request: (name, help, DraftingStats field).
_DRAFTING_ROWS: tuple[_Row, ...] = tuple(
    (_C, name, documentation, _drafting(attrgetter(field)))
    for name, documentation, field in (
        ("ovserve_draft_accepted_tokens", "Draft tokens the main model accepted.", "accepted_tokens"),
        ("ovserve_draft_proposed_tokens", "Draft tokens proposed (num_assistant_tokens mode).", "drafted_tokens"),
        ("ovserve_draft_verify_steps", "Main-model verification steps of drafting requests.", "verify_steps"),
    )
)


def _cache_config(models: Iterable[ServedModelView]) -> Metric:
    """vLLM's ``cache_config_info`` for ovserve: 1, its labels the KV cache's geometry, for each model
    whose engine reports both (a VLM and a drafting pipeline do not measure their block count)."""
    family = GaugeMetricFamily(
        "ovserve_cache_config_info",
        "1 for the model's KV cache geometry: block_size (tokens per block), num_blocks (blocks it holds now; a "
        "cache grown on demand grows). Read by the endpoint picker's prefix-cache scorer.",
        labels=["model", "block_size", "num_blocks"],
    )
    for model in models:
        report = _report(model)
        if report is not None and report.block_size > 0 and report.num_blocks > 0:
            family.add_metric([model.name, str(report.block_size), str(report.num_blocks)], 1.0)
    return family


def _per_model(models: Iterable[ServedModelView], row: _Row) -> Metric:
    kind, name, documentation, read = row
    family = kind(name, documentation, labels=["model"])
    for model in models:
        value = read(model)
        if value is not None:
            family.add_metric([model.name], value)
    return family


class ScrapeCollector(Collector):
    """Scrape-time families: read from what the server process holds, never awaited."""

    def __init__(self) -> None:
        self._models: Iterable[ServedModelView] = ()
        self._loop_lag: LoopLagMonitor | None = None
        self._store: ResponseStoreView | None = None
        self._residency: ResidencyView | None = None
        self._files: FilesStoreView | None = None

    def watch(
        self,
        models: Iterable[ServedModelView],
        loop_lag: LoopLagMonitor,
        store: ResponseStoreView | None = None,
        residency: ResidencyView | None = None,
        files: FilesStoreView | None = None,
    ) -> None:
        """Read these at every scrape (``models`` is iterated each time: a config reload changes it)."""
        self._models = models
        self._loop_lag = loop_lag
        self._store = store
        self._residency = residency
        self._files = files

    def collect(self) -> Iterator[Metric]:
        models = list(self._models)
        yield from (_per_model(models, row) for row in _ENGINE_ROWS)
        yield _cache_config(models)
        if any(model.drafting.requests for model in models):
            yield from (_per_model(models, row) for row in _DRAFTING_ROWS)
        if self._residency is not None:
            yield from _residency_families(self._residency)
        store = self._store
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
        if self._files is not None:
            yield CounterMetricFamily(
                "ovserve_files_store_failures",
                "Files store operations (files, batches) that failed on a disk or database fault: answered 503.",
                value=self._files.faults.count,
            )
        lag = self._loop_lag
        if lag is not None:
            yield HistogramMetricFamily(
                "ovserve_event_loop_lag_seconds",
                f"How late the event loop woke from a {lag.interval * 1000:.0f} ms sleep.",
                buckets=_cumulative(LOOP_LAG_BUCKETS, lag.counts, lag.samples),
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
        durations.add_metric(
            name, _cumulative(LOAD_BUCKETS, counts.load_buckets, counts.load_count), counts.load_seconds
        )
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
