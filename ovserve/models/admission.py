"""Admission control: how much work one model takes before it tells clients to back off.

Contract: :meth:`Admission.admit` runs after a request is validated and tokenized and before any
engine work. It refuses with 429 + ``Retry-After`` (:class:`TooManyRequestsError`) when the model
already has ``max_waiting`` requests without a first token (queued in the engine or prefilling),
or when the request's prompt tokens would take the model past ``max_prompt_tokens`` in flight.
An admitted request holds a :class:`Ticket` until it ends, whatever way it ends; the ticket
moves it from waiting to running at its first token. ``waiting`` is the queue depth that
``/metrics`` exports (``ovserve_requests_waiting``) and a HorizontalPodAutoscaler scales on.

A batch request (``ovserve.dialects.openai.batches``) is admitted with ``batch=True``: it is never
refused and never counted in ``waiting``, ``running`` or the prompt tokens in flight, so batches
never push interactive requests into 429s; it is counted in ``batch`` instead. How many batch
requests reach the engine is the batch runner's share policy, which watches these counts
(:meth:`Admission.watch`: called after every change).

Everything here runs on the event loop: no locks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ovserve.errors import TooManyRequestsError

log = logging.getLogger(__name__)

# Seconds a refused client is asked to wait: about one engine step on a loaded CPU, rounded up.
RETRY_AFTER_S = 1


@dataclass
class Admission:
    model: str
    max_waiting: int
    max_prompt_tokens: int | None = None
    waiting: int = 0
    running: int = 0
    prompt_tokens: int = 0
    rejected: int = 0
    batch: int = 0  # admitted batch requests, not yet finished
    _watchers: list[Callable[[], None]] = field(default_factory=list, repr=False)

    @property
    def interactive(self) -> int:
        """Interactive requests admitted and not finished (waiting or running)."""
        return self.waiting + self.running

    def watch(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every change of the counts."""
        self._watchers.append(callback)

    def changed(self) -> None:
        for callback in self._watchers:
            callback()

    def admit(self, prompt_tokens: int, *, batch: bool = False) -> Ticket:
        if batch:
            self.batch += 1
            self.changed()
            return Ticket(self, 0, batch=True)
        if self.waiting >= self.max_waiting:
            self.rejected += 1
            raise TooManyRequestsError(
                f"model '{self.model}' has {self.waiting} requests waiting for the engine "
                f"(--max_queued_requests {self.max_waiting}); retry shortly",
                retry_after=RETRY_AFTER_S,
            )
        if self.max_prompt_tokens is not None and self.prompt_tokens + prompt_tokens > self.max_prompt_tokens:
            if self.prompt_tokens == 0:
                # Alone it would never fit: a 429 would make the client retry forever.
                raise TooManyRequestsError(
                    f"the prompt has {prompt_tokens} tokens, more than model '{self.model}' holds in flight "
                    f"(--max_prompt_tokens_in_flight {self.max_prompt_tokens})",
                    retry_after=RETRY_AFTER_S,
                )
            self.rejected += 1
            raise TooManyRequestsError(
                f"model '{self.model}' has {self.prompt_tokens} prompt tokens in flight and this request adds "
                f"{prompt_tokens} (--max_prompt_tokens_in_flight {self.max_prompt_tokens}); retry shortly",
                retry_after=RETRY_AFTER_S,
            )
        self.waiting += 1
        self.prompt_tokens += prompt_tokens
        self.changed()
        return Ticket(self, prompt_tokens)


class Ticket:
    """One admitted request's place in its model's counts; :meth:`release` exactly once."""

    def __init__(self, admission: Admission, prompt_tokens: int, *, batch: bool = False) -> None:
        self._admission = admission
        self._prompt_tokens = prompt_tokens
        self._batch = batch
        self._running = False
        self._released = False

    def started(self) -> None:
        """The first token arrived: the request left the queue."""
        if self._running or self._released or self._batch:
            return
        self._running = True
        self._admission.waiting -= 1
        self._admission.running += 1
        self._admission.changed()

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._batch:
            self._admission.batch -= 1
        elif self._running:
            self._admission.running -= 1
        else:
            self._admission.waiting -= 1
        self._admission.prompt_tokens -= self._prompt_tokens
        self._admission.changed()
