"""Engine faults rehearsed on real processes: a model that cannot load beside one that can, an
engine that hangs while idle (SIGSTOP), a step that works in silence for long (left alone, unless
stopped or past the step bound), and an engine killed while it serves a unary request in each
OpenAI dialect. What a client and an operator see: 503 + ``Retry-After`` with a stable code,
readiness, the log and ``/metrics``; the other models keep serving."""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import os
import re
import shutil
import signal
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from ovserve.engine.spec import BUSY_STEP_ENV, BUSY_STEP_SECONDS_ENV
from tests.conftest import Server, graph_config, launch_server, start_server, wait_for

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def _status(url: str) -> int:
    return httpx.get(url, timeout=5).status_code


def test_a_model_that_cannot_load_is_retried_with_growing_delays_while_the_other_serves(
    tiny_llm: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_llm, broken)
    with (broken / "openvino_model.bin").open("r+b") as weights:  # "Incorrect weights in bin file!"
        weights.truncate(weights.seek(0, os.SEEK_END) // 2)
    config = graph_config(tmp_path, {"broken": broken, "good": tiny_llm})
    server = launch_server(tmp_path, ["--config_path", str(config)], model_name="good")
    try:
        # The server is ready for the model that loads; the other is retried meanwhile.
        assert wait_for(lambda: (server.metric("ovserve_engine_start_failures_total", "broken") or 0) >= 3, timeout=120)
        good = httpx.post(f"{server.url}/v3/chat/completions", json={"model": "good", **CHAT}, timeout=60)
        assert good.status_code == 200
        assert _status(f"{server.url}/v2/health/ready") == 200
        assert _status(f"{server.url}/v2/models/good/ready") == 200
        assert _status(f"{server.url}/v2/models/broken/ready") == 503
        refused = httpx.post(f"{server.url}/v3/chat/completions", json={"model": "broken", **CHAT}, timeout=10)
        assert refused.status_code == 503
        assert int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["error"]["code"] == "model_load_failed"
        assert (server.metric("ovserve_engine_restarts_total", "broken") or 0) >= 2  # the attempts after the first

        # One log line per attempt, numbered in order, each waiting longer than the one before.
        attempts = [line for line in server.log().splitlines() if "model 'broken' could not start" in line]
        assert len(attempts) >= 3
        numbers = [int(re.search(r"attempt (\d+) in a row", line)[1]) for line in attempts]  # type: ignore[index]
        assert numbers == list(range(1, len(attempts) + 1))
        delays = [float(re.search(r"next attempt in (\d+) s", line)[1]) for line in attempts]  # type: ignore[index]
        assert delays == sorted(delays) and len(set(delays)) == len(delays)
        times = [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f") for line in attempts]
        gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(times)]
        assert all(gap >= delay for gap, delay in zip(gaps, delays, strict=False)), (gaps, delays)
        assert all("Incorrect weights in bin file!" in line for line in attempts)
        assert server.log().count("Incorrect weights in bin file!") == len(attempts)
        assert server.process.poll() is None
    finally:
        server.stop()
    assert server.process.returncode == 0


@pytest.fixture()
def stall_server(tiny_llm: Path, tmp_path: Path) -> Server:
    return start_server(tmp_path, tiny_llm, "--engine_stall_timeout", str(STALL_TIMEOUT_S))


STALL_TIMEOUT_S = 5.0


def test_an_idle_engine_that_hangs_turns_not_ready_is_refused_at_once_and_replaced(stall_server: Server) -> None:
    server = stall_server
    chat = {"model": "tiny-llm", **CHAT}
    try:
        assert httpx.post(f"{server.url}/v3/chat/completions", json=chat, timeout=60).status_code == 200
        (engine_pid,) = server.engine_pids()
        os.kill(engine_pid, signal.SIGSTOP)  # idle, and now silent
        ready = f"{server.url}/v2/health/ready"
        assert wait_for(lambda: _status(ready) == 503, timeout=STALL_TIMEOUT_S + 2)

        # Known to be stalled: refused at once, not after waiting for the dead engine.
        started = time.monotonic()
        refused = httpx.post(f"{server.url}/v3/chat/completions", json=chat, timeout=60)
        assert time.monotonic() - started < STALL_TIMEOUT_S  # not a wait for another stall timeout
        assert refused.status_code == 503
        assert int(refused.headers["Retry-After"]) >= 1

        # A new engine process replaces the stopped one and serves.
        server.wait_ready(timeout=120)
        assert server.engine_pids() != [engine_pid]
        assert httpx.post(f"{server.url}/v3/chat/completions", json=chat, timeout=60).status_code == 200
        assert server.metric("ovserve_engine_stalls_total") == 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(engine_pid, signal.SIGCONT)
        server.stop()


# A request with this max_tokens makes the engine's next step work in silence (burning CPU) for
# BUSY_STEP_S, three stall timeouts: a long prefill on a loaded machine, as the watchdog sees it.
BUSY_STALL_TIMEOUT_S = 2.0  # the least --engine_stall_timeout allows
BUSY_TOKENS = 777
BUSY_STEP_S = 3 * BUSY_STALL_TIMEOUT_S
BUSY_ENV = {BUSY_STEP_ENV: str(BUSY_TOKENS), BUSY_STEP_SECONDS_ENV: str(BUSY_STEP_S)}
LONG_STEP = "a long step, not a stall"
STALL = "killing and restarting the engine"


def test_a_step_that_works_in_silence_is_left_alone_but_an_engine_stopped_in_one_is_replaced(
    tiny_llm: Path, tmp_path: Path
) -> None:
    server = start_server(tmp_path, tiny_llm, "--engine_stall_timeout", str(BUSY_STALL_TIMEOUT_S), env=BUSY_ENV)
    busy = {"model": "tiny-llm", **CHAT, "max_tokens": BUSY_TOKENS}
    engine_pid = None
    try:
        # Three stall timeouts without a word, but at work: the request is answered.
        for attempt in range(1, 3):
            response = httpx.post(f"{server.url}/v3/chat/completions", json=busy, timeout=120)
            assert response.status_code == 200, (attempt, response.text)
            assert server.log().count(LONG_STEP) == attempt
        assert server.log().count("injected long step done") == 2
        assert server.metric("ovserve_engine_stalls_total") == 0
        assert server.metric("ovserve_engine_restarts_total") == 0

        # Stopped in the middle of such a step (once the watchdog has let it work past the stall
        # timeout): no report and no CPU, so a stall within the stall timeout, not at the step bound.
        (engine_pid,) = server.engine_pids()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(httpx.post, f"{server.url}/v3/chat/completions", json=busy, timeout=120)
            assert wait_for(lambda: server.log().count(LONG_STEP) == 3, timeout=60)
            os.kill(engine_pid, signal.SIGSTOP)
            stopped = pending.result()
        assert stopped.status_code == 503, stopped.text
        assert stopped.json()["error"]["code"] == "engine_stalled"
        (stall,) = [line for line in server.log().splitlines() if STALL in line]
        assert "no report and no CPU used, process state T (stopped)" in stall
        assert server.log().count("injected long step done") == 2
        server.wait_ready(timeout=120)
        assert server.engine_pids() != [engine_pid]
        assert server.metric("ovserve_engine_stalls_total") == 1
    finally:
        if engine_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(engine_pid, signal.SIGCONT)
        server.stop()


def test_a_step_that_works_in_silence_past_the_step_timeout_is_a_stall(tiny_llm: Path, tmp_path: Path) -> None:
    step_timeout = 2 * BUSY_STALL_TIMEOUT_S  # shorter than the busy step
    server = start_server(
        tmp_path,
        tiny_llm,
        *("--engine_stall_timeout", str(BUSY_STALL_TIMEOUT_S), "--engine_step_timeout", str(step_timeout)),
        env=BUSY_ENV,
    )
    busy = {"model": "tiny-llm", **CHAT, "max_tokens": BUSY_TOKENS}
    try:
        response = httpx.post(f"{server.url}/v3/chat/completions", json=busy, timeout=120)
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "engine_stalled"
        log = server.log()
        (stall,) = [line for line in log.splitlines() if STALL in line]
        assert "busy in one step" in stall and f"--engine_step_timeout {step_timeout:g} s" in stall
        assert log.index(LONG_STEP) < log.index(stall)  # first left alone, then given up on
        assert "injected long step done" not in log  # killed while it worked
        server.wait_ready(timeout=120)
        assert server.metric("ovserve_engine_stalls_total") == 1
        short = {"model": "tiny-llm", **CHAT}
        assert httpx.post(f"{server.url}/v3/chat/completions", json=short, timeout=60).status_code == 200
    finally:
        server.stop()


LONG = {"max_tokens": 1500, "ignore_eos": True, "temperature": 0}
UNARY_REQUESTS = {
    "chat": ("/v3/chat/completions", {"messages": [{"role": "user", "content": "Count."}], **LONG}),
    "completions": ("/v3/completions", {"prompt": "Count.", **LONG}),
    "responses": ("/v3/responses", {"input": "Count.", "max_output_tokens": 1500, "temperature": 0}),
}


def test_an_engine_killed_mid_unary_request_is_a_retryable_503_in_every_dialect(tiny_llm: Path, tmp_path: Path) -> None:
    server = start_server(tmp_path, tiny_llm)
    try:
        for dialect, (path, body) in UNARY_REQUESTS.items():
            (engine_pid,) = server.engine_pids()
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                url, request = f"{server.url}{path}", {"model": "tiny-llm", **body}
                pending = pool.submit(httpx.post, url, json=request, timeout=120)
                assert wait_for(lambda: server.metric("ovserve_inflight_requests") == 1, timeout=30), dialect
                os.kill(engine_pid, signal.SIGKILL)
                response = pending.result()
            assert response.status_code == 503, (dialect, response.text)
            assert int(response.headers["Retry-After"]) >= 1, dialect
            assert response.json()["error"]["code"] == "engine_died", dialect
            server.wait_ready(timeout=120)
    finally:
        server.stop()


def test_a_model_directory_that_disappears_keeps_serving_and_a_restart_says_why(tiny_llm: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_llm, model)
    server = start_server(tmp_path, model)
    chat = {"model": "tiny-llm", **CHAT}
    try:
        moved = tmp_path / "moved-away"
        model.rename(moved)  # deleted or unmounted under a running server
        # The running engine has what it needs in memory: it keeps serving.
        for _ in range(3):
            assert httpx.post(f"{server.url}/v3/chat/completions", json=chat, timeout=60).status_code == 200
        # A restart cannot load it: readiness and the answer say so, the log says why, once per attempt.
        (engine_pid,) = server.engine_pids()
        os.kill(engine_pid, signal.SIGKILL)
        assert wait_for(lambda: (server.metric("ovserve_engine_start_failures_total") or 0) >= 1, timeout=120)
        assert _status(f"{server.url}/v2/models/tiny-llm/ready") == 503
        refused = httpx.post(f"{server.url}/v3/chat/completions", json=chat, timeout=10)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "model_load_failed"
        assert f"could not load {model}" in server.log()
        # Back in place: the next attempt loads it and the model serves again.
        moved.rename(model)
        server.wait_ready(timeout=180)
        assert httpx.post(f"{server.url}/v3/chat/completions", json=chat, timeout=60).status_code == 200
        assert server.process.poll() is None
    finally:
        server.stop()
