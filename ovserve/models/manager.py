"""Which models' engines run: loads on demand, idle unloads, a memory budget with LRU eviction,
pinning, and the models a config reload adds and removes.

Contract:

- A request takes a :class:`~ovserve.models.residency.Lease` on its model before any engine work
  (:meth:`ResidencyManager.lease`) and releases it when it ends, however it ends. While a model is
  leased (or a request waits for it) it is never unloaded for idleness nor evicted; an unload
  through the API waits for the requests using it. A request that finds its model unloaded,
  unloading or loading on demand waits (until its deadline) for the one load all such requests
  share: the first one starts it. An unload (through the API, or a reload removing the model)
  that comes while requests wait for a load lets the load finish, serves them, then unloads.
- A load failure is every waiting request's 503 (``model_load_failed``, with the reason and
  ``Retry-After``); the model is loaded again by a request that comes after the engine's backoff.
- A model loaded at start (the default, and every ``pinned`` one) keeps today's lifetime: its
  engine starts with the server and a failing start is retried in the background; a request
  meanwhile is a 503 at once. ``pinned`` models are never unloaded. Once unloaded (idle, evicted,
  through the API, by a ``keep_alive``), any model loads on its next request.
- A model unloads once idle past ``Residency.unload_after()``: its idle timeout, or the
  ``keep_alive`` a request set (:meth:`ResidencyManager.lease`; Ollama's field, ignored for a
  pinned model); a ``keep_alive`` of 0 unloads it as the last request holding it ends.
- The budget (``--models_memory_budget``): a load is placed only when its estimate fits next to
  what the resident models take (``Residency.accounted``); otherwise idle, unpinned, resident
  models are unloaded least recently used first. With nothing to evict the load waits for room;
  a request whose deadline comes first gets a 503 ``model_capacity_exceeded``. A model whose
  estimate exceeds the whole budget is refused at once (``model_too_large_for_budget``). The
  budget's arithmetic, evictions and waiting for room are ``ovserve.models.budget``'s.

Everything runs on the event loop; decisions are taken between awaits, and one lock serialises
placements (what to evict for which load).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from ovserve.clock import SYSTEM_CLOCK, Clock
from ovserve.engine.client import EngineState
from ovserve.errors import (
    ConflictError,
    ModelNotFoundError,
    OvserveError,
    ServiceUnavailableError,
)
from ovserve.metrics import ResidencyRow
from ovserve.models.budget import MemoryBudget, mib
from ovserve.models.residency import (
    SAMPLE_INTERVAL_S,
    Lease,
    ModelState,
    Residency,
    ResidencyCounters,
    static_estimate,
)
from ovserve.models.served import ModelRegistry, ServedModel
from ovserve.settings.schema import ServerSettings
from ovserve.ticks import sleep_to_next_tick

log = logging.getLogger(__name__)

_STATES = {
    EngineState.READY: ModelState.LOADED,
    EngineState.LOADING: ModelState.LOADING,
    EngineState.RESTARTING: ModelState.LOADING,
    EngineState.FAILED: ModelState.FAILED,
    EngineState.UNLOADED: ModelState.UNLOADED,
    EngineState.STOPPED: ModelState.UNLOADED,
}


def _running(task: asyncio.Task[Any] | None) -> bool:
    return task is not None and not task.done()


class ResidencyManager:
    """The residency of every model of a registry, the models a reload removed included until they
    have drained."""

    def __init__(
        self,
        models: ModelRegistry,
        settings: ServerSettings,
        *,
        measure: Callable[[ServedModel], int | None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.models = models
        self.clock = clock  # the idle timers' and the sampler's (a test's clock moves by hand)
        self._lazy_default = settings.lazy_load
        self._idle_default = settings.idle_unload_timeout
        # Reads an engine's resident memory (the fast tests' scripted engines have no process).
        self.measure = measure or (lambda model: model.engine.resident_bytes())
        self._managed: dict[int, ServedModel] = {}  # by id(): a reload may serve two models of one name
        self._counters: dict[str, ResidencyCounters] = {}
        self.memory = MemoryBudget(settings.models_memory_budget, self._managed.values)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ticker: asyncio.Task[None] | None = None
        for model in models:
            self.adopt(model)

    # -- the models ---------------------------------------------------------------------------

    def adopt(self, model: ServedModel) -> None:
        """Manage ``model`` (before it is started): its policy from its settings and the server's."""
        model.leases = self
        model.residency = Residency(
            estimate_before_measure=static_estimate(model.settings),
            counters=self._counters.setdefault(model.name, ResidencyCounters()),
            clock=self.clock,
        )
        self.apply_policy(model)
        self._managed[id(model)] = model

    def apply_policy(self, model: ServedModel) -> None:
        """Pinned, loaded on demand, idle timeout: the model's own options, else the server's."""
        settings, residency = model.settings, model.residency
        lazy = settings.lazy_load if settings.lazy_load is not None else self._lazy_default
        idle = settings.idle_unload_timeout if settings.idle_unload_timeout is not None else self._idle_default
        residency.pinned = settings.pinned
        residency.lazy = lazy and not settings.pinned
        residency.idle_timeout = None if settings.pinned or not idle else idle
        residency.keep_alive = None  # the operator's policy, (re)applied, replaces a client's

    @property
    def budget(self) -> int | None:
        """--models_memory_budget (bytes); None: no budget."""
        return self.memory.limit

    def in_use(self) -> int:
        """What the resident models take, as the budget counts it."""
        return self.memory.in_use()

    # -- lifetime -----------------------------------------------------------------------------

    def start(self) -> list[asyncio.Task[None]]:
        """Start the engines of the models loaded at start (pinned ones first) and the sampler;
        the tasks of those starts (each ends once its engine is ready)."""
        loading: list[asyncio.Task[None]] = []
        models = sorted(self._managed.values(), key=lambda model: not model.residency.pinned)
        for model in models:
            if model.residency.lazy:
                model.engine.state = EngineState.UNLOADED
            elif self.memory.reserve_at_start(model):
                loading.append(self._start_in_background(model))
        self._ticker = asyncio.create_task(self._sample(), name="residency")
        return loading

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        for task in list(self._tasks):
            task.cancel()
        models = list(self._managed.values())
        await asyncio.gather(*(model.engine.close() for model in models), return_exceptions=True)

    def _task(self, coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """A task the manager owns: cancelled at close, its failure retrieved even when no request
        awaits it any more (the requests that did were told)."""
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            if not isinstance(error, OvserveError):
                log.error("%s failed", task.get_name(), exc_info=error)

    def _start_in_background(self, model: ServedModel) -> asyncio.Task[None]:
        model.residency.background = task = self._task(self._keep_started(model), f"load-{model.name}")
        return task

    async def _keep_started(self, model: ServedModel) -> None:
        """A model loaded at start: its engine's start, retried in the background until it works."""
        await model.engine.keep_started()
        self._loaded(model, model.engine.load_seconds)

    def _loaded(self, model: ServedModel, seconds: float) -> None:
        residency = model.residency
        residency.counters.loaded(seconds)
        residency.observe(self.measure(model))
        residency.last_used_at = self.clock.monotonic()  # the idle timer starts now

    # -- what a request sees ------------------------------------------------------------------

    def _on_demand(self, model: ServedModel) -> bool:
        """Whether a request may start a load of this model now (no background start drives it)."""
        residency, engine = model.residency, model.engine
        if _running(residency.background) or engine.retrying:
            return False
        return engine.state in (EngineState.UNLOADED, EngineState.STOPPED, EngineState.FAILED)

    def unavailable(self, model: ServedModel) -> ServiceUnavailableError | None:
        """The 503 a request to ``model`` gets at once, before any work; None when it is loaded or
        will be loaded for the request (it then waits in :meth:`lease`)."""
        engine = model.engine
        if engine.ready or model.residency.changing:
            return None
        if self._on_demand(model) and engine.backoff_remaining() <= 0:
            return None
        return engine.not_ready_error()

    async def lease(self, model: ServedModel, deadline: float | None, *, keep_alive: float | None = None) -> Lease:
        """Hold ``model``'s engine for one request, loading it first when it is not loaded (see the
        module doc); ``deadline`` (event-loop time) bounds the wait: then a 503. ``keep_alive``
        (seconds, negative: never), once the engine is held, is how long the model stays loaded
        after its last request: :meth:`keep_alive`."""
        residency = model.residency
        residency.waiting += 1
        residency.touch()
        started = time.perf_counter_ns()
        try:
            await self._until_loaded(model, deadline)
            if keep_alive is not None:
                self.keep_alive(model, keep_alive)
            waited = time.perf_counter_ns() - started
            return Lease(residency, waited_ns=waited, on_release=lambda: self._released(model))
        finally:
            residency.waiting -= 1

    def keep_alive(self, model: ServedModel, seconds: float) -> None:
        """A request's ``keep_alive``: ``model`` unloads ``seconds`` after its last request ends (0:
        as it ends; negative: never), until it unloads or a config reload applies its policy again.
        A pinned model stays loaded whatever a client asks: ignored (logged at DEBUG)."""
        if model.residency.pinned:
            log.debug("model %r is pinned: keep_alive %g s ignored", model.name, seconds)
            return
        model.residency.keep_alive = seconds

    def _released(self, model: ServedModel) -> None:
        """A request let go of ``model``: room may have been made, and a model with nothing left to
        wait for (``keep_alive`` 0) unloads now rather than at the sampler's next tick."""
        self.capacity_changed()
        self._unload_if_expired(model)

    async def _until_loaded(self, model: ServedModel, deadline: float | None) -> None:
        residency, engine = model.residency, model.engine
        while True:
            if residency.retiring:  # removed from the config: it serves only what it can serve now
                if engine.ready:
                    return
                raise ModelNotFoundError(f"model '{model.name}' was removed from the configuration", param="model")
            if _running(residency.unload_task):
                assert residency.unload_task is not None
                await self._wait(model, residency.unload_task, deadline)
                continue
            if engine.ready:
                return
            if not _running(residency.load_task):
                error = self.unavailable(model)
                if error is not None:
                    raise error
                residency.load_task = self._task(self._load(model), f"load-{model.name}")
            assert residency.load_task is not None
            residency.join_load()
            try:
                await self._wait(model, residency.load_task, deadline)
            finally:
                residency.leave_load()
            if engine.ready:
                # Served even when an unload arrived during the load: it waits for this request
                # (the lease is taken before anything else runs on the loop).
                return

    async def _wait(self, model: ServedModel, task: asyncio.Task[None], deadline: float | None) -> None:
        """Wait for a load or an unload (shared: leaving does not cancel it) and raise its failure."""
        try:
            async with asyncio.timeout_at(deadline):
                await asyncio.wait({task})
        except TimeoutError:
            raise self._timeout_error(model) from None
        if task.cancelled():
            raise ServiceUnavailableError(
                f"model '{model.name}' was unloaded while it loaded; retry the request", code="model_unloaded"
            )
        error = task.exception()
        if error is not None:
            raise error

    def _timeout_error(self, model: ServedModel) -> ServiceUnavailableError:
        if model.residency.placing:
            return self.memory.full_error(model)
        return ServiceUnavailableError(
            f"model '{model.name}' is still loading; retry shortly",
            code="model_loading",
            retry_after=model.engine.retry_after(),
        )

    # -- loads --------------------------------------------------------------------------------

    async def _load(self, model: ServedModel) -> None:
        """One load on demand: room in the budget, then one engine start."""
        residency = model.residency
        await self.memory.place(model, lambda victim: self.unload(victim, "evicted"))
        started = time.monotonic()
        try:
            await model.engine.load_once()
        except BaseException:
            residency.freed()
            self.capacity_changed()
            raise
        seconds = time.monotonic() - started
        self._loaded(model, seconds)
        log.info("model %r loaded on demand in %.1f s (%s)", model.name, seconds, self._memory_note(model))

    def capacity_changed(self) -> None:
        """Room may have been made (a request ended, a model unloaded): wake the loads that wait."""
        self.memory.changed()

    # -- unloads ------------------------------------------------------------------------------

    async def unload(self, model: ServedModel, reason: str) -> None:
        """Unload ``model`` (``reason``: idle, keep_alive, evicted, api, config) once the requests using it have
        finished; a request arriving meanwhile waits and loads it again. A pinned model is only
        unloaded when the config removes it (409 otherwise)."""
        residency = model.residency
        if residency.pinned and reason != "config":
            raise ConflictError(f"model '{model.name}' is pinned: it stays loaded", code="model_pinned")
        if not _running(residency.unload_task):
            idle = model.engine.state in (EngineState.UNLOADED, EngineState.STOPPED) and not residency.changing
            if idle and not residency.resident and not _running(residency.background):
                return
            residency.unload_task = self._task(self._unloading(model, reason), f"unload-{model.name}")
        assert residency.unload_task is not None
        await asyncio.wait({residency.unload_task})

    async def expire(self, model: ServedModel) -> None:
        """Ollama's unload request (``keep_alive`` 0 and nothing to generate): unload ``model`` now
        when no request holds it (returns once its engine has exited), else as the last one ends
        (returns at once). A pinned model is a 409, as through the API."""
        residency = model.residency
        if residency.pinned:
            raise ConflictError(f"model '{model.name}' is pinned: it stays loaded", code="model_pinned")
        if residency.busy:
            residency.keep_alive = 0.0
            return
        await self.unload(model, "keep_alive")

    async def _unloading(self, model: ServedModel, reason: str) -> None:
        residency = model.residency
        for task in (residency.load_task, residency.background):
            if not _running(task):
                continue
            assert task is not None
            if task is residency.load_task and residency.load_waiters:
                # Requests wait for this load: they are served, then the model unloads (as it
                # does after the requests in flight); cancelling would fail every one of them.
                await asyncio.wait({task})
                continue
            task.cancel()
            await asyncio.wait({task})
        if not residency.unloadable:
            log.info(
                "unloading model %r (%s) once its %d request(s) finish",
                model.name, reason, residency.active + residency.load_waiters,
            )  # fmt: skip
        # A load waiter leaves the count just before it holds the engine: look again after each wake.
        while not residency.unloadable:
            await residency.no_active.wait()
        held = residency.resident or model.engine.running_pid is not None
        note = self._memory_note(model)
        await model.engine.unload()
        residency.freed()
        self.capacity_changed()
        if held:
            residency.counters.unloaded(reason)
            log.info("model %r unloaded (%s; it held %s)", model.name, reason, note)

    def _memory_note(self, model: ServedModel) -> str:
        rss = self.measure(model)
        return f"{mib(rss) if rss is not None else 'unknown memory'}; {self.memory.usage()}"

    async def _sample(self) -> None:
        """Every :data:`SAMPLE_INTERVAL_S`: each running engine's memory, and the models idle past
        their timeout unloaded."""
        while True:
            await sleep_to_next_tick(SAMPLE_INTERVAL_S, self.clock)  # with the other housekeeping (ovserve.ticks)
            for model in list(self._managed.values()):
                if model.engine.ready:
                    model.residency.observe(self.measure(model))
                self._unload_if_expired(model)

    def _unload_if_expired(self, model: ServedModel) -> None:
        """Start unloading ``model`` if it has been idle past ``Residency.unload_after()``."""
        if not self._idle_expired(model):
            return
        residency = model.residency
        reason = "keep_alive" if residency.keep_alive is not None else "idle"
        residency.unload_task = self._task(self._unloading(model, reason), f"unload-{model.name}")

    def _idle_expired(self, model: ServedModel) -> bool:
        residency = model.residency
        timeout = residency.unload_after()
        if timeout is None or residency.busy or residency.changing or residency.retiring:
            return False
        return residency.resident and model.engine.ready and residency.idle_for() >= timeout

    # -- config reloads -----------------------------------------------------------------------

    def add(self, model: ServedModel, replacing: ServedModel | None = None) -> None:
        """Serve a model a config reload added (or changed: ``replacing`` is the model it replaces,
        which :meth:`retire` drains). Loaded at once unless it loads on demand, after the model it
        replaces has unloaded."""
        self.adopt(model)
        self.models.add(model)
        residency = model.residency
        if residency.lazy:
            model.engine.state = EngineState.UNLOADED
            return
        before = replacing.residency.unload_task if replacing is not None else None
        residency.load_task = self._task(self._load_after(model, before), f"load-{model.name}")

    def load_soon(self, model: ServedModel) -> None:
        """Start loading ``model`` now, without a request (a reload pinned it)."""
        if not _running(model.residency.load_task):
            model.residency.load_task = self._task(self._load_after(model, None), f"load-{model.name}")

    async def _load_after(self, model: ServedModel, before: asyncio.Task[None] | None) -> None:
        if before is not None:
            await asyncio.wait({before})
        try:
            await self._load(model)
        except OvserveError:
            if model.residency.pinned:  # a pinned model is kept trying, as at start
                self.memory.reserve_at_start(model)
                self._start_in_background(model)
            raise

    def retire(self, model: ServedModel) -> asyncio.Task[None]:
        """A model a reload removed or replaced (already out of the registry): it finishes the
        requests that hold or wait for it, then unloads and is forgotten."""
        model.residency.retiring = True
        task = self._task(self._retiring(model), f"retire-{model.name}")
        model.residency.unload_task = task
        return task

    async def _retiring(self, model: ServedModel) -> None:
        residency = model.residency
        while residency.busy or _running(residency.load_task):
            # A request's end wakes it; a waiter's leaving does not.
            await self.memory.wait_for_change(SAMPLE_INTERVAL_S)
        await self._unloading(model, "config")
        self._managed.pop(id(model), None)
        model.close()

    # -- what the API and /metrics show -----------------------------------------------------

    def state(self, model: ServedModel) -> ModelState:
        residency = model.residency
        if _running(residency.unload_task):
            return ModelState.UNLOADING
        if _running(residency.load_task):
            return ModelState.LOADING
        return _STATES[model.engine.state]

    def settled(self, model: ServedModel) -> bool:
        """Not in the middle of a start at boot or of a restart (server readiness waits for those)."""
        state = model.engine.state
        if state is EngineState.RESTARTING:
            return False
        if state in (EngineState.LOADING, EngineState.STOPPED):
            return _running(model.residency.load_task) or self._on_demand(model)
        return True

    def available(self, model: ServedModel) -> bool:
        """Loaded, or loaded by the next request that names it."""
        return model.engine.ready or self.unavailable(model) is None

    def describe(self, model: ServedModel) -> dict[str, Any]:
        """The model's ``ovserve`` object in ``GET /v3/models``."""
        residency = model.residency
        state = self.state(model)
        memory = self.measure(model) if state is ModelState.LOADED else None
        load = model.engine.load_progress()  # the engine's own load stage, while a start is under way
        return {
            "state": state.value,
            "pinned": residency.pinned,
            "lazy_load": residency.lazy,
            "idle_unload_timeout": residency.idle_timeout,
            "memory_bytes": memory,
            "memory_estimate_bytes": residency.estimate(),
            "last_used": int(residency.last_used) if residency.last_used is not None else None,
            "load_stage": load[0].value if load else None,
            "load_stage_seconds": round(load[1], 1) if load else None,
        }

    def metric_rows(self) -> Iterator[ResidencyRow]:
        """Every model the registry serves, for ``/metrics``."""
        for model in self.models:
            residency = model.residency
            yield ResidencyRow(model.name, self.state(model).value, residency.estimate(), residency.counters)
