"""One request's hold on its model, for the routes that are not a generation :class:`~ovserve.core.job.Job`
(embeddings, rerank, transcriptions, translations, speech).

Contract: :func:`admitted` takes a place in the model's admission (a 429 when its queue is full,
before any work) and gives it back however the request ends; :func:`leased` then holds the model's
engine, loading it first when it was unloaded (waiting until ``deadline``, event-loop time, or a
503), and gives it back when the block ends: the model is never unloaded for idleness, evicted nor
unloaded through the API while a request holds it, and its idle timer counts from the release.
:func:`engine_work` is both, with the work bounded by the deadline (TimeoutError after it). These
are the same admission and lease a generation job takes (``Job.admit``, ``Job.take_engine``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

from ovserve.metrics import RequestRecorder
from ovserve.models.admission import Ticket
from ovserve.models.residency import Lease
from ovserve.models.served import ServedModel


@contextlib.contextmanager
def admitted(model: ServedModel, prompt_tokens: int, recorder: RequestRecorder | None) -> Iterator[Ticket]:
    """A place in ``model``'s admission for the block (429 when it has none left)."""
    ticket = model.admission.admit(prompt_tokens)
    if recorder is not None:
        recorder.admitted(prompt_tokens)
    try:
        yield ticket
    finally:
        ticket.release()


@contextlib.asynccontextmanager
async def leased(
    model: ServedModel, deadline: float | None, *, keep_alive: float | None = None
) -> AsyncIterator[Lease]:
    """``model``'s engine held for the block, loaded for it if need be (503 past ``deadline``).
    ``keep_alive``: how long the model stays loaded after its last request (Ollama's field)."""
    lease = await model.lease(deadline, keep_alive=keep_alive)
    try:
        yield lease
    finally:
        lease.release()


@contextlib.asynccontextmanager
async def engine_work(
    model: ServedModel,
    prompt_tokens: int,
    recorder: RequestRecorder | None,
    deadline: float | None,
    *,
    keep_alive: float | None = None,
) -> AsyncIterator[Lease]:
    """Admission, then the engine held, then the block by ``deadline`` (TimeoutError after it)."""
    with admitted(model, prompt_tokens, recorder):
        async with leased(model, deadline, keep_alive=keep_alive) as lease:
            async with asyncio.timeout_at(deadline):
                yield lease
