"""Operating the server over real HTTP: admission control, deadlines, the stall watchdog, drain
on SIGTERM, and the metrics operators graph."""

from __future__ import annotations

import concurrent.futures
import json
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ovserve.scrape import ROUTING_METRICS
from tests.conftest import Server, contention_factor, graph_config, launch_server, start_server, wait_for

LONG_CHAT = {
    "model": "tiny-llm",
    "messages": [{"role": "user", "content": "Tell me a long story."}],
    "max_tokens": 1500,
    "ignore_eos": True,
}


def read_stream(response: httpx.Response) -> list[dict]:
    """The JSON events of an SSE body; asserts it ends with [DONE]."""
    lines = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert lines and lines[-1] == "[DONE]", lines[-3:]
    return [json.loads(line) for line in lines[:-1]]


def metric_samples(server: Server, headers: dict[str, str] | None = None) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"{server.url}/metrics", headers=headers, timeout=10).text
    samples: dict[tuple[str, tuple], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


# -- admission control ------------------------------------------------------------------------


def test_a_burst_of_three_times_the_queue_limit_gets_429s_and_no_5xx(tiny_llm: Path, tmp_path: Path) -> None:
    # One sequence at a time: the others wait in the engine without a first token (the queue).
    server = start_server(tmp_path, tiny_llm, "--max_queued_requests", "4", "--max_num_seqs", "1")
    try:
        body = {**LONG_CHAT, "max_tokens": 40}

        def send(_: int) -> httpx.Response:
            return httpx.post(f"{server.url}/v3/chat/completions", json=body, timeout=120)

        with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
            responses = list(pool.map(send, range(12)))
        statuses = [response.status_code for response in responses]
        assert not [status for status in statuses if status >= 500], statuses
        refused = [response for response in responses if response.status_code == 429]
        admitted = [response for response in responses if response.status_code == 200]
        assert refused and admitted, statuses
        for response in refused:
            assert response.headers["Retry-After"] == "1"
            assert response.json()["error"]["code"] == "queue_full"
            assert response.json()["error"]["type"] == "rate_limit_error"
        for response in admitted:  # every admitted request completes
            assert response.json()["choices"][0]["finish_reason"] == "length"
            assert response.json()["usage"]["completion_tokens"] == 40
        samples = metric_samples(server)
        assert samples[("ovserve_requests_rejected_total", (("model", "tiny-llm"),))] == len(refused)
        assert samples[("ovserve_requests_waiting", (("model", "tiny-llm"),))] == 0
    finally:
        server.stop()


# -- deadlines --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deadline_server(tiny_llm: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    # Slow steps for LONG_CHAT's requests: on a fast machine the tiny model could finish them
    # before the deadline; at 50 ms a step they take over a minute, however fast the machine.
    env = {"OVSERVE_TEST_SLOW_STEP_ON_MAX_TOKENS": str(LONG_CHAT["max_tokens"])}
    server = start_server(tmp_path_factory.mktemp("deadline"), tiny_llm, "--request_timeout", "1", env=env)
    yield server
    server.stop()


def test_deadline_expiry_unary_is_504_and_frees_the_engine(deadline_server: Server) -> None:
    started = time.monotonic()
    response = httpx.post(f"{deadline_server.url}/v3/chat/completions", json=LONG_CHAT, timeout=60)
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "request_timeout"
    assert time.monotonic() - started < 5 * contention_factor()  # the request alone takes over a minute
    assert wait_for(lambda: deadline_server.metric("ovserve_engine_requests") == 0)
    assert deadline_server.metric("ovserve_inflight_requests") == 0


def test_deadline_expiry_streamed_is_an_error_event_then_done(deadline_server: Server) -> None:
    with httpx.stream(
        "POST", f"{deadline_server.url}/v3/chat/completions", json={**LONG_CHAT, "stream": True}, timeout=60
    ) as response:
        assert response.status_code == 200
        events = read_stream(response)
    assert events[-1]["error"]["code"] == "request_timeout"
    assert any(event.get("choices") for event in events[:-1])  # it did stream before the deadline
    assert wait_for(lambda: deadline_server.metric("ovserve_engine_requests") == 0)


# -- the stall watchdog ----------------------------------------------------------------------


def test_a_stalled_engine_is_detected_and_restarted_while_other_models_answer(tiny_llm: Path, tmp_path: Path) -> None:
    stall_timeout = 2.0
    server = launch_server(
        tmp_path,
        [
            *("--config_path", str(graph_config(tmp_path, {"stuck": tiny_llm, "healthy": tiny_llm}))),
            *("--engine_stall_timeout", str(stall_timeout)),
        ],
        model_name="stuck",
        env={"OVSERVE_TEST_STALL_STEP_ON_MAX_TOKENS": "777"},
    )
    try:
        ready = f"{server.url}/v2/health/ready"
        assert httpx.get(ready, timeout=5).status_code == 200
        stuck = {"model": "stuck", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 777}
        result: dict[str, httpx.Response] = {}
        thread = threading.Thread(
            target=lambda: result.update(
                stalled=httpx.post(f"{server.url}/v3/chat/completions", json=stuck, timeout=60)
            )
        )
        started = time.monotonic()
        thread.start()
        # While it hangs, and while it restarts, the other model answers.
        healthy = {"model": "healthy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        assert httpx.post(f"{server.url}/v3/chat/completions", json=healthy, timeout=30).status_code == 200
        thread.join(30)
        detected_after = time.monotonic() - started
        stalled = result["stalled"]
        assert stalled.status_code == 503
        assert "Retry-After" in stalled.headers
        assert stalled.json()["error"]["code"] == "engine_stalled"
        # Silence counts from the engine's last heartbeat, which may precede the request.
        assert detected_after < stall_timeout + 3
        # Not ready while the stuck engine restarts, then ready again.
        assert httpx.get(f"{server.url}/v2/models/stuck/ready", timeout=5).status_code == 503
        assert httpx.get(ready, timeout=5).status_code == 503
        assert httpx.post(f"{server.url}/v3/chat/completions", json=healthy, timeout=30).status_code == 200
        assert wait_for(lambda: httpx.get(ready, timeout=5).status_code == 200, timeout=60)
        after = {**stuck, "max_tokens": 3}
        assert httpx.post(f"{server.url}/v3/chat/completions", json=after, timeout=30).status_code == 200
        samples = metric_samples(server)
        assert samples[("ovserve_engine_stalls_total", (("model", "stuck"),))] == 1
        assert samples[("ovserve_engine_restarts_total", (("model", "stuck"),))] == 1
        assert samples[("ovserve_engine_stalls_total", (("model", "healthy"),))] == 0
    finally:
        server.stop()


# -- drain on SIGTERM -------------------------------------------------------------------------


def test_sigterm_mid_stream_finishes_streams_refuses_new_requests_and_exits_0(tiny_llm: Path, tmp_path: Path) -> None:
    server = start_server(tmp_path, tiny_llm, "--drain_timeout", "30")
    body = {**LONG_CHAT, "max_tokens": 300, "stream": True}
    streams: list[list[dict]] = []
    errors: list[BaseException] = []
    started = threading.Barrier(4)

    def stream() -> None:
        try:
            with httpx.stream("POST", f"{server.url}/v3/chat/completions", json=body, timeout=120) as response:
                lines = response.iter_lines()
                first = next(lines)
                started.wait()
                rest = [first, *lines]
            events = [json.loads(line[6:]) for line in rest if line.startswith("data: ") and line != "data: [DONE]"]
            assert rest[-1] == "data: [DONE]" or "data: [DONE]" in rest
            streams.append(events)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=stream) for _ in range(3)]
    for thread in threads:
        thread.start()
    started.wait(60)
    server.process.send_signal(signal.SIGTERM)
    # Readiness turns 503 at once and new requests get 503 with Retry-After.
    assert wait_for(lambda: httpx.get(f"{server.url}/v2/health/ready", timeout=5).status_code == 503, timeout=5)
    refused = httpx.post(f"{server.url}/v3/chat/completions", json={**LONG_CHAT, "max_tokens": 3}, timeout=10)
    assert refused.status_code == 503
    assert refused.headers["Retry-After"] == "1"
    assert refused.json()["error"]["code"] == "shutting_down"
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert len(streams) == 3
    for events in streams:  # every in-flight stream completed, no error event
        assert not [event for event in events if "error" in event]
        assert events[-1]["choices"][0]["finish_reason"] == "length"
    assert server.process.wait(timeout=30) == 0
    assert "drain: every request finished" in server.log()


