#!/usr/bin/env python3
"""The scale-out rehearsal of issue 36 on this machine: replicas + PostgreSQL + HAProxy
(scripts/cluster.py), Responses conversations through the router (scripts/cluster_load.py), and
the faults, each measured and checked:

  conversations     C conversations of T turns (--conversations, --turns); with --kill_replica_at F,
                    one replica is SIGKILLed once a fraction F of the turns is acknowledged: the
                    requests in flight on it are counted, the router's retries and the failures
                    clients saw; 0 conversations may be lost, and every stored turn must equal what
                    was sent and received. The killed replica is started again and rejoins.
  --restart_postgres  PostgreSQL stopped for --postgres_down_s (10 s) under the same kind of load,
                    then started: no fresh generation may get a 5xx, no replica may exit, the store's
                    failure counter (/metrics) must grow, and the stored responses be readable after.
  --drain_replica   long streams in flight on one replica, then SIGTERM to it while new requests
                    keep coming: its streams must finish, it must take no new request, it exits 0.
  --throughput      the same conversation load on 1 replica and on --replicas, one after the other.

    .venv/bin/python scripts/rehearse_cluster.py --kill_replica_at 0.5 --restart_postgres --drain_replica \\
        --throughput --out docs/benchmarks/2026-11-28-scale-out.json

Exit status 1 if any check failed; the figures are printed as JSON and written to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.benchmarks.report import machine_info  # noqa: E402
from scripts.cluster import REPLICA_HEADER, Cluster, Replica, alive, cluster, descendants  # noqa: E402
from scripts.cluster_load import Load, readable, verify  # noqa: E402

failed: list[str] = []


def check(condition: bool, what: str) -> bool:
    if not condition:
        failed.append(what)
        print(f"FAILED: {what}", file=sys.stderr, flush=True)
    return condition


async def until(predicate: Any, timeout: float, interval: float = 0.05) -> float | None:
    """Seconds until ``predicate()`` held (polled without blocking the load), None on timeout."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if await asyncio.to_thread(predicate):
            return round(time.monotonic() - start, 3)
        await asyncio.sleep(interval)
    return None


def router_counters(running: Cluster) -> dict[str, int]:
    backend = running.router.stats()["BACKEND"]
    return {key: int(backend[key] or 0) for key in ("wretr", "wredis", "econ", "eresp")}


def counter_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    names = {
        "wretr": "router_retries",
        "wredis": "router_redispatches",
        "econ": "connect_errors",
        "eresp": "response_errors",
    }
    return {names[key]: after[key] - before[key] for key in before}


async def rejoin(running: Cluster, replica: Replica) -> dict[str, float | None]:
    """Start ``replica`` again; seconds until it is ready and until the router sends it work."""
    started = time.monotonic()
    running.replicas.spawn(replica)  # from the loop's (main) thread: see scripts/cluster.py
    await asyncio.to_thread(running.replicas.wait_ready, replica)
    ready = time.monotonic() - started
    up = await until(lambda: running.router.status()[replica.name] == "UP", 30)
    return {"ready_s": round(ready, 2), "router_up_after_ready_s": up}


# -- phases ---------------------------------------------------------------------------------------


async def conversations_phase(running: Cluster, options: argparse.Namespace) -> dict[str, Any]:
    load = Load(running.router.url, turns=options.turns, concurrency=options.concurrency)
    before = router_counters(running)
    kill: asyncio.Task[dict[str, Any]] | None = None
    if options.kill_replica_at is not None:
        target = options.conversations * options.turns * options.kill_replica_at
        kill = asyncio.create_task(_kill_when(running, load, target))
    tally = await load.run(options.conversations)
    result: dict[str, Any] = {"load": tally.summary(), "router": counter_delta(before, router_counters(running))}
    result["store"] = await asyncio.to_thread(verify, running.postgres, load.conversations)
    result["read_back_through_router"] = await readable(running.router.url, load.conversations)
    check(tally.lost == 0 and tally.completed == options.conversations, "conversations: every conversation completes")
    check(result["store"]["turns_missing_from_store"] == 0, "conversations: no acknowledged turn missing")
    check(result["store"]["turns_stored_differently"] == 0, "conversations: stored turns equal what was sent")
    check(set(result["read_back_through_router"]) == {"http 200"}, "conversations: every last turn readable")
    check(len(tally.by_replica) >= 2, "conversations: turns landed on several replicas")
    if kill is not None:
        result["kill"] = await _after_kill(running, load, await kill)
    return result


