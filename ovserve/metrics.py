"""Prometheus metrics (prometheus-client), labelled by model: what operators graph for an LLM server.

Contract:

- One :class:`ServerMetrics` per app, with its own ``CollectorRegistry`` (no process-global
  state: tests and several apps in one process do not mix).
- Request-path metrics are recorded as events happen, through one :class:`RequestRecorder` per
  generation request: time to first token, queue time, inter-token latency, end-to-end latency,
  prompt and generated token counters, and exactly one outcome per request (its
  ``finish_reason``, or the error type, and the HTTP status); an audio request's seconds of audio
  (and characters, for speech) and its real-time factor; an image request's images, denoising
  steps and seconds per image.
- Everything else is *read* at scrape time from state the server process already holds, by
  ``ovserve.scrape.ScrapeCollector`` (``ServerMetrics.scrape``, which the app points at what it reads); collecting
  never waits on an engine, so a stuck engine cannot slow or empty ``/metrics``.
- The server process's own ``process_*`` metrics (resident memory, CPU, open files) come from
  prometheus-client's process collector, on Linux.

Names follow Prometheus conventions (``ovserve_`` prefix, base units, ``_total`` counters); the
README lists them next to the vLLM / llama.cpp metrics they correspond to.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

from ovserve.engine.memory import resident_memory_bytes
from ovserve.scrape import LOAD_BUCKETS, ResidencyRow, ScrapeCollector

# Re-exported: the served models and the tests import these from here.
__all__ = ["LOAD_BUCKETS", "RequestRecorder", "ResidencyRow", "ServerMetrics", "resident_memory_bytes"]

# Latency buckets (seconds): from a fast decode step on a small model to a multi-minute answer.
_TOKEN_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5)
_FIRST_TOKEN_BUCKETS = (0.02, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_REQUEST_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0)
# Real-time factor (processing seconds per audio second): below 1 is faster than real time; a
# tiny Whisper on 2 cores is ~0.02-0.1, a loaded server or a large model nears or passes 1.
_REAL_TIME_FACTOR_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
# Seconds per image: a tiny model on 2 cores makes one in well under a second, SD 1.5 at 512 x 512
# with 4 steps in a few seconds, 50 steps at 1024 x 1024 in minutes.
_IMAGE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0)
_MODEL = ("model",)  # the label of most families
# The audio operations, one real-time-factor series each.
AUDIO_OPERATIONS = ("transcribe", "translate", "speech")


@dataclass
class ServerMetrics:
    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))
    # The scrape-time families: the app points it (watch) at what it reads.
    scrape: ScrapeCollector = field(default_factory=ScrapeCollector)

    def __post_init__(self) -> None:
        # Every family is in this app's registry, and labelled by model unless it says otherwise.
        def histogram(
            name: str, documentation: str, buckets: Sequence[float], labels: Sequence[str] = _MODEL
        ) -> Histogram:
            return Histogram(name, documentation, labels, buckets=buckets, registry=self.registry)

        def counter(name: str, documentation: str, labels: Sequence[str] = _MODEL) -> Counter:
            return Counter(name, documentation, labels, registry=self.registry)

        self.time_to_first_token = histogram(
            "ovserve_time_to_first_token_seconds",
            "Time from a request's arrival until its first generated token.",
            _FIRST_TOKEN_BUCKETS,
        )
        self.queue_time = histogram(
            "ovserve_request_queue_time_seconds",
            "Time from a request's admission until its first token (waiting in the engine, then prefill).",
            _FIRST_TOKEN_BUCKETS,
        )
        self.inter_token_latency = histogram(
            "ovserve_inter_token_latency_seconds",
            "Time between generated tokens of one choice (an output of k tokens counts k gaps).",
            _TOKEN_BUCKETS,
        )
        self.request_latency = histogram(
            "ovserve_e2e_request_latency_seconds",
            "Time from a generation request's arrival until its answer is complete.",
            _REQUEST_BUCKETS,
        )
        self.prompt_tokens = counter("ovserve_prompt_tokens", "Prompt tokens of admitted requests.")
        self.generation_tokens = counter("ovserve_generation_tokens", "Tokens generated.")
        # vLLM's pair (prefix_cache_queries / prefix_cache_hits, in tokens): hits / queries is the
        # hit rate. Counted by the engine's model of its prefix cache (ovserve.engine.prefix_cache).
        self.prefix_cache_queries = counter(
            "ovserve_prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache (prefix caching on, text prompts).",
        )
        self.prefix_cache_hits = counter(
            "ovserve_prefix_cache_hits", "Prompt tokens served from the prefix cache instead of being prefilled."
        )
        self.requests = counter(
            "ovserve_requests",
            "Generation requests by outcome (the finish_reason of a completed request, else the error type) "
            "and HTTP status.",
            ("model", "endpoint", "outcome", "status"),
        )
        self.audio_input_seconds = counter(
            "ovserve_audio_input_seconds",
            "Seconds of audio transcribed or translated (operation: transcribe, translate).",
            ("model", "operation"),
        )
        self.speech_characters = counter("ovserve_speech_input_characters", "Characters of text synthesized to speech.")
        self.speech_seconds = counter("ovserve_speech_output_seconds", "Seconds of speech synthesized.")
        self.audio_real_time_factor = histogram(
            "ovserve_audio_real_time_factor",
            "Seconds the engine took per second of audio, by operation (transcribe, translate, speech): "
            "below 1 is faster than real time.",
            _REAL_TIME_FACTOR_BUCKETS,
            ("model", "operation"),
        )
        self.images = counter("ovserve_images_generated", "Images generated (edits included).")
        self.denoising_steps = counter(
            "ovserve_image_denoising_steps", "Denoising steps run; its rate is the image engines' steps per second."
        )
        self.image_seconds = histogram(
            "ovserve_image_seconds_per_image",
            "Engine seconds per image of a request (its engine time over its images).",
            _IMAGE_BUCKETS,
        )
        self.auth_failures = counter(
            "ovserve_auth_failures",
            "Requests refused for a missing or wrong API key, by reason (missing_key, invalid_key).",
            ("reason",),
        )
        for reason in ("missing_key", "invalid_key"):
            self.auth_failures.labels(reason=reason)  # exported as 0 before the first failure
        self.batch_requests = counter(
            "ovserve_batch_requests",
            "Batch requests finished, by outcome (completed: a 2xx; failed: any other status; expired: the "
            "batch's completion_window ran out first); its rate is the batches' throughput.",
            ("model", "outcome"),
        )
        self.batch_pending = Gauge(
            "ovserve_batch_requests_pending",
            "Requests of running batches not finished yet (queued for a batch slot or in the engine).",
            _MODEL,
            registry=self.registry,
        )
        self.registry.register(self.scrape)
        ProcessCollector(registry=self.registry)

    def batch_line(self, model: str, outcome: str) -> None:
        """One batch request finished (ovserve.dialects.openai.batches.runner)."""
        self.batch_requests.labels(model=model, outcome=outcome).inc()
        self.batch_pending.labels(model=model).dec()

    def batch_queued(self, model: str, count: int) -> None:
        """``count`` requests of a batch are left to run (at its start, or its resume)."""
        self.batch_pending.labels(model=model).inc(count)

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

    def images(self, images: int, steps: int, engine_seconds: float) -> None:
        """An image request made ``images`` images in ``steps`` denoising steps in ``engine_seconds``."""
        metrics, model = self._metrics, self.model
        metrics.images.labels(model=model).inc(images)
        metrics.denoising_steps.labels(model=model).inc(steps)
        if images:
            metrics.image_seconds.labels(model=model).observe(engine_seconds / images)

    def finished(self, outcome: str, status: int) -> None:
        """Once per request; ``outcome`` is a finish_reason or an error type."""
        if self._finished:
            return
        self._finished = True
        self._metrics.request_latency.labels(model=self.model).observe(time.monotonic() - self.arrived)
        labels = {"model": self.model, "endpoint": self._endpoint, "outcome": outcome, "status": str(status)}
        self._metrics.requests.labels(**labels).inc()
