"""The Responses API on the PostgreSQL store (``--responses_store postgresql://...``): two servers
on one database continue, read and delete each other's responses (what replicas behind a router
do; their ids carry no replica hint), a database that is down never costs a generation (stored ones
are a 503, counted), and a password in the URL shows nowhere: logs, answers, metrics.

The database is a real PostgreSQL server (the session's ``postgres`` fixture), a new database per test.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from typing import Any

import pytest

from ovserve.api import keys
from ovserve.dialects.openai.responses import store_postgres
from ovserve.dialects.openai.responses.store import OPEN_OWNER
from tests.conftest import free_port
from tests.fast.harness import Served, fast_model
from tests.fast.scripted_engine import reply
from tests.fast.test_responses_store_faults import store_failures
from tests.postgres import PostgresServer


async def call(served: Served, method: str, path: str) -> tuple[int, Any]:
    async with served.client.request(method, path) as response:
        return response.status, await response.json()


async def test_any_replica_continues_reads_and_deletes_a_response_another_one_stored(
    serve, postgres: PostgresServer
) -> None:
    url = postgres.new_database()
    first = await serve(fast_model(reply("Hello")), responses_store=url)
    second = await serve(fast_model(reply("Again")), responses_store=url)
    status, made = await first.post("/v3/responses", {"input": "Hi"})
    assert status == 200 and made["store"] is True
    assert re.fullmatch(r"resp_[0-9a-f]{32}", made["id"])  # no replica hint: any replica serves it

    status, continued = await second.post("/v3/responses", {"input": "More", "previous_response_id": made["id"]})
    assert status == 200 and continued["store"] is True
    assert await call(first, "GET", f"/v3/responses/{continued['id']}") == (200, continued)
    stored = await first.client.app[keys.RESPONSES].store.get(continued["id"], owner=OPEN_OWNER)
    assert stored is not None  # the whole conversation, across both servers: Hi, Hello, More, Again
    said = [json.dumps(item) for item in stored.conversation]
    assert len(said) == 4
    assert all(text in item for item, text in zip(said, ("Hi", "Hello", "More", "Again"), strict=True))

    assert (await call(second, "DELETE", f"/v3/responses/{made['id']}"))[0] == 200
    assert (await call(first, "GET", f"/v3/responses/{made['id']}"))[0] == 404
    assert await store_failures(first) == {"put": 0, "get": 0, "delete": 0, "housekeeping": 0}


async def test_a_database_that_is_down_costs_no_generation_and_is_counted(
    serve, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_postgres, "POOL_TIMEOUT_S", 0.5)  # the same bounded wait as the default 5 s, shorter
    url = f"postgresql://postgres:{postgres.password}@127.0.0.1:{free_port()}/postgres"  # nothing listens
    served = await serve(fast_model(reply("Hello")), responses_store=url)
    status, body = await served.post("/v3/responses", {"input": "Hi"})
    assert status == 200 and body["status"] == "completed" and body["store"] is False
    status, error = await call(served, "GET", f"/v3/responses/{body['id']}")
    assert status == 503 and error["error"]["message"]
    failures = await store_failures(served)
    assert (failures["housekeeping"], failures["put"], failures["get"]) == (1, 1, 1)


async def test_a_password_in_the_url_shows_in_no_log_answer_or_metric(
    serve, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(store_postgres, "POOL_TIMEOUT_S", 0.5)
    secret = f"pw-{secrets.token_hex(8)}"
    caplog.set_level(logging.DEBUG)  # every logger, psycopg's and its pool's included
    served = await serve(
        fast_model(reply("Hello")), responses_store=f"postgresql://ovserve:{secret}@no-such-host.invalid:5432/chat"
    )
    status, made = await served.post("/v3/responses", {"input": "Hi"})
    assert status == 200 and made["store"] is False
    said = [json.dumps(made)]
    status, body = await served.post("/v3/responses", {"input": "More", "previous_response_id": made["id"]})
    assert status == 503
    said.append(json.dumps(body))
    for method, path in [
        ("GET", f"/v3/responses/{made['id']}"),
        ("DELETE", f"/v3/responses/{made['id']}"),
        ("GET", "/metrics"),
        ("GET", "/v3/models"),
    ]:
        async with served.client.request(method, path) as response:
            said.append(await response.text())
    assert "responses store: housekeeping failed" in caplog.text  # the host was tried, and it was logged
    assert "no-such-host.invalid" in caplog.text  # the URL shows, without its password
    assert secret not in caplog.text
    assert not [text for text in said if secret in text]
