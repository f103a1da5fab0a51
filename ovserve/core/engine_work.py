"""One request's work on one model: its place in the model's admission and its hold on the model's
engine, the same for every kind of request (a generation :class:`~ovserve.core.job.Job`, an
embedding, a rerank, a transcription, a speech, a tokenizer call, a load).

Contract, in the order the request envelope (``ovserve.api.envelope``) calls it:

- :meth:`ModelWork.admit` takes a place in the model's admission before any engine work (a 429
  when its queue is full) and ties the request's metrics to it;
- :meth:`ModelWork.take_engine` holds the model's engine, loading it first when it was unloaded
  (waiting until ``deadline``, event-loop time, or a 503); while held the model is never
  unloaded for idleness, evicted nor unloaded through the API, and its idle timer counts from the
  release. A kind of work may get its input ready first (:meth:`ModelWork.before_engine`: an
  upload decoded inside the admission, so only admitted requests hold decoded audio);
- :meth:`ModelWork.release` gives both back, exactly once however the request ended (idempotent).

Work that needs only the tokenizer, which lives in the server process (``holds_engine`` False),
takes neither: it answers whether the model is loaded or not, and loads nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import ClassVar

from ovserve.metrics import RequestRecorder
from ovserve.models.admission import Ticket
from ovserve.models.residency import Lease
from ovserve.models.served import ServedModel


@dataclass(kw_only=True)
class ModelWork:
    """A validated request's work on ``model``: see the module doc for the order of its steps."""

    # Whether the work runs in the model's engine (False: the tokenizer only).
    holds_engine: ClassVar[bool] = True

    model: ServedModel
    # Set by admit(): the request's place in its model's admission counts, and its metrics.
    ticket: Ticket | None = field(default=None, init=False)
    recorder: RequestRecorder | None = field(default=None, init=False)
    # Set by take_engine(): the hold on the model's engine (loaded for it if need be).
    lease: Lease | None = field(default=None, init=False)
    # Set by a dialect before take_engine(): how long the model stays loaded after this request
    # (Ollama's keep_alive, seconds; negative: never); None: the model's own policy.
    keep_alive: float | None = field(default=None, init=False)
    # perf_counter when the engine was held: the start of the engine's part (audio's real-time factor).
    engine_started: float = field(default=0.0, init=False)

    @property
    def admission_tokens(self) -> int:
        """The prompt tokens this work adds to its model's admission (``--max_prompt_tokens_in_flight``)."""
        return 0

    @property
    def outcome(self) -> str:
        """What /metrics counts a completed request as."""
        return "stop"

    def admit(self, recorder: RequestRecorder | None = None, *, batch: bool = False) -> None:
        """Take a place in the model's queue (429 when it is full), before any engine work; a batch
        request's place is never refused and leaves the interactive counts alone (``ovserve.models.admission``)."""
        self.recorder = recorder
        if not self.holds_engine:
            return
        tokens = self.admission_tokens
        self.ticket = self.model.admission.admit(tokens, batch=batch)
        if recorder is not None:
            recorder.admitted(tokens)

    async def before_engine(self) -> None:
        """Input work done inside the admission, before the engine is held (none by default)."""

    async def take_engine(self, deadline: float | None) -> None:
        """After :meth:`admit`: :meth:`before_engine`, then hold the model's engine, waiting (until
        ``deadline``, event-loop time) for it to load when it was unloaded; a 503 when it cannot be
        loaded in time."""
        await self.before_engine()
        if self.holds_engine:
            self.lease = await self.model.lease(deadline, keep_alive=self.keep_alive)
        self.engine_started = time.perf_counter()

    def started(self) -> None:
        """The engine's first output arrived: the request leaves its model's queue."""
        if self.ticket is not None:
            self.ticket.started()

    def release(self) -> None:
        """Give the place and the engine back; idempotent, called however the request ended."""
        if self.ticket is not None:
            self.ticket.release()
        if self.lease is not None:
            self.lease.release()

    def engine_seconds(self) -> float:
        """Seconds since the engine was held."""
        return time.perf_counter() - self.engine_started


@dataclass(kw_only=True)
class TokenizerWork(ModelWork):
    """Work of the model's tokenizer only, which lives in the server process: no admission, no
    engine, no load (tokenize, detokenize, count_tokens answer while the model is unloaded)."""

    holds_engine: ClassVar[bool] = False


@dataclass(kw_only=True)
class LoadWork(ModelWork):
    """A request that only loads its model (``POST /v3/models/{name}/load``, Ollama's chat or
    generate with nothing to generate): holding the engine loads it; there is nothing else to do."""


@dataclass(kw_only=True)
class UnloadWork(ModelWork):
    """A request that unloads its model (Ollama's ``keep_alive: 0`` with nothing to generate): it
    holds nothing, so that the unload it asks for is not held up by its own lease."""

    holds_engine: ClassVar[bool] = False
