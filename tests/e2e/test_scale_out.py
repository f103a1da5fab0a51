"""Scale-out end to end: two replicas share one Responses store (a real PostgreSQL) behind a real
HAProxy (deploy/haproxy/ovserve.cfg, as scripts/cluster.sh runs it), and the openai SDK talks to
the router only.

A conversation continues across replicas (each turn's ``previous_response_id`` was made by
whichever replica the router picked), and when a replica is SIGKILLed the router takes it out of
rotation within its check interval and the conversation goes on on the other replica, from a
turn the dead one answered. The router's ``X-Ovserve-Replica`` header names the replica of each
answer; its statistics say when it marked a replica down and what it sent there.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import psycopg
import pytest

from scripts.cluster import REPLICA_HEADER, Router, wait_until
from tests.conftest import Server, start_server
from tests.postgres import PostgresServer

# The template checks every second and after a failure every 250 ms, down after 2 failures:
# a dead replica is out in about 1.25 s. The bound leaves room for a loaded machine.
DOWN_WITHIN_S = 5.0


class ScaleOut:
    def __init__(self, replicas: list[Server], router: Router, store_url: str) -> None:
        self.replicas = replicas
        self.router = router
        self.store_url = store_url
        self.names = {f"replica{index + 1}": server for index, server in enumerate(replicas)}

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.router.url}/v3", api_key="unused", max_retries=0, timeout=120)

    def turn(self, client: openai.OpenAI, text: str, previous: str | None) -> tuple[str, str]:
        """One turn through the router: (response id, the replica that answered)."""
        raw = client.responses.with_raw_response.create(
            model="tiny-llm", input=text, previous_response_id=previous, temperature=0, max_output_tokens=8
        )
        response = raw.parse()
        assert response.store is True
        return response.id, raw.headers[REPLICA_HEADER]

    def stored_inputs(self, response_id: str) -> list[str]:
        """The user messages of a response's stored conversation, read from PostgreSQL itself."""
        with psycopg.connect(self.store_url) as db:
            row = db.execute("SELECT conversation FROM ovserve_responses WHERE id = %s", (response_id,)).fetchone()
        assert row is not None
        return [item["content"] for item in json.loads(row[0]) if item.get("role") == "user"]


@pytest.fixture(scope="module")
def scale_out(tiny_llm: Path, postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScaleOut]:
    store_url = postgres.new_database()
    workdir = tmp_path_factory.mktemp("scale-out")
    # Both start at once (each server waits for its own model), then the router checks them.
    replicas = [start_server(workdir, tiny_llm, "--responses_store", store_url, wait=False) for _ in range(2)]
    router = Router(workdir, [(f"replica{index + 1}", server.port) for index, server in enumerate(replicas)])
    try:
        for server in replicas:
            server.wait_ready()
        router.start()
        yield ScaleOut(replicas, router, store_url)
    finally:
        router.stop()
        for server in replicas:
            server.stop()


def test_a_conversation_continues_on_whichever_replica_the_router_picks(scale_out: ScaleOut) -> None:
    client = scale_out.client()
    inputs, previous, answered_by = [], None, []
    for number in range(6):
        inputs.append(f"turn {number}: say something")
        previous, replica = scale_out.turn(client, inputs[-1], previous)
        answered_by.append(replica)
    # leastconn takes the replicas in turn when both are idle: the turns alternate.
    assert set(answered_by) == {"replica1", "replica2"}, answered_by
    assert scale_out.stored_inputs(previous) == inputs
    for server in scale_out.replicas:  # the last turn is readable on each replica directly
        assert server.client().responses.retrieve(previous).id == previous


def test_a_killed_replica_leaves_the_rotation_and_the_conversation_goes_on(scale_out: ScaleOut) -> None:
    client = scale_out.client()
    inputs = ["before the kill"]
    previous, victim = scale_out.turn(client, inputs[0], None)
    survivor = next(name for name in scale_out.names if name != victim)

    scale_out.names[victim].process.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    assert wait_until(lambda: scale_out.router.status()[victim].startswith("DOWN"), timeout=30, interval=0.02)
    assert time.monotonic() - killed_at < DOWN_WITHIN_S, scale_out.router.stats()[victim]
    tried_on_victim = scale_out.router.stats()[victim]["stot"], scale_out.router.stats()[victim]["econ"]

    for number in range(4):  # continuing from a turn the dead replica made
        inputs.append(f"after the kill {number}")
        previous, replica = scale_out.turn(client, inputs[-1], previous)
        assert replica == survivor
    assert scale_out.stored_inputs(previous) == inputs
    # Marked down, it is not even tried: no request and no connection attempt since.
    victim_stats = scale_out.router.stats()[victim]
    assert (victim_stats["stot"], victim_stats["econ"]) == tried_on_victim
    assert scale_out.router.status()[survivor] == "UP"
