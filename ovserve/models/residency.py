"""Each served model's residency: whether its engine runs, what it costs, and who is using it.

A :class:`Residency` is one model's policy (pinned, loaded on demand, idle timeout, and the
``keep_alive`` a client last asked for), its memory figures and the requests that hold it;
:class:`Lease` is one request's hold on a model's engine.
``ovserve.models.manager`` takes every decision (loads, unloads, evictions); this module only
keeps the state those decisions read, so that the API and ``/metrics`` can show it.

Memory figures (bytes), see :meth:`Residency.estimate` and :meth:`Residency.accounted`:

- the *estimate* of a load: the highest resident memory the model's engine reached during its last
  residency (sampled every :data:`SAMPLE_INTERVAL_S` while it ran, and right after its warm-up), or,
  before its first load, :func:`static_estimate`;
- what the budget *counts* for a resident model: the estimate it was placed with, or its peak so
  far when that is higher.

How long a model stays loaded once idle (:meth:`Residency.unload_after`): never when pinned; else
the ``keep_alive`` of the last request that sent one (Ollama's field, in seconds: 0 unloads it as
soon as no request holds it, a negative value never), which lasts until the model unloads; else
its configured idle timeout.

Everything here runs on the event loop: no locks.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ovserve.clock import SYSTEM_CLOCK, Clock
from ovserve.metrics import LOAD_BUCKETS
from ovserve.settings.schema import ModelSettings

# How often the manager samples the engines' memory and looks for idle models.
SAMPLE_INTERVAL_S = 0.5
# An engine process before its model: Python, OpenVINO and openvino_genai, the tokenizer models
# (the tiny demo model's engine holds 138 MiB with 3 MB of files).
ENGINE_OVERHEAD_BYTES = 160 << 20
# The CPU plugin repacks weights into its own layout: resident memory holds about twice the files
# (the 0.5B int8 benchmark model: 348 MB of files, 900 MB resident after its warm-up).
WEIGHTS_FACTOR = 2


class ModelState(enum.Enum):
    """What ``GET /v3/models`` says of a model (``ovserve.extension.state``)."""

    LOADED = "loaded"  # its engine serves
    LOADING = "loading"  # a load (or a restart after a death) is under way
    UNLOADING = "unloading"  # its engine is being stopped; a request waits, then loads it again
    UNLOADED = "unloaded"  # no engine; the next request loads it
    FAILED = "failed"  # its last load failed; retried after a growing delay


def files_bytes(directory: Path | None) -> int:
    """The size of the files under ``directory`` (symbolic links followed), 0 when there is none."""
    if directory is None or not directory.is_dir():
        return 0
    total = 0
    for path in directory.rglob("*"):
        try:
            if path.is_file():
                total += path.stat().st_size
        except OSError:
            continue
    return total


def static_estimate(settings: ModelSettings) -> int:
    """A model's memory before it was ever measured: an engine process, its weights as the CPU
    plugin holds them, and its KV caches (``cache_size``, and the draft's)."""
    weights = files_bytes(settings.path) + files_bytes(settings.draft_path)
    # A draft model has a KV cache of its own: draft_cache_size, else the main model's (OVMS's inheritance).
    draft_kv_gb = settings.draft_scheduler_settings().cache_size if settings.draft_path is not None else 0
    kv_gb = settings.scheduler.cache_size + draft_kv_gb
    return ENGINE_OVERHEAD_BYTES + WEIGHTS_FACTOR * weights + (kv_gb << 30)


@dataclass
class ResidencyCounters:
    """A model's load, unload and eviction counts, kept by name (they outlive a config reload that
    replaces the model) for ``/metrics``."""

    loads: int = 0
    unloads: dict[str, int] = field(default_factory=dict)  # by reason: idle, keep_alive, evicted, api, config
    evictions: int = 0
    load_buckets: list[int] = field(default_factory=lambda: [0] * len(LOAD_BUCKETS))
    load_count: int = 0
    load_seconds: float = 0.0

    def loaded(self, seconds: float) -> None:
        self.loads += 1
        self.load_count += 1
        self.load_seconds += seconds
        for index, bound in enumerate(LOAD_BUCKETS):
            if seconds <= bound:
                self.load_buckets[index] += 1
                break

    def unloaded(self, reason: str) -> None:
        self.unloads[reason] = self.unloads.get(reason, 0) + 1
        if reason == "evicted":
            self.evictions += 1


@dataclass
class Residency:
    """One model's residency: the state the manager's decisions read and write."""

    pinned: bool = False
    lazy: bool = False  # unloaded at start: the first request loads it
    idle_timeout: float | None = None  # unload after this long without a request (None: never)
    # A client's keep_alive (seconds; negative: never unload), overriding idle_timeout until the
    # model unloads or a config reload applies a policy again; None: none was sent.
    keep_alive: float | None = None
    estimate_before_measure: int = 0  # static_estimate, until a residency measured it
    measured: int | None = None  # peak resident memory of its last residency
    peak: int | None = None  # peak resident memory of this residency (None: not measured yet)
    reserved: int = 0  # what the budget counted for it when it was placed
    resident: bool = False  # its memory counts against the budget (loaded, loading or restarting)
    retiring: bool = False  # removed from the config: it unloads once its requests are done
    waiting: int = 0  # requests waiting for it to load
    # Of those, the ones waiting for the load under way: an unload lets them be served first.
    load_waiters: int = 0
    active: int = 0  # requests using its engine
    last_used: float | None = None  # wall clock of the last request's start or end
    last_used_at: float = field(init=False)  # the same on the clock's monotonic scale, for the idle timer
    counters: ResidencyCounters = field(default_factory=ResidencyCounters)
    # The tasks that drive it: a load on demand, an unload, the keep-started loop of a model
    # loaded at start (retries a failing start in the background).
    load_task: asyncio.Task[None] | None = None
    unload_task: asyncio.Task[None] | None = None
    background: asyncio.Task[None] | None = None
    placing: bool = False  # its load waits for room in the budget
    # Set while no request uses its engine nor waits for the load under way: what an unload awaits.
    no_active: asyncio.Event = field(default_factory=asyncio.Event)
    clock: Clock = SYSTEM_CLOCK  # the idle timer's and keep_alive's (ovserve.clock)

    def __post_init__(self) -> None:
        self.last_used_at = self.clock.monotonic()
        self.no_active.set()

    def touch(self) -> None:
        self.last_used = self.clock.wall()
        self.last_used_at = self.clock.monotonic()

    def idle_for(self) -> float:
        return self.clock.monotonic() - self.last_used_at

    def unload_after(self) -> float | None:
        """Seconds without a request after which it unloads (None: never): see the module doc."""
        if self.pinned:
            return None
        if self.keep_alive is not None:
            return None if self.keep_alive < 0 else self.keep_alive
        return self.idle_timeout

    def expires_at(self) -> float | None:
        """The wall clock at which it unloads if no request comes (None: never). While requests
        hold it or wait for it the timer does not run: counted from now."""
        after = self.unload_after()
        if after is None:
            return None
        return self.clock.wall() + (after if self.busy else max(0.0, after - self.idle_for()))

    @property
    def busy(self) -> bool:
        """Requests hold it or wait for it: never unloaded for idleness nor evicted."""
        return self.active > 0 or self.waiting > 0

    @property
    def changing(self) -> bool:
        """A load or an unload is under way."""
        return any(task is not None and not task.done() for task in (self.load_task, self.unload_task))

    def estimate(self) -> int:
        """What a load of this model is expected to take (see the module doc): while it is loaded,
        the peak of this residency so far."""
        for figure in (self.peak, self.measured):
            if figure is not None:
                return figure
        return self.estimate_before_measure

    def accounted(self) -> int:
        """What the budget counts for it now: 0 unless resident; else what it was placed with, or
        more once it grew past that. Not less: an engine's memory right after its warm-up is far
        below what its first real requests make it (the 0.5B benchmark model: 183 MiB at ready,
        913 MiB after a first chat request), and a model may grow back to its last peak."""
        if not self.resident:
            return 0
        return max(self.reserved, self.peak or 0)

    def observe(self, rss: int | None) -> None:
        """A sample of its engine's resident memory."""
        if rss is not None:
            self.peak = rss if self.peak is None else max(self.peak, rss)

    def freed(self) -> None:
        """Its engine exited: the memory it reached is the next load's estimate."""
        if self.peak is not None:
            self.measured = self.peak
        self.peak = None
        self.resident = False
        self.reserved = 0
        self.keep_alive = None  # a client's keep_alive lasts one residency, as Ollama's runner holds it

    @property
    def unloadable(self) -> bool:
        """No request uses its engine nor waits for the load under way."""
        return self.active == 0 and self.load_waiters == 0

    def hold(self) -> None:
        self.active += 1
        self.no_active.clear()
        self.touch()

    def let_go(self) -> None:
        self.active -= 1
        self.touch()
        self._settle()

    def join_load(self) -> None:
        """A request waits for the load under way (an unload now waits for it to be served)."""
        self.load_waiters += 1
        self.no_active.clear()

    def leave_load(self) -> None:
        self.load_waiters -= 1
        self._settle()

    def _settle(self) -> None:
        if self.unloadable:
            self.no_active.set()


class Lease:
    """One request's hold on a model's engine: it keeps the model from being unloaded for
    idleness or evicted, and an unload through the API waits for it. :meth:`release` exactly once
    (idempotent), however the request ended; ``on_release`` (the manager's) then runs.
    ``waited_ns``: how long the request waited for the engine (a load included), for Ollama's
    ``load_duration``."""

    def __init__(
        self, residency: Residency, *, waited_ns: int = 0, on_release: Callable[[], None] | None = None
    ) -> None:
        self._residency = residency
        self._released = False
        self._on_release = on_release
        self.waited_ns = waited_ns
        residency.hold()

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._residency.let_go()
        if self._on_release is not None:
            self._on_release()
