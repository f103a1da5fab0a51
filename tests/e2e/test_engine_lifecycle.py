"""The engine process: readiness, disconnects, step failures and engine death."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import openai

from tests.conftest import Server, start_server, wait_for

PROMPT = [{"role": "user", "content": "Count to one thousand."}]
LONG = {"model": "tiny-llm", "messages": PROMPT, "max_tokens": 1500, "ignore_eos": True, "temperature": 0}


def test_health_is_live_at_once_and_ready_after_the_engine_loads(tiny_llm: Path, tmp_path: Path) -> None:
    server = start_server(tmp_path, tiny_llm, wait=False)
    try:
        statuses: list[int] = []

        def ready_status() -> bool:
            try:
                live = httpx.get(f"{server.url}/v2/health/live", timeout=2)
                ready = httpx.get(f"{server.url}/v2/health/ready", timeout=2)
            except httpx.TransportError:
                return False
            assert live.status_code == 200
            statuses.append(ready.status_code)
            return ready.status_code == 200

        assert wait_for(ready_status, timeout=120)
        # The HTTP port answers before the pipeline has loaded, and says so.
        assert statuses[0] == 503
        assert httpx.get(f"{server.url}/health", timeout=5).json()["models"] == {"tiny-llm": "ready"}
        assert server.client().chat.completions.create(model="tiny-llm", messages=PROMPT, max_tokens=3).choices
    finally:
        server.stop()


def test_a_dropped_stream_frees_its_engine_request(server: Server) -> None:
    with httpx.stream(
        "POST", f"{server.url}/v3/chat/completions", json={**LONG, "stream": True}, timeout=60
    ) as response:
        lines = response.iter_lines()
        received = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: ") for line in received)
        assert server.metric("ovserve_engine_requests") == 1
    # The client hung up after a few chunks of a 1500-token request.
    assert wait_for(lambda: server.metric("ovserve_engine_requests") == 0, timeout=15), server.log()
    assert server.metric("ovserve_engine_handles") == 0
    assert server.metric("ovserve_inflight_requests") == 0


def test_a_dropped_unary_request_frees_its_engine_request(server: Server) -> None:
    with contextlib.suppress(httpx.ReadTimeout):
        httpx.post(f"{server.url}/v3/chat/completions", json=LONG, timeout=1.5)
    assert wait_for(lambda: server.metric("ovserve_engine_requests") == 0, timeout=15), server.log()
    assert server.metric("ovserve_inflight_requests") == 0


def test_engine_death_mid_stream_fails_the_stream_and_the_engine_restarts(tiny_llm: Path, tmp_path: Path) -> None:
    server = start_server(tmp_path, tiny_llm)
    try:
        (engine_pid,) = server.engine_pids()
        with httpx.stream(
            "POST", f"{server.url}/v3/chat/completions", json={**LONG, "stream": True}, timeout=60
        ) as response:
            lines = response.iter_lines()
            for line in lines:
                if line.startswith("data: ") and '"content":"' in line:
                    break  # tokens are flowing
            os.kill(engine_pid, signal.SIGKILL)
            rest = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
        assert rest[-1] == "[DONE]"
        error = json.loads(rest[-2])["error"]
        assert error["code"] == "engine_died" and "died" in error["message"]
        assert set(error) == {"message", "type", "param", "code"}

        # The server stays up, answers 503 while the engine reloads, then serves again.
        assert httpx.get(f"{server.url}/v2/health/live", timeout=5).status_code == 200
        server.wait_ready(timeout=120)
        assert server.engine_pids() != [engine_pid]
        completion = server.client().chat.completions.create(model="tiny-llm", messages=PROMPT, max_tokens=5)
        assert completion.choices[0].message.content is not None
        assert server.metric("ovserve_engine_restarts_total") == 1
    finally:
        server.stop()


def test_a_step_failure_fails_only_the_affected_request(tiny_llm: Path, tmp_path: Path) -> None:
    # The one fault the real engine cannot produce on demand: the engine process raises in
    # step() right after adding a request with max_tokens 777 (a test-only hook).
    server = start_server(tmp_path, tiny_llm, env={"OVSERVE_TEST_FAIL_STEP_ON_MAX_TOKENS": "777"})
    try:
        client = server.client()
        healthy: list[str] = []

        def bystander() -> None:
            completion = client.chat.completions.create(
                model="tiny-llm", messages=PROMPT, max_tokens=200, temperature=0, extra_body={"ignore_eos": True}
            )
            healthy.append(completion.choices[0].finish_reason)

        thread = threading.Thread(target=bystander)
        thread.start()
        time.sleep(0.5)
        try:
            client.chat.completions.create(model="tiny-llm", messages=PROMPT, max_tokens=777)
        except openai.InternalServerError as exc:
            assert exc.status_code == 500
            assert "engine failed" in exc.message
        else:
            raise AssertionError("the failing request succeeded")
        thread.join(timeout=120)
        assert healthy == ["length"]
        assert wait_for(lambda: server.metric("ovserve_engine_requests") == 0, timeout=15)
        assert client.chat.completions.create(model="tiny-llm", messages=PROMPT, max_tokens=3).choices
    finally:
        server.stop()


def test_prompt_longer_than_a_step_without_split_fuse_is_a_400(tiny_llm: Path, tmp_path: Path) -> None:
    # With dynamic_split_fuse off the engine's step() raises on such a prompt; the server refuses it first.
    server = start_server(
        tmp_path, tiny_llm, "--dynamic_split_fuse", "false", "--max_num_batched_tokens", "64", "--max_num_seqs", "8"
    )
    try:
        long_prompt = [{"role": "user", "content": "count the words in this sentence please " * 12}]
        response = httpx.post(
            f"{server.url}/v3/chat/completions", json={"model": "tiny-llm", "messages": long_prompt}, timeout=30
        )
        assert response.status_code == 400
        assert "max_num_batched_tokens" in response.json()["error"]["message"]
        short = server.client().chat.completions.create(model="tiny-llm", messages=PROMPT, max_tokens=3)
        assert short.choices[0].message.content is not None
    finally:
        server.stop()
