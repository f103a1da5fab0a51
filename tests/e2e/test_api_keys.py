"""API keys over real HTTP: right, wrong, missing, Azure's header, rotation through the key file."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import Server, start_server

KEY = "sk-ovserve-test-key-1"
ROTATED = "sk-ovserve-test-key-2"
CHAT = {"model": "tiny-llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "keys"
    path.write_text(f"# ovserve API keys\n{KEY}\n")
    return path


@pytest.fixture(scope="module")
def keyed_server(tiny_llm: Path, key_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(
        tmp_path_factory.mktemp("keyed"), tiny_llm, "--api_key_file", str(key_file), "--api_key", "sk-flag-key"
    )
    yield running
    running.stop()


def _chat(server: Server, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{server.url}/v3/chat/completions", json=CHAT, headers=headers, timeout=30)


def test_right_key_is_served(keyed_server: Server) -> None:
    assert _chat(keyed_server, {"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert _chat(keyed_server, {"Authorization": "Bearer sk-flag-key"}).status_code == 200
    client = openai.OpenAI(base_url=f"{keyed_server.url}/v3", api_key=KEY, max_retries=0)
    assert client.chat.completions.create(model="tiny-llm", messages=CHAT["messages"], max_tokens=2).choices  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "missing_api_key"),
        ({"Authorization": "Bearer sk-wrong"}, "invalid_api_key"),
        ({"Authorization": f"Basic {KEY}"}, "missing_api_key"),
        ({"api-key": "sk-wrong"}, "invalid_api_key"),
    ],
    ids=["missing", "wrong", "not bearer", "wrong azure header"],
)
def test_missing_or_wrong_key_is_a_401_in_openai_shape(
    keyed_server: Server, headers: dict[str, str], code: str
) -> None:
    response = _chat(keyed_server, headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    assert KEY not in response.text


def test_openai_sdk_with_a_wrong_key_raises_authentication_error(keyed_server: Server) -> None:
    client = openai.OpenAI(base_url=f"{keyed_server.url}/v3", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="tiny-llm", messages=CHAT["messages"], max_tokens=2)  # type: ignore[arg-type]


def test_azure_api_key_header_is_accepted(keyed_server: Server) -> None:
    response = httpx.post(
        f"{keyed_server.url}/v3/chat/completions?api-version=2024-05-01-preview",
        json=CHAT,
        headers={"api-key": KEY},
        timeout=30,
    )
    assert response.status_code == 200, response.text


def test_probes_stay_open_and_metrics_and_models_need_the_key(keyed_server: Server) -> None:
    for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/tiny-llm/ready"):
        assert httpx.get(f"{keyed_server.url}{path}", timeout=10).status_code == 200, path
    health = httpx.get(f"{keyed_server.url}/health", timeout=10)
    assert health.status_code == 200 and "tiny-llm" not in health.text  # no model names without a key
    for path in ("/metrics", "/v3/models"):
        assert httpx.get(f"{keyed_server.url}{path}", timeout=10).status_code == 401, path
        keyed = httpx.get(f"{keyed_server.url}{path}", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
        assert keyed.status_code == 200, path


def test_key_file_rotation_takes_effect_without_a_restart(keyed_server: Server, key_file: Path) -> None:
    key_file.write_text(f"{ROTATED}\n")
    # A new modification time is noticed on requests (checked at most once a second).
    os.utime(key_file, (time.time() + 5, time.time() + 5))
    deadline = time.monotonic() + 10
    while (
        time.monotonic() < deadline and _chat(keyed_server, {"Authorization": f"Bearer {ROTATED}"}).status_code != 200
    ):
        time.sleep(0.3)
    assert _chat(keyed_server, {"Authorization": f"Bearer {ROTATED}"}).status_code == 200
    assert _chat(keyed_server, {"Authorization": f"Bearer {KEY}"}).status_code == 401
    # SIGHUP rereads it too.
    key_file.write_text(f"{KEY}\n")
    keyed_server.process.send_signal(signal.SIGHUP)
    original = {"Authorization": f"Bearer {KEY}"}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _chat(keyed_server, original).status_code != 200:
        time.sleep(0.3)
    assert _chat(keyed_server, {"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert KEY not in keyed_server.log() and ROTATED not in keyed_server.log()


def test_env_key_and_open_server_warning(tiny_llm: Path, tmp_path: Path) -> None:
    server = start_server(tmp_path, tiny_llm, env={"OVSERVE_API_KEY": "sk-from-env"})
    try:
        assert _chat(server, {"Authorization": "Bearer sk-from-env"}).status_code == 200
        assert _chat(server, {}).status_code == 401
        assert "sk-from-env" not in server.log()
    finally:
        server.stop()


def test_a_thousand_wrong_keys_are_counted_logged_in_a_few_lines_and_never_written_down(
    tiny_llm: Path, tmp_path: Path
) -> None:
    server = start_server(tmp_path, tiny_llm, env={"OVSERVE_API_KEY": KEY})
    try:
        wrong = [f"sk-brute-{attempt:04d}" for attempt in range(1000)]
        with httpx.Client(base_url=server.url, timeout=30) as http:
            statuses = {
                http.post("/v3/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {key}"}).status_code
                for key in wrong
            }
            assert http.post("/v3/chat/completions", json=CHAT).status_code == 401  # no key at all
            metrics = http.get("/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
        assert statuses == {401}
        assert 'ovserve_auth_failures_total{reason="invalid_key"} 1000.0' in metrics
        assert 'ovserve_auth_failures_total{reason="missing_key"} 1.0' in metrics
        log = server.log()
        warnings = [line for line in log.splitlines() if "refused for a missing or wrong API key" in line]
        assert 1 <= len(warnings) <= 3, warnings
        assert "127.0.0.1" in warnings[0]
        assert not any(key in log for key in [*wrong, KEY])
        assert "--api_key on the command line" not in log  # the key came from the environment
    finally:
        server.stop()


def test_a_key_on_the_command_line_logs_a_warning_naming_the_safer_ways(keyed_server: Server) -> None:
    log = keyed_server.log()
    assert "--api_key on the command line is readable by every local user" in log
    assert "--api_key_file" in log and "OVSERVE_API_KEY" in log
    assert "sk-flag-key" not in log