def test_sigterm_while_the_model_loads_is_a_clean_exit(tiny_llm: Path, tmp_path: Path) -> None:
    server = start_server(tmp_path, tiny_llm, wait=False)
    assert wait_for(lambda: "loading 1 model(s)" in server.log(), timeout=60)
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=60) == 0, server.log()


def test_sigterm_past_the_drain_timeout_ends_streams_with_an_error_event(tiny_llm: Path, tmp_path: Path) -> None:
    server = start_server(tmp_path, tiny_llm, "--drain_timeout", "1")
    with httpx.stream(
        "POST", f"{server.url}/v3/chat/completions", json={**LONG_CHAT, "stream": True}, timeout=120
    ) as response:
        lines = response.iter_lines()
        next(lines)
        server.process.send_signal(signal.SIGTERM)
        rest = [line for line in lines if line.startswith("data: ")]
    assert rest[-1] == "data: [DONE]"
    assert json.loads(rest[-2][6:])["error"]["code"] == "shutting_down"
    assert server.process.wait(timeout=30) == 0
    # The engine freed the streams the drain cut before it exited: nothing "leaked" at exit.
    assert not [line for line in server.log().splitlines() if "ERROR" in line], server.log()


# -- metrics ----------------------------------------------------------------------------------


def test_metrics_parse_and_every_histogram_moves_under_load(tiny_llm: Path, tmp_path: Path) -> None:
    server = start_server(tmp_path, tiny_llm, "--api_key", "sk-metrics")
    headers = {"Authorization": "Bearer sk-metrics"}
    try:
        before = metric_samples(server, headers)
        body = {**LONG_CHAT, "max_tokens": 20}

        def send(index: int) -> int:
            payload = {**body, "stream": index % 2 == 0}
            return httpx.post(
                f"{server.url}/v3/chat/completions", json=payload, headers=headers, timeout=60
            ).status_code

        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            assert set(pool.map(send, range(8))) == {200}
        httpx.post(f"{server.url}/v3/chat/completions", json={**body, "max_tokens": 0}, headers=headers, timeout=10)
        after = metric_samples(server, headers)
        model = (("model", "tiny-llm"),)
        for histogram in (
            "ovserve_time_to_first_token_seconds",
            "ovserve_inter_token_latency_seconds",
            "ovserve_e2e_request_latency_seconds",
            "ovserve_request_queue_time_seconds",
        ):
            assert after[(f"{histogram}_count", model)] > before.get((f"{histogram}_count", model), 0), histogram
        assert (
            after[("ovserve_event_loop_lag_seconds_count", ())] > before[("ovserve_event_loop_lag_seconds_count", ())]
        )
        assert after[("ovserve_generation_tokens_total", model)] == 8 * 20
        assert after[("ovserve_prompt_tokens_total", model)] > 0
        completed = (("endpoint", "chat"), ("model", "tiny-llm"), ("outcome", "length"), ("status", "200"))
        assert after[("ovserve_requests_total", completed)] == 8
        refused = (("endpoint", "chat"), ("model", ""), ("outcome", "invalid_request_error"), ("status", "400"))
        assert after[("ovserve_requests_total", refused)] == 1
        assert after[("ovserve_engine_ready", model)] == 1
        # What an endpoint picker routes by (docs/routing.md): every request ended, so nothing is
        # queued or running; the KV cache's use is a fraction; its geometry is the CPU's 32-token
        # blocks, as many as the cache's bytes hold (the engine measured one block's bytes).
        assert after[("ovserve_requests_waiting", model)] == 0
        assert after[("ovserve_requests_running", model)] == 0
        assert 0.0 <= after[("ovserve_kv_cache_usage_ratio", model)] <= 1.0
        [(geometry, info)] = [
            (dict(labels), value) for (name, labels), value in after.items() if name == "ovserve_cache_config_info"
        ]
        assert info == 1 and geometry["model"] == "tiny-llm" and geometry["block_size"] == "32"
        blocks = int(geometry["num_blocks"])
        assert 0 < blocks <= after[("ovserve_kv_cache_bytes", model)]
        assert set(ROUTING_METRICS.values()) <= {name for name, _ in after}
    finally:
        server.stop()
