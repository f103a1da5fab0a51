"""The Responses API while its store fails: generations are never lost, stored ones are a 503.

The store is a real SQLite file under ``tmp_path``; its faults are real (a database that cannot
grow is SQLite's own "database or disk is full"; a file where the store's directory was, a deleted
database file) -- see ``tests/store_faults.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ovserve.api import keys
from ovserve.dialects.openai.responses.store import ResponseStore
from tests.fast.harness import MODEL, Served, fast_model
from tests.fast.scripted_engine import reply
from tests.openai_schema import validate
from tests.store_faults import fill_disk, free_disk

# More than a page of input: storing its response needs new pages, which a full disk has not.
BIG = "Tell me about " + "x" * 6_000


def store_of(served: Served) -> ResponseStore:
    return served.client.app[keys.RESPONSES].store


async def get(served: Served, response_id: str) -> tuple[int, Any]:
    async with served.client.get(f"/v3/responses/{response_id}") as response:
        return response.status, await response.json()


async def store_failures(served: Served) -> dict[str, float]:
    async with served.client.get("/metrics") as response:
        text = await response.text()
    prefix = 'ovserve_responses_store_failures_total{operation="'
    return {
        line[len(prefix) :].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


async def test_a_full_disk_loses_no_generation_counts_the_failure_and_stores_again_once_cleared(
    serve, tmp_path: Path
) -> None:
    served = await serve(
        fast_model(reply("Hello", " there"), context_length=16_384), responses_store=str(tmp_path / "responses.db")
    )
    status, first = await served.post("/v3/responses", {"input": "Hi"})
    assert status == 200 and first["store"] is True
    fill_disk(store_of(served))

    status, body = await served.post("/v3/responses", {"input": BIG})
    assert status == 200, body
    validate(body, "Response")
    assert body["status"] == "completed" and body["output"][0]["content"][0]["text"] == "Hello there"
    assert body["id"].startswith("resp_") and body["store"] is False  # not kept, and it says so
    assert (await get(served, body["id"]))[0] == 404

    status, events = await served.post("/v3/responses", {"input": BIG, "stream": True})
    assert status == 200 and events[-1]["type"] == "response.completed"
    for event in events:
        validate(event, "ResponseStreamEvent")
    assert events[-1]["response"]["store"] is False and events[-1]["response"]["status"] == "completed"

    # A stored response is still read (and continued) on a full disk; the new one is not kept.
    status, continued = await served.post("/v3/responses", {"input": BIG, "previous_response_id": first["id"]})
    assert status == 200 and continued["store"] is False
    assert (await store_failures(served)) == {"put": 3, "get": 0, "delete": 0, "housekeeping": 0}

    free_disk(store_of(served))
    status, after = await served.post("/v3/responses", {"input": BIG})
    assert status == 200 and after["store"] is True
    assert await get(served, after["id"]) == (200, after)


async def test_a_store_that_cannot_be_reached_is_a_503_with_retry_after_and_recovers_by_itself(
    serve, tmp_path: Path
) -> None:
    directory = tmp_path / "store"
    served = await serve(fast_model(reply("Hi!")), responses_store=str(directory / "responses.db"))
    status, first = await served.post("/v3/responses", {"input": "Hello"})
    assert status == 200 and first["store"] is True
    shutil.rmtree(directory)
    directory.write_text("a file where the store's directory was")  # every store call fails now

    body = {"model": MODEL, "input": "Again", "previous_response_id": first["id"]}
    async with served.client.post("/v3/responses", json=body) as response:
        assert response.status == 503 and response.headers["Retry-After"] == "5"
        error = (await response.json())["error"]
    assert error["code"] == "store_unavailable" and error["param"] == "previous_response_id"
    assert error["type"] == "service_unavailable"
    assert len(served.engine.adds()) == 1  # nothing was generated for it
    for method in ("GET", "DELETE"):
        async with served.client.request(method, f"/v3/responses/{first['id']}") as response:
            assert response.status == 503 and response.headers["Retry-After"] == "5", method
            assert (await response.json())["error"]["param"] == "response_id"

    status, unstored = await served.post("/v3/responses", {"input": "Still answering?"})
    assert status == 200 and unstored["store"] is False and unstored["status"] == "completed"
    assert (await store_failures(served)) == {"put": 1, "get": 2, "delete": 1, "housekeeping": 0}

    directory.unlink()  # the disk is back: no restart needed
    status, stored = await served.post("/v3/responses", {"input": "And now?"})
    assert status == 200 and stored["store"] is True
    assert await get(served, stored["id"]) == (200, stored)
    assert (await get(served, first["id"]))[0] == 404  # it went with the directory


async def test_a_store_file_deleted_while_serving_is_recreated_by_the_next_response(serve, tmp_path: Path) -> None:
    path = tmp_path / "responses.db"
    served = await serve(fast_model(reply("Hi!")), responses_store=str(path))
    status, first = await served.post("/v3/responses", {"input": "Hello"})
    assert status == 200
    path.unlink()
    status, second = await served.post("/v3/responses", {"input": "Hello again"})
    assert status == 200 and second["store"] is True
    assert path.exists()
    assert await get(served, second["id"]) == (200, second)
    assert (await get(served, first["id"]))[0] == 404
    status, continued = await served.post("/v3/responses", {"input": "More", "previous_response_id": second["id"]})
    assert status == 200 and continued["store"] is True
    assert (await store_failures(served))["housekeeping"] == 1  # the lost responses are counted
