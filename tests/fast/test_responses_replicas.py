"""Responses behind a router, each replica with its own store (``memory`` or a file): response ids
carry the hint of the replica that stored them, and another replica answers a ``GET``, ``DELETE``
or ``previous_response_id`` of such an id with a 404 in OpenAI's error shape that names that
replica's hint and the two fixes (sticky routing, a shared store), whether the response exists or
not. With a shared store ids carry no hint: ``test_responses_postgres.py``."""

from __future__ import annotations

import json
import re
from typing import Any

from ovserve.dialects.openai.responses.ids import default_replica_name, hint_in, replica_hint
from tests.fast.harness import Served, fast_model
from tests.fast.scripted_engine import reply
from tests.openai_schema import validate

HINTED = re.compile(r"resp_[0-9a-f]{40}")


async def call(served: Served, method: str, path: str) -> tuple[int, Any]:
    async with served.client.request(method, path) as response:
        return response.status, await response.json()


def assert_elsewhere(status: int, body: Any, hint: str, param: str) -> None:
    assert status == 404, body
    validate(body, "ErrorResponse")
    error = body["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        param,
        "response_on_another_replica",
    )
    assert f"stored on replica {hint}" in error["message"]
    assert "sticky routing" in error["message"] and "--responses_store postgresql://" in error["message"]


async def test_another_replica_answers_a_404_that_names_where_the_response_is(serve) -> None:
    first = await serve(fast_model(reply("Hello")), replica_name="replica-a")
    second = await serve(fast_model(reply("Again")), replica_name="replica-b")
    status, made = await first.post("/v3/responses", {"input": "Hi"})
    assert status == 200 and made["store"] is True
    hint = replica_hint("replica-a")
    assert HINTED.fullmatch(made["id"]) and hint_in(made["id"]) == hint

    assert_elsewhere(*await call(second, "GET", f"/v3/responses/{made['id']}"), hint, "response_id")
    assert_elsewhere(*await call(second, "DELETE", f"/v3/responses/{made['id']}"), hint, "response_id")
    status, body = await second.post("/v3/responses", {"input": "More", "previous_response_id": made["id"]})
    assert_elsewhere(status, body, hint, "previous_response_id")
    assert "replica-a" not in str(body)  # the hint, never the replica's name

    # The same answer for an id of that replica that was never stored: it tells nothing the id did not.
    answers = []
    for response_id in (made["id"], f"resp_{hint}{'0' * 32}"):
        status, body = await call(second, "GET", f"/v3/responses/{response_id}")
        answers.append((status, json.dumps(body).replace(response_id, "<id>")))
    assert answers[0] == answers[1]

    # The replica that stored it still serves it, and continues it.
    assert await call(first, "GET", f"/v3/responses/{made['id']}") == (200, made)
    status, continued = await first.post("/v3/responses", {"input": "More", "previous_response_id": made["id"]})
    assert status == 200 and hint_in(continued["id"]) == hint


async def test_ids_this_replica_made_or_without_a_hint_are_looked_up_as_usual(serve) -> None:
    served = await serve(fast_model(reply("Hello")), replica_name="replica-a")
    for response_id in (f"resp_{replica_hint('replica-a')}{'0' * 32}", f"resp_{'0' * 32}", "resp_whatever"):
        status, body = await call(served, "GET", f"/v3/responses/{response_id}")
        assert status == 404 and body["error"]["code"] == "not_found", body
        assert body["error"]["message"].startswith(f"no stored response '{response_id}'")


async def test_the_default_replica_name_is_the_host_and_port_and_no_store_means_no_hint(serve) -> None:
    served = await serve(fast_model(reply("Hello")), port=8123)
    status, made = await served.post("/v3/responses", {"input": "Hi"})
    assert status == 200 and hint_in(made["id"]) == replica_hint(default_replica_name(8123))
    storeless = await serve(fast_model(reply("Hello")), responses_store="none")
    status, made = await storeless.post("/v3/responses", {"input": "Hi"})
    assert status == 200 and re.fullmatch(r"resp_[0-9a-f]{32}", made["id"])


async def test_a_replica_restarted_under_another_name_still_serves_what_its_file_holds(serve, tmp_path) -> None:
    store = str(tmp_path / "responses.db")
    before = await serve(fast_model(reply("Hello")), responses_store=store, replica_name="host:8000")
    status, made = await before.post("/v3/responses", {"input": "Hi"})
    assert status == 200 and made["store"] is True
    after = await serve(fast_model(reply("Again")), responses_store=store, replica_name="host:8001")  # a new port
    assert await call(after, "GET", f"/v3/responses/{made['id']}") == (200, made)
    status, continued = await after.post("/v3/responses", {"input": "More", "previous_response_id": made["id"]})
    assert status == 200 and hint_in(continued["id"]) == replica_hint("host:8001")
