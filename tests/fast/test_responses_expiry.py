"""``--responses_store_max_age`` through the API: a stored response older than the bound is a 404
exactly as an unknown id, for ``GET``, ``DELETE`` and ``previous_response_id``. The store runs on the
test's clock (``clock``), so no test waits for an age to pass; the store's own tests cover both
backends and the deletion (``tests/unit/test_response_store.py``)."""

from __future__ import annotations

import json
from typing import Any

from ovserve.clock import ManualClock
from tests.fast.harness import Served, fast_model
from tests.fast.scripted_engine import reply


async def call(served: Served, method: str, path: str) -> tuple[int, str]:
    async with served.client.request(method, path) as response:
        return response.status, await response.text()


def unknown_answer(status: int, body: Any, response_id: str) -> tuple[int, str]:
    """An answer with the id it names taken out, to compare with another id's."""
    return status, (body if isinstance(body, str) else json.dumps(body)).replace(response_id, "<id>")


async def test_a_response_past_max_age_is_a_404_as_an_unknown_id(serve, clock: ManualClock) -> None:
    # Two seconds: the clock wakes every timer of the app on its way (the loop-lag probe's 0.1 s ticks).
    served = await serve(fast_model(reply("Hello")), clock=clock, responses_store_max_age_s=2.0)
    status, made = await served.post("/v3/responses", {"input": "Hi"})
    assert status == 200 and made["store"] is True
    await clock.advance(1.9)
    assert (await call(served, "GET", f"/v3/responses/{made['id']}"))[0] == 200
    await clock.advance(0.2)

    unknown = "resp_" + "0" * 32
    for method in ("GET", "DELETE"):
        expired = unknown_answer(*await call(served, method, f"/v3/responses/{made['id']}"), made["id"])
        assert expired[0] == 404 and expired == unknown_answer(
            *await call(served, method, f"/v3/responses/{unknown}"), unknown
        )
    answers = []
    for response_id in (made["id"], unknown):
        status, body = await served.post("/v3/responses", {"input": "More", "previous_response_id": response_id})
        answers.append(unknown_answer(status, body, response_id))
    assert answers[0][0] == 404 and answers[0] == answers[1]
