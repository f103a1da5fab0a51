"""The load of the scale-out rehearsal (scripts/rehearse_cluster.py): Responses conversations through
the router with the openai SDK, each turn continuing the last with ``previous_response_id``.

Contract: a conversation is a fixed list of inputs; each turn is sent until it is acknowledged
(an answer with ``store: true``, so the next turn may continue from it) or its deadline passes
(the conversation is then lost, and counted). Every attempt that did not end that way is counted
by kind -- an HTTP status (split by whether the turn needed the store to read its history, i.e.
had a previous id), a connection failure, a stream cut before its last event, an answer the store
could not keep -- with the replica that answered, when the router's header named it. Half the
turns stream (SSE), half are unary: a router can retry a unary request a dead replica never
answered, never a stream whose first bytes reached the client.

:func:`verify` then reads PostgreSQL itself: every acknowledged turn's stored conversation must be
exactly the inputs sent and the outputs received up to that turn, in order.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2  # the openai SDK's HTTP client: a stream cut mid-way raises its errors
import openai

from scripts.cluster import REPLICA_HEADER
from scripts.local_postgres import LocalPostgres

TURN_DEADLINE_S = 180.0


class StreamCut(Exception):
    """A stream ended without its last event (``response.completed`` or ``response.incomplete``)."""


@dataclass
class Turn:
    input: str
    response_id: str
    output: str
    replica: str | None


@dataclass
class Tally:
    started: float = field(default_factory=time.monotonic)
    answered: int = 0  # acknowledged turns
    output_tokens: int = 0
    by_replica: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)  # attempts that were not acknowledged, by kind
    failures_by_replica: Counter[str] = field(default_factory=Counter)
    failure_times: list[float] = field(default_factory=list)  # seconds since the load started
    lost: int = 0  # conversations given up
    completed: int = 0  # conversations with every turn acknowledged
    wall_s: float = 0.0

    def fail(self, kind: str, replica: str | None) -> None:
        self.failures[kind] += 1
        self.failures_by_replica[replica or "unknown"] += 1
        self.failure_times.append(round(time.monotonic() - self.started, 3))

    def summary(self) -> dict[str, Any]:
        wall = self.wall_s or (time.monotonic() - self.started)
        return {
            "conversations_completed": self.completed,
            "conversations_lost": self.lost,
            "turns_acknowledged": self.answered,
            "turns_by_replica": dict(sorted(self.by_replica.items())),
            "failed_attempts": dict(sorted(self.failures.items())),
            "failed_attempts_by_replica": dict(sorted(self.failures_by_replica.items())),
            "wall_s": round(wall, 2),
            "requests_per_s": round(self.answered / wall, 2) if wall else None,
            "output_tokens_per_s": round(self.output_tokens / wall, 1) if wall else None,
        }


@dataclass
class Load:
    router_url: str
    model: str = "tiny-llm"
    turns: int = 5
    concurrency: int = 32
    max_output_tokens: int = 16
    tally: Tally = field(default_factory=Tally)
    conversations: dict[int, list[Turn]] = field(default_factory=dict)
    stop: asyncio.Event = field(default_factory=asyncio.Event)  # set: no new conversation starts
    _progress: asyncio.Condition = field(default_factory=asyncio.Condition)
    _done: bool = False

    async def wait_answered(self, count: float) -> None:
        """Until ``count`` turns in all are acknowledged (a fault's trigger), or the load is over."""
        async with self._progress:
            await self._progress.wait_for(lambda: self.tally.answered >= count or self._done)

    async def _progressed(self) -> None:
        async with self._progress:
            self._progress.notify_all()

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.router_url}/v3", api_key="unused", max_retries=0, timeout=120)

    async def run(self, count: int) -> Tally:
        """``count`` conversations, ``concurrency`` at a time (fewer if :attr:`stop` is set first)."""
        self.tally.started = time.monotonic()
        client = self.client()
        indices = iter(range(count))  # shared by the workers: each takes the next conversation

        async def worker() -> None:
            for index in indices:
                if self.stop.is_set():
                    return
                await self._conversation(client, index)

        try:
            await asyncio.gather(*(worker() for _ in range(self.concurrency)))
        finally:
            self._done = True
            await self._progressed()
            await client.close()
        self.tally.wall_s = time.monotonic() - self.tally.started
        return self.tally

    async def _conversation(self, client: openai.AsyncOpenAI, index: int) -> None:
        turns: list[Turn] = []
        self.conversations[index] = turns
        for number in range(self.turns):
            text = f"conversation {index} turn {number}: tell me about the number {index * 31 + number}"
            turn = await self._turn(client, text, turns[-1].response_id if turns else None, (index + number) % 2 == 0)
            if turn is None:
                self.tally.lost += 1
                return
            turns.append(turn)
        self.tally.completed += 1

    async def _turn(self, client: openai.AsyncOpenAI, text: str, previous: str | None, stream: bool) -> Turn | None:
        deadline = time.monotonic() + TURN_DEADLINE_S
        params: dict[str, Any] = {
            "model": self.model,
            "input": text,
            "max_output_tokens": self.max_output_tokens,
            "extra_body": {"ignore_eos": True},  # the same work every turn, so runs compare
        }
        if previous is not None:
            params["previous_response_id"] = previous
        needs_store = "continuation" if previous else "fresh"
        while time.monotonic() < deadline:
            seen: list[str | None] = [None]  # the replica, as soon as the stream's headers name it
            replica: str | None = None
            pause = 0.25
            try:
                if stream:
                    response = await self._streamed(client, params, seen)
                    replica = seen[0]
                else:
                    raw = await client.responses.with_raw_response.create(**params)
                    replica = raw.headers.get(REPLICA_HEADER)
                    response = raw.parse()
            except openai.APIStatusError as exc:
                replica = exc.response.headers.get(REPLICA_HEADER)
                self.tally.fail(f"http {exc.status_code} ({needs_store})", replica)
                pause = float(exc.response.headers.get("retry-after", pause))
            except (openai.APIConnectionError, httpx2.HTTPError, StreamCut) as exc:
                kind = "stream cut" if stream and seen[0] else f"connection ({type(exc).__name__})"
                self.tally.fail(kind, seen[0])
            else:
                if response.store:
                    self.tally.answered += 1
                    self.tally.by_replica[replica or "unknown"] += 1
                    self.tally.output_tokens += response.usage.output_tokens if response.usage else 0
                    await self._progressed()
                    return Turn(text, response.id, response.output_text, replica)
                self.tally.fail("answered, not stored", replica)  # the store was down: send the turn again
            await asyncio.sleep(pause)  # a client's back-off before it sends the turn again
        return None

    async def _streamed(self, client: openai.AsyncOpenAI, params: dict[str, Any], seen: list[str | None]) -> Any:
        events = await client.responses.create(**params, stream=True)
        seen[0] = events.response.headers.get(REPLICA_HEADER)
        final = None
        async for event in events:
            if event.type in ("response.completed", "response.incomplete"):
                final = event.response
        if final is None:
            raise StreamCut(seen[0])
        return final