async def _kill_when(running: Cluster, load: Load, target: float) -> dict[str, Any]:
    """SIGKILL the replica with the most requests in flight once ``target`` turns are acknowledged;
    how the router took it."""
    await load.wait_answered(target)
    stats = running.router.stats()
    replica = max(running.replicas.members, key=lambda r: int(stats[r.name]["scur"] or 0))
    assert replica.process is not None
    engines = descendants(replica.process.pid)
    in_flight = int(stats[replica.name]["scur"] or 0)
    failures_before = sum(load.tally.failures.values())
    replica.process.send_signal(signal.SIGKILL)
    down = await until(lambda: running.router.status()[replica.name].startswith("DOWN"), 30)
    engines_gone = await until(lambda: not any(alive(pid) for pid in engines), 30)
    await asyncio.to_thread(replica.process.wait)
    check(down is not None, "kill: the router marks the killed replica down")
    check(engines_gone is not None, "kill: the killed replica's engines exit")
    return {
        "replica": replica.name,
        "at_turn": load.tally.answered,
        "requests_in_flight_on_it": in_flight,
        "router_marked_it_down_after_s": down,
        "its_engines_exited_after_s": engines_gone,
        "_failures_before": failures_before,
    }


async def _after_kill(running: Cluster, load: Load, kill: dict[str, Any]) -> dict[str, Any]:
    """Once the load is over: what failed after the kill, and the replica started again."""
    replica = next(r for r in running.replicas.members if r.name == kill["replica"])
    kill["client_failures_since_the_kill"] = sum(load.tally.failures.values()) - kill.pop("_failures_before")
    # Requests the router still tried on it after the kill: its connection errors (none before).
    kill["router_connect_errors_on_it"] = int(running.router.stats()[replica.name]["econ"] or 0)
    kill["rejoin"] = await rejoin(running, replica)
    return kill


def store_failures(replica: Replica) -> float:
    text = httpx.get(f"{replica.url}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "ovserve_responses_store_failures"
        for sample in family.samples
        if sample.name.endswith("_total")
    )


async def postgres_phase(running: Cluster, options: argparse.Namespace) -> dict[str, Any]:
    load = Load(running.router.url, turns=options.turns, concurrency=options.concurrency)
    members = running.replicas.members
    failures_before = sum(await asyncio.gather(*(asyncio.to_thread(store_failures, r) for r in members)))
    before = router_counters(running)
    run = asyncio.create_task(load.run(100_000))  # until stopped: conversations keep starting
    await load.wait_answered(options.concurrency * 2)
    stopped_at = load.tally.answered
    await asyncio.to_thread(running.postgres.stop)
    down_started = time.monotonic()
    await asyncio.sleep(options.postgres_down_s)  # the outage itself: its length is the fault
    answered_while_down = load.tally.answered - stopped_at
    running.postgres.start(wait=False)  # from the loop's (main) thread: see scripts/cluster.py
    await asyncio.to_thread(running.postgres.wait_ready)
    down_for = time.monotonic() - down_started
    back_at = load.tally.answered
    await load.wait_answered(back_at + options.concurrency * 2)  # the load goes on after the restart
    load.stop.set()
    tally = await run
    failures_after = sum(await asyncio.gather(*(asyncio.to_thread(store_failures, r) for r in members)))
    fresh_5xx = sum(n for kind, n in tally.failures.items() if kind.startswith("http 5") and "fresh" in kind)
    result: dict[str, Any] = {
        "postgres_down_s": round(down_for, 2),
        "turns_acknowledged_while_down": answered_while_down,
        "load": tally.summary(),
        "router": counter_delta(before, router_counters(running)),
        "store_failures_counted": failures_after - failures_before,
        "fresh_generations_5xx": fresh_5xx,
        "replicas_running_after": sum(r.running() for r in members),
    }
    result["store"] = await asyncio.to_thread(verify, running.postgres, load.conversations)
    result["read_back_through_router"] = await readable(running.router.url, load.conversations)
    check(fresh_5xx == 0, "postgres: no 5xx on a fresh generation")
    check(result["store_failures_counted"] > 0, "postgres: store failures counted on /metrics")
    check(result["replicas_running_after"] == len(members), "postgres: no replica exited")
    check(tally.lost == 0, "postgres: no conversation lost")
    check(result["store"]["turns_missing_from_store"] == 0, "postgres: no acknowledged turn missing")
    check(result["store"]["turns_stored_differently"] == 0, "postgres: stored turns equal what was sent")
    check(set(result["read_back_through_router"]) == {"http 200"}, "postgres: stored responses readable after")
    return result


