"""The batches' share of an engine: N batch requests alone, K while interactive requests wait or
run, and batch requests never count against the interactive queue (no 429 because of a batch)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from ovserve.dialects.openai.batches.share import BatchShare
from ovserve.errors import ModelNotFoundError, TooManyRequestsError
from ovserve.models.admission import Admission


@dataclass
class _Model:
    admission: Admission


class _Models:
    def __init__(self, admission: Admission) -> None:
        self.model: _Model | None = _Model(admission)

    def get(self, name: str) -> _Model:
        if self.model is None:
            raise ModelNotFoundError(f"model '{name}' is not served here", param="model")
        return self.model


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_batches_fill_an_idle_engine_and_step_aside_for_interactive_requests() -> None:
    admission = Admission("m", max_waiting=2)
    share = BatchShare(_Models(admission), alone=3, shared=1)  # type: ignore[arg-type]
    slots = [await share.acquire("m") for _ in range(3)]
    fourth = asyncio.create_task(share.acquire("m"))
    await _settle()
    assert not fourth.done()  # three is the idle share

    interactive = admission.admit(10)  # an interactive request arrives
    assert share.limit("m") == 1
    share.release(slots.pop())
    share.release(slots.pop())
    await _settle()
    assert not fourth.done()  # one batch request still inside: the shared limit is reached

    interactive.release()  # the interactive request is done: the batch may fill the engine again
    await _settle()
    assert fourth.done()
    assert share.limit("m") == 3


async def test_batch_requests_never_fill_the_interactive_queue() -> None:
    admission = Admission("m", max_waiting=2, max_prompt_tokens=100)
    tickets = [admission.admit(90, batch=True) for _ in range(50)]
    assert (admission.batch, admission.waiting, admission.prompt_tokens) == (50, 0, 0)
    first, second = admission.admit(50), admission.admit(50)  # the whole interactive queue is free
    with pytest.raises(TooManyRequestsError):
        admission.admit(1)
    for ticket in [*tickets, first, second]:
        ticket.started()
        ticket.release()
    assert (admission.batch, admission.waiting, admission.running, admission.prompt_tokens) == (0, 0, 0, 0)


async def test_the_shared_limit_holds_between_sparse_interactive_requests() -> None:
    """Interactive traffic at 1 request/s is mostly gaps between short requests: the batches keep to
    the shared limit for ``hold`` seconds after each one, instead of refilling the engine in every
    gap (which the next request would then meet in its first step)."""
    admission = Admission("m", max_waiting=2)
    share = BatchShare(_Models(admission), alone=3, shared=1, hold=0.3)  # type: ignore[arg-type]
    await share.acquire("m")
    interactive = admission.admit(10)
    interactive.started()
    interactive.release()  # a short interactive request came and went
    ended = asyncio.get_running_loop().time()
    admission.admit(5, batch=True).release()  # batch admissions do not extend the hold
    assert share.limit("m") == 1
    second = asyncio.create_task(share.acquire("m"))
    await _settle()
    assert not second.done()  # the gap after an interactive request is still shared
    await asyncio.wait_for(second, timeout=5)  # woken when the hold ends, without another change
    assert asyncio.get_running_loop().time() - ended >= 0.3
    assert share.limit("m") == 3


async def test_a_config_reload_that_replaces_the_model_moves_the_share_to_the_new_admission() -> None:
    """The share follows the model that serves now: interactive requests on a model a reload
    replaced shrink the batches (the old admission sees none of them), and slots taken on the old
    model go back to the old share, not the new one."""
    old = Admission("m", max_waiting=2)
    models = _Models(old)
    share = BatchShare(models, alone=3, shared=1)  # type: ignore[arg-type]
    on_old = await share.acquire("m")
    new = Admission("m", max_waiting=2)
    models.model = _Model(new)  # the reload swapped the model in
    interactive = new.admit(10)
    assert share.limit("m") == 1
    assert share.taken("m") == 0  # the new engine holds no batch request yet
    on_new = await share.acquire("m")
    share.release(on_old)  # a line that ran on the old engine ends
    assert share.taken("m") == 1
    interactive.release()
    share.release(on_new)
    assert (share.taken("m"), share.limit("m")) == (0, 3)


async def test_a_model_removed_mid_batch_keeps_its_share_until_its_lines_end() -> None:
    models = _Models(Admission("m", max_waiting=2))
    share = BatchShare(models, alone=2, shared=1)  # type: ignore[arg-type]
    slot = await share.acquire("m")
    models.model = None  # the reload removed it: the lines answer 404 through the envelope
    second = await share.acquire("m")
    share.release(slot)
    share.release(second)
    assert share.taken("m") == 0
    with pytest.raises(ModelNotFoundError):
        await BatchShare(models, alone=2, shared=1).acquire("m")  # type: ignore[arg-type]