def _messages(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(role, text) of each message item of a stored conversation."""
    found = []
    for item in items:
        if item.get("type", "message") != "message":
            continue
        content = item["content"]
        text = content if isinstance(content, str) else "".join(part.get("text", "") for part in content)
        found.append((item["role"], text))
    return found


def verify(postgres: LocalPostgres, conversations: dict[int, list[Turn]]) -> dict[str, int]:
    """Each acknowledged turn's row in PostgreSQL against what the client sent and received."""
    ids = [turn.response_id for turns in conversations.values() for turn in turns]
    with postgres.connect() as db:
        rows = db.execute("SELECT id, conversation FROM ovserve_responses WHERE id = ANY(%s)", (ids,)).fetchall()
    stored = {str(row[0]): json.loads(str(row[1])) for row in rows}
    checked = missing = different = 0
    for turns in conversations.values():
        expected: list[tuple[str, str]] = []
        for turn in turns:
            expected += [("user", turn.input), ("assistant", turn.output)]
            checked += 1
            if turn.response_id not in stored:
                missing += 1
            elif _messages(stored[turn.response_id]) != expected:
                different += 1
    return {"turns_checked": checked, "turns_missing_from_store": missing, "turns_stored_differently": different}


async def readable(router_url: str, conversations: dict[int, list[Turn]]) -> dict[str, int]:
    """GET /v3/responses/{id} through the router for each conversation's last turn: any replica
    must answer it (the store is shared)."""
    statuses: Counter[int] = Counter()
    async with httpx.AsyncClient(base_url=f"{router_url}/v3", timeout=30) as http:
        for turns in conversations.values():
            if turns:
                statuses[(await http.get(f"/responses/{turns[-1].response_id}")).status_code] += 1
    return {f"http {status}": count for status, count in sorted(statuses.items())}