async def drain_phase(running: Cluster, options: argparse.Namespace) -> dict[str, Any]:
    """Long streams, then SIGTERM to the replica that holds the first; new requests meanwhile."""
    http = httpx.AsyncClient(base_url=f"{running.router.url}/v3", timeout=300)
    body = {"model": "tiny-llm", "max_output_tokens": options.drain_tokens, "ignore_eos": True, "stream": True}
    streams: list[dict[str, Any]] = []
    first = asyncio.Event()

    async def stream(index: int) -> None:
        record: dict[str, Any] = {"replica": None, "events": 0, "completed": False}
        streams.append(record)
        async with http.stream("POST", "/responses", json={**body, "input": f"drain stream {index}"}) as answer:
            record["replica"] = answer.headers.get(REPLICA_HEADER)
            async for line in answer.aiter_lines():
                if line.startswith("event: "):
                    record["events"] += 1
                    first.set()
                    record["completed"] |= line in ("event: response.completed", "event: response.incomplete")

    tasks = [asyncio.create_task(stream(index)) for index in range(options.drain_streams)]
    await first.wait()
    await until(lambda: sum(bool(s["replica"]) for s in streams) == len(streams), 60)
    name = next(s["replica"] for s in streams if s["replica"])
    replica = next(r for r in running.replicas.members if r.name == name)
    assert replica.process is not None
    on_it = [s for s in streams if s["replica"] == name]
    replica.process.send_signal(signal.SIGTERM)
    sigterm_at = time.monotonic()
    new_work: Counter[str] = Counter()
    exited = asyncio.create_task(asyncio.to_thread(replica.process.wait))

    async def keep_sending() -> None:  # new unary requests for as long as the replica drains
        while not exited.done():
            try:
                answer = await http.post(
                    "/responses", json={"model": "tiny-llm", "input": "new", "max_output_tokens": 4}
                )
                new_work[f"{answer.headers.get(REPLICA_HEADER)} http {answer.status_code}"] += 1
            except httpx.HTTPError as exc:
                new_work[type(exc).__name__] += 1

    senders = [asyncio.create_task(keep_sending()) for _ in range(4)]
    down = await until(lambda: running.router.status()[name].startswith("DOWN"), 30)
    code = await exited
    exit_s = time.monotonic() - sigterm_at
    await asyncio.gather(*tasks, *senders, return_exceptions=True)
    await http.aclose()
    result = {
        "replica": name,
        "streams_in_flight_on_it": len(on_it),
        "its_streams_completed": sum(s["completed"] for s in on_it),
        "router_marked_it_down_after_s": down,
        "it_exited_after_s": round(exit_s, 2),
        "exit_code": code,
        "new_requests_during_drain": dict(sorted(new_work.items())),
    }
    check(len(on_it) > 0 and result["its_streams_completed"] == len(on_it), "drain: the replica's streams finish")
    check(code == 0, "drain: the replica exits 0")
    check(not any(key.startswith(f"{name} ") and key.endswith("200") for key in new_work), "drain: no new work on it")
    check(all(key.endswith("http 200") for key in new_work), "drain: every new request answered")
    result["rejoin"] = await rejoin(running, replica)
    return result


async def throughput_phase(options: argparse.Namespace, replicas: int) -> dict[str, Any]:
    with cluster(options.model_path, replicas) as running:
        load = Load(running.router.url, turns=options.turns, concurrency=options.concurrency)
        tally = await load.run(options.throughput_conversations)
        check(tally.lost == 0, f"throughput ({replicas}): no conversation lost")
        return {"replicas": replicas, **tally.summary()}


async def rehearse(options: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with cluster(options.model_path, options.replicas, keep_logs=options.logs) as running:
        figures["conversations"] = await conversations_phase(running, options)
        if options.restart_postgres:
            figures["postgres_restart"] = await postgres_phase(running, options)
        if options.drain_replica:
            figures["drain"] = await drain_phase(running, options)
        pids = running.pids()
    figures["stray_processes_after_stop"] = [pid for pid in pids if alive(pid)]
    check(not figures["stray_processes_after_stop"], "no process left after the cluster stopped")
    if options.throughput:
        figures["throughput"] = [await throughput_phase(options, n) for n in sorted({1, options.replicas})]
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=24, help="conversations in flight at once")
    parser.add_argument("--kill_replica_at", type=float, help="SIGKILL the busiest replica at this fraction of turns")
    parser.add_argument("--restart_postgres", action="store_true")
    parser.add_argument("--postgres_down_s", type=float, default=10.0)
    parser.add_argument("--drain_replica", action="store_true")
    parser.add_argument("--drain_streams", type=int, default=6)
    parser.add_argument("--drain_tokens", type=int, default=600, help="tokens each drained stream generates")
    parser.add_argument("--throughput", action="store_true", help="1 replica against --replicas, same load")
    parser.add_argument("--throughput_conversations", type=int, default=100)
    parser.add_argument("--model_path", type=Path, default=ROOT / "models" / "tiny-llm")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--logs", type=Path, help="keep the rehearsal's logs (router, replicas, PostgreSQL) here")
    options = parser.parse_args()
    figures = asyncio.run(rehearse(options))
    settings = {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(options).items()}
    document = {"machine": machine_info(), "settings": settings, "figures": figures, "failed_checks": failed}
    print(json.dumps(document, indent=2))
    if options.out:
        options.out.write_text(json.dumps(document, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
