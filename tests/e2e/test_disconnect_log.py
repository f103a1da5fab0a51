"""A client that goes away is an ordinary event: one INFO line in the log, no traceback."""

from __future__ import annotations

import json
import socket
import struct
import time

import httpx

from tests.conftest import Server


def _drop_mid_stream(server: Server, *, reset: bool, stream: bool) -> None:
    body = json.dumps(
        {
            "model": "tiny-llm",
            "messages": [{"role": "user", "content": "Keep talking."}],
            "max_tokens": 800,
            "ignore_eos": True,
            "stream": stream,
        }
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(
            b"POST /v3/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        if stream:
            sock.recv(4096)  # the headers and first chunks have arrived
        time.sleep(0.3)
        if reset:  # RST instead of FIN, as a crashed client or a proxy timeout does
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_disconnects_are_logged_as_one_line_without_traceback(server: Server) -> None:
    before = server.log()
    for reset in (False, True):
        for stream in (False, True):
            _drop_mid_stream(server, reset=reset, stream=stream)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and server.metric("ovserve_inflight_requests") != 0:
        time.sleep(0.1)
    assert server.metric("ovserve_inflight_requests") == 0
    new_lines = server.log()[len(before) :].splitlines()
    assert not [line for line in new_lines if "Traceback" in line or "Error handling request" in line], new_lines
    disconnects = [line for line in new_lines if "client disconnected" in line]
    assert len(disconnects) == 4, new_lines
    assert all(" INFO " in line for line in disconnects)
    # Each counted once in /metrics, as a disconnect (unary: 499, the stream's status was 200).
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    counts = {
        status: sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("ovserve_requests_total{")
            and 'outcome="disconnected"' in line
            and f'status="{status}"' in line
        )
        for status in ("499", "200")
    }
    assert counts["499"] >= 2 and counts["200"] >= 2, counts
