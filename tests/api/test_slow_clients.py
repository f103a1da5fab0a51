"""Slow clients are dropped: partial heads, dripped bodies and idle sockets cannot pin the server.

Raw sockets against a real server started with short limits (header 1 s, body 2 s, idle 2 s),
so every phase of reading a request is probed the way a slowloris would.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, start_server

HEADER_S = 1.0
BODY_S = 2.0
IDLE_S = 2.0
# aiohttp keeps reading a half-sent body for up to 10 s after answering it, so the client
# sees the response before the close (its "lingering close").
LINGER_S = 10.0
SLACK_S = 2.0
CHAT_HEAD = (
    "POST /v3/chat/completions HTTP/1.1\r\nHost: test\r\n"
    "Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
)


@pytest.fixture(scope="module")
def strict_server(tiny_llm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(
        tmp_path_factory.mktemp("slow-clients"),
        tiny_llm,
        "--header_timeout", str(HEADER_S),
        "--body_timeout", str(BODY_S),
        "--keep_alive_timeout", str(IDLE_S),
    )  # fmt: skip
    yield server
    server.stop()


def connect(server: Server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=30)


def read_until_closed(sock: socket.socket, limit_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    started = time.monotonic()
    sock.settimeout(limit_s)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for more than {limit_s} s; got {received[:200]!r}")
    except ConnectionResetError:
        pass
    return received, time.monotonic() - started


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    """One HTTP/1.1 response with a Content-Length body: (status, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed mid-response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), body


def chat_body(**extra: object) -> bytes:
    payload = {"model": "tiny-llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **extra}
    return json.dumps(payload).encode()


def test_partial_request_head_gets_408_and_is_dropped_after_header_timeout(strict_server: Server) -> None:
    with connect(strict_server) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: test\r\n")
        started = time.monotonic()
        # One header line now and then, as slowloris does to reset naive idle timers.
        try:
            while time.monotonic() - started < HEADER_S + SLACK_S:
                sock.sendall(b"X-Drip: 1\r\n")
                time.sleep(0.2)
        except (BrokenPipeError, ConnectionResetError):
            pass
        received, _ = read_until_closed(sock, SLACK_S)
        elapsed = time.monotonic() - started
    assert received.startswith(b"HTTP/1.1 408"), received
    error = json.loads(received.partition(b"\r\n\r\n")[2])["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "request_timeout"
    # Not before the timeout; the 408 itself (read while the client still dripped) shows it came.
    assert elapsed > HEADER_S * 0.8


def test_dripped_body_gets_408_in_openai_shape_then_close(strict_server: Server) -> None:
    body = chat_body()
    with connect(strict_server) as sock:
        sock.sendall(CHAT_HEAD.format(length=len(body)).encode())
        started = time.monotonic()
        sock.sendall(body[:5])
        sock.settimeout(0.3)
        answer = b""
        for byte in body[5:]:
            try:
                answer = sock.recv(65536)
            except TimeoutError:
                sock.sendall(bytes([byte]))
                continue
            break
        elapsed = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 408"), answer
        # Not before the timeout; a server that never cut would have read the whole body (a 200).
        assert elapsed > BODY_S * 0.8
        rest, _ = read_until_closed(sock, LINGER_S + SLACK_S)
    error = json.loads((answer + rest).partition(b"\r\n\r\n")[2])["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "request_timeout"
    assert "body" in error["message"]


def test_idle_keep_alive_connection_is_closed(strict_server: Server) -> None:
    with connect(strict_server) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: test\r\n\r\n")
        status, _ = read_response(sock)
        assert status == 200
        received, idle = read_until_closed(sock, IDLE_S + SLACK_S)
    assert received == b""
    assert idle > IDLE_S * 0.8


def test_connection_that_never_sends_a_byte_is_closed(strict_server: Server) -> None:
    with connect(strict_server) as sock:
        received, idle = read_until_closed(sock, IDLE_S + SLACK_S)
    assert received == b""
    assert idle > IDLE_S * 0.8


def test_slow_but_legit_client_within_the_limits_is_served_twice_on_one_connection(strict_server: Server) -> None:
    body = chat_body()
    with connect(strict_server) as sock:
        for _ in range(2):
            head = CHAT_HEAD.format(length=len(body)).encode()
            for part in (head[:20], head[20:60], head[60:]):  # the head over ~0.6 s < 1 s
                sock.sendall(part)
                time.sleep(0.3)
            for start in range(0, len(body), len(body) // 4 + 1):  # the body over ~1.2 s < 2 s
                sock.sendall(body[start : start + len(body) // 4 + 1])
                time.sleep(0.3)
            status, answer = read_response(sock)
            assert status == 200, answer
            assert json.loads(answer)["choices"][0]["message"]["role"] == "assistant"
            time.sleep(IDLE_S / 2)  # idle, but under the keep-alive limit


def test_large_body_from_a_local_client_is_read_within_body_timeout(strict_server: Server) -> None:
    # Just under the default --max_request_mb (16), in a field that costs nothing to serve.
    body = chat_body(user="u" * (15 * 1024 * 1024))
    response = httpx.post(
        f"{strict_server.url}/v3/chat/completions",
        content=body,
        headers={"Content-Type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 200, response.text[:300]


def test_long_sse_stream_is_not_cut_by_any_timeout(strict_server: Server) -> None:
    # The client reads slowly, so the response stays in flight longer than every limit together.
    deadline = HEADER_S + BODY_S + IDLE_S + SLACK_S
    body = {
        "model": "tiny-llm",
        "messages": [{"role": "user", "content": "hi"}],
        # More tokens than the reads below need: the detokenizer may merge tokens into fewer chunks.
        "max_tokens": 120,
        "stream": True,
        "ignore_eos": True,
    }
    started = time.monotonic()
    with httpx.stream("POST", f"{strict_server.url}/v3/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        lines = []
        for line in response.iter_lines():
            if line.startswith("data: "):
                lines.append(line)
                if time.monotonic() - started <= deadline:
                    time.sleep(deadline / 40)
    assert time.monotonic() - started > deadline
    assert lines[-1] == "data: [DONE]"
    finish = [json.loads(line[6:])["choices"][0].get("finish_reason") for line in lines[:-1] if '"choices"' in line]
    assert "length" in finish


def test_server_stays_live_while_200_slowloris_sockets_are_open(strict_server: Server) -> None:
    sockets = [connect(strict_server) for _ in range(200)]
    try:
        for sock in sockets:
            sock.sendall(b"POST /v3/chat/completions HTTP/1.1\r\nHost: test\r\n")
        response = httpx.get(f"{strict_server.url}/v2/health/live", timeout=HEADER_S)
        assert response.status_code == 200
        for sock in sockets:
            received, _ = read_until_closed(sock, HEADER_S + 2 * SLACK_S)
            assert received.startswith(b"HTTP/1.1 408")
    finally:
        for sock in sockets:
            sock.close()
    assert httpx.get(f"{strict_server.url}/v2/health/live", timeout=5).status_code == 200
