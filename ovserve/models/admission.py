"""Admission control: how much work one model takes before it tells clients to back off.

Contract: :meth:`Admission.admit` runs after a request is validated and tokenized and before any
engine work. It refuses with 429 + ``Retry-After`` (:class:`TooManyRequestsError`) when the model
already has ``max_waiting`` requests without a first token (queued in the engine or prefilling),
or when the request's prompt tokens would take the model past ``max_prompt_tokens`` in flight.
An admitted request holds a :class:`Ticket` until it ends, whatever way it ends; the ticket
moves it from waiting to running at its first token. ``waiting`` is the queue depth that
``/metrics`` exports (``ovserve_requests_waiting``) and a HorizontalPodAutoscaler scales on.

Everything here runs on the event loop: no locks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

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

    def admit(self, prompt_tokens: int) -> Ticket:
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
        return Ticket(self, prompt_tokens)


class Ticket:
    """One admitted request's place in its model's counts; :meth:`release` exactly once."""

    def __init__(self, admission: Admission, prompt_tokens: int) -> None:
        self._admission = admission
        self._prompt_tokens = prompt_tokens
        self._running = False
        self._released = False

    def started(self) -> None:
        """The first token arrived: the request left the queue."""
        if self._running or self._released:
            return
        self._running = True
        self._admission.waiting -= 1
        self._admission.running += 1

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._running:
            self._admission.running -= 1
        else:
            self._admission.waiting -= 1
        self._admission.prompt_tokens -= self._prompt_tokens
