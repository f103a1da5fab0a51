"""Models on demand with real engine processes (issue 25's acceptance): models loaded by their first
request under a memory budget that fits two, the least recently used one evicted (its process
exits), a burst served by one load, an unload that lets a stream finish, a model bigger than the
budget refused, an idle model unloaded with its memory back, and config.json edited while a client
streams. Engine processes are counted as the server's children; every wait is for an event, with
a deadline."""

from __future__ import annotations

import concurrent.futures
import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ovserve.engine.memory import resident_memory_bytes
from tests.conftest import Server, contention_factor, graph_config, launch_server, wait_for

SLOW_TOKENS = 60  # a request with this max_tokens runs 50 ms a step (OVSERVE_TEST_SLOW_STEP_ON_MAX_TOKENS)
SLOW_ENV = {"OVSERVE_TEST_SLOW_STEP_ON_MAX_TOKENS": str(SLOW_TOKENS)}


def chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4, **extra}


def post_chat(server: Server, model: str, **extra: Any) -> httpx.Response:
    return httpx.post(f"{server.url}/v3/chat/completions", json=chat(model, **extra), timeout=300)


def listed(server: Server) -> dict[str, dict[str, Any]]:
    """GET /v3/models: each model's ``ovserve`` object, by id."""
    data = httpx.get(f"{server.url}/v3/models", timeout=10).json()["data"]
    return {model["id"]: model["ovserve"] for model in data}


def loads(server: Server, model: str) -> float:
    return server.samples()[("ovserve_model_loads_total", (("model", model),))]


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def total_rss(server: Server) -> int:
    """Resident memory of the server and every process it started."""
    pids = [server.process.pid, *children(server.process.pid)]
    return sum(resident_memory_bytes(pid) or 0 for pid in pids)


def alive(pid: int) -> bool:
    return resident_memory_bytes(pid) is not None  # gone, or a zombie without memory


def stream_chat(server: Server, model: str, into: list[str]) -> threading.Thread:
    """A slow stream of ``SLOW_TOKENS`` tokens in a thread; its data lines go to ``into``."""

    def run() -> None:
        body = chat(model, max_tokens=SLOW_TOKENS, ignore_eos=True, stream=True, stream_options={"include_usage": True})
        with httpx.stream("POST", f"{server.url}/v3/chat/completions", json=body, timeout=300) as response:
            into.append(str(response.status_code))
            into.extend(line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: "))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def completed_tokens(lines: list[str]) -> int:
    """The completion tokens a finished stream reported (its usage chunk), asserting it ended
    cleanly: no error event, a finish reason, [DONE]."""
    assert lines[0] == "200" and lines[-1] == "[DONE]", lines[-3:]
    events = [json.loads(line) for line in lines[1:-1]]
    assert not [event for event in events if "error" in event]
    assert [choice["finish_reason"] for event in events for choice in event["choices"] if choice["finish_reason"]]
    return int(events[-1]["usage"]["completion_tokens"])


def write_config(path: Path, entries: list[dict[str, Any]]) -> None:
    """config.json with ovserve's per-model options; written whole, then moved in (as an editor saves)."""
    staged = path.with_suffix(".staged")
    staged.write_text(json.dumps({"mediapipe_config_list": entries}, indent=2))
    staged.replace(path)


# -- the tiny model's figures on this machine -------------------------------------------------


@pytest.fixture(scope="module")
def tiny_figures(tiny_llm: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, int]:
    """(estimate before any measurement, measured peak) of tiny-llm's engine, as the server reports
    them: the budget below is set from what this machine measures, not from constants."""
    server = launch_server(
        tmp_path_factory.mktemp("figures"),
        ["--model_path", str(tiny_llm), "--model_name", "tiny-llm", "--lazy_load"],
    )
    try:
        estimate = listed(server)["tiny-llm"]["memory_estimate_bytes"]
        assert post_chat(server, "tiny-llm").status_code == 200
        assert httpx.post(f"{server.url}/v3/models/tiny-llm/unload", timeout=60).status_code == 200
        measured = listed(server)["tiny-llm"]["memory_estimate_bytes"]
    finally:
        server.stop()
    return estimate, measured


# -- three models, a budget that fits two, one pinned ----------------------------------------


@pytest.fixture(scope="module")
def budget_server(
    tiny_llm: Path, tiny_figures: tuple[int, int], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    estimate, measured = tiny_figures
    # A loaded model counts at least what it was placed with: its estimate on its first load (here,
    # every model's first), its measured peak when higher. Two fit (the pinned one and a first
    # load); three do not, whether the third is loaded for the first time or again (measured).
    # Halfway between.
    counted = max(estimate, measured)
    low, high = counted + estimate, 2 * counted + min(estimate, measured)
    assert low < high, tiny_figures
    budget = (low + high) // 2
    base = tmp_path_factory.mktemp("budget")
    config = graph_config(base, {"pinned": tiny_llm, "b": tiny_llm, "c": tiny_llm, "big": tiny_llm})
    # "big": tiny-llm with an 8 GB KV cache, so its estimate alone exceeds the budget (a model the
    # CI has: the 0.5B benchmark model is only built with --benchmark).
    options_line = (
        f'[type.googleapis.com / mediapipe.LLMCalculatorOptions]: {{ models_path: "{tiny_llm}", cache_size: 8 }}'
    )
    (base / "big" / "graph.pbtxt").write_text(
        f'node: {{ calculator: "HttpLLMCalculator"\nnode_options: {{ {options_line} }} }}\n'
    )
    options = {
        "pinned": {"pinned": True},
        "b": {"lazy_load": True},
        "c": {"lazy_load": True},
        "big": {"lazy_load": True},
    }
    write_config(config, [{"name": name, "base_path": name, **extra} for name, extra in options.items()])
    server = launch_server(
        base, ["--config_path", str(config), "--models_memory_budget", str(budget)], model_name="pinned", env=SLOW_ENV
    )
    yield server
    server.stop()


def test_at_start_only_the_pinned_model_is_loaded(budget_server: Server) -> None:
    assert len(budget_server.engine_pids()) == 1
    states = {name: model["state"] for name, model in listed(budget_server).items()}
    assert states == {"pinned": "loaded", "b": "unloaded", "c": "unloaded", "big": "unloaded"}
    assert listed(budget_server)["pinned"]["pinned"] is True


def test_a_request_loads_a_model_and_a_third_evicts_the_least_recently_used(budget_server: Server) -> None:
    before = set(budget_server.engine_pids())
    assert post_chat(budget_server, "b").status_code == 200
    (b_pid,) = set(budget_server.engine_pids()) - before
    assert post_chat(budget_server, "c").status_code == 200
    assert wait_for(lambda: not alive(b_pid), timeout=30)  # b's engine process exited
    assert len(budget_server.engine_pids()) == 2
    states = {name: model["state"] for name, model in listed(budget_server).items()}
    assert states == {"pinned": "loaded", "b": "unloaded", "c": "loaded", "big": "unloaded"}
    assert budget_server.samples()[("ovserve_model_evictions_total", (("model", "b"),))] == 1


def test_sixteen_concurrent_requests_to_an_unloaded_model_are_served_by_one_load(budget_server: Server) -> None:
    assert httpx.post(f"{budget_server.url}/v3/models/b/unload", timeout=60).status_code == 200
    assert post_chat(budget_server, "c").status_code == 200  # c is loaded, b is not
    before = loads(budget_server, "b")
    stages: list[str] = []  # b's load stages, as GET /v3/models showed them during the load
    loaded = threading.Event()

    def watch() -> None:
        while not loaded.wait(0.05):  # a console's poll, at 20 Hz
            stage = listed(budget_server)["b"]["load_stage"]
            if stage is not None and stage not in stages:
                stages.append(stage)

    watcher = threading.Thread(target=watch)
    watcher.start()
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        statuses = list(pool.map(lambda _: post_chat(budget_server, "b").status_code, range(16)))
    loaded.set()
    watcher.join()
    assert statuses == [200] * 16
    assert loads(budget_server, "b") == before + 1
    # The engine reported its load as it went (a poll may miss a short stage), in its order; none once loaded.
    assert stages and stages == sorted(stages, key=["starting", "compiling", "warming up"].index), stages
    assert listed(budget_server)["b"]["load_stage"] is None
    assert listed(budget_server)["c"]["state"] == "unloaded"  # b needed room: c was the LRU one
    assert len(budget_server.engine_pids()) == 2


def test_an_unload_during_a_stream_lets_the_stream_finish(budget_server: Server) -> None:
    if listed(budget_server)["b"]["state"] != "loaded":
        assert post_chat(budget_server, "b").status_code == 200
    pids_before = set(budget_server.engine_pids())
    lines: list[str] = []
    streaming = stream_chat(budget_server, "b", lines)
    assert wait_for(lambda: len(lines) > 3, timeout=60)  # tokens are flowing
    unload = httpx.post(f"{budget_server.url}/v3/models/b/unload", timeout=300)
    assert unload.status_code == 200
    assert unload.json()["ovserve"]["state"] == "unloaded"
    streaming.join(timeout=60)
    assert completed_tokens(lines) == SLOW_TOKENS  # the whole stream, not cut
    assert len(set(budget_server.engine_pids()) & pids_before) == 1  # only the pinned engine is left


def test_a_model_bigger_than_the_budget_is_refused_and_the_others_keep_serving(budget_server: Server) -> None:
    pids = budget_server.engine_pids()
    response = post_chat(budget_server, "big")
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "model_too_large_for_budget"
    assert "--models_memory_budget" in error["message"]
    assert budget_server.engine_pids() == pids  # nothing was started, nothing evicted
    assert post_chat(budget_server, "pinned").status_code == 200
    assert httpx.get(f"{budget_server.url}/v2/health/ready", timeout=10).status_code == 200


# -- idle unload --------------------------------------------------------------------------------


def test_an_idle_model_unloads_within_its_timeout_and_its_memory_returns(tiny_llm: Path, tmp_path: Path) -> None:
    timeout = 5
    server = launch_server(
        tmp_path,
        [
            "--model_path",
            str(tiny_llm),
            "--model_name",
            "tiny-llm",
            "--lazy_load",
            "--idle_unload_timeout",
            str(timeout),
        ],
    )
    try:
        assert server.engine_pids() == []
        before = total_rss(server)
        assert post_chat(server, "tiny-llm").status_code == 200
        last_request = time.monotonic()
        assert len(server.engine_pids()) == 1
        assert wait_for(lambda: server.engine_pids() == [], timeout=timeout + 30)
        elapsed = time.monotonic() - last_request
        assert elapsed <= timeout + 2 * contention_factor(), elapsed
        after = total_rss(server)
        assert abs(after - before) < 30 * 1024 * 1024, (before, after)
        assert listed(server)["tiny-llm"]["state"] == "unloaded"
        assert httpx.get(f"{server.url}/v2/health/ready", timeout=10).status_code == 200
        assert server.samples()[("ovserve_model_unloads_total", (("model", "tiny-llm"), ("reason", "idle")))] == 1
    finally:
        server.stop()


# -- hot config reload --------------------------------------------------------------------------


def test_config_edits_apply_while_a_client_streams_and_a_broken_edit_is_refused(tiny_llm: Path, tmp_path: Path) -> None:
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    copy = models_dir / "tiny-copy"
    shutil.copytree(tiny_llm, copy)  # a model directory of its own for the one that comes later
    config = graph_config(tmp_path, {"stable": tiny_llm, "old": tiny_llm, "new": copy})
    entries = {name: {"name": name, "base_path": name} for name in ("stable", "old", "new")}
    write_config(config, [entries["stable"], entries["old"]])
    server = launch_server(
        tmp_path,
        ["--config_path", str(config), "--file_system_poll_wait_seconds", "0.2"],
        model_name="stable",
        env=SLOW_ENV,
    )
    try:
        stable: list[str] = []
        old: list[str] = []
        streams = [stream_chat(server, "stable", stable), stream_chat(server, "old", old)]
        assert wait_for(lambda: len(stable) > 3 and len(old) > 3, timeout=60)
        write_config(config, [entries["stable"], entries["new"]])
        assert wait_for(lambda: set(listed(server)) == {"stable", "new"}, timeout=60)
        assert post_chat(server, "new").status_code == 200
        gone = post_chat(server, "old")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "model_not_found"
        for thread in streams:
            thread.join(timeout=120)
        assert completed_tokens(stable) == SLOW_TOKENS  # neither stream was cut
        assert completed_tokens(old) == SLOW_TOKENS  # the removed model drained its stream
        assert wait_for(lambda: len(server.engine_pids()) == 2, timeout=60)  # old's engine exited

        # A broken edit: refused whole, logged with file and line; the running set serves on.
        config.write_text(json.dumps({"mediapipe_config_list": [entries["stable"]]})[:-3])
        assert wait_for(lambda: "config reload refused" in server.log(), timeout=30)
        assert f"{config}:1" in server.log()
        refused = httpx.post(f"{server.url}/v1/config/reload", timeout=60)
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "invalid_config"
        assert str(config) in refused.json()["error"]["message"]
        assert set(listed(server)) == {"stable", "new"}
        assert post_chat(server, "new").status_code == 200
        assert post_chat(server, "stable").status_code == 200
    finally:
        server.stop()
