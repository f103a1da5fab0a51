"""A VLM request's admission (its vision encoder) never holds up the streams already running.

The engine adds a VLM request on its admission thread while the step loop keeps going. The
tiny test VLM encodes an image in milliseconds, so the slow-admission fault stands in for a large
image on a real model: the image request's ``add_request`` takes ``SLOW_ADMISSION_S`` longer.
Before the admission thread, that time was spent on the step thread and every running stream
waited for all of it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ovserve.engine.spec import SLOW_ADMISSION_ENV, SLOW_ADMISSION_S
from tests import images
from tests.conftest import Server, start_server

SLOW_MAX_TOKENS = 77


@pytest.fixture(scope="module")
def slow_vlm(tiny_vlm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(
        tmp_path_factory.mktemp("slow-vlm"),
        tiny_vlm,
        model_name="tiny-vlm",
        env={SLOW_ADMISSION_ENV: str(SLOW_MAX_TOKENS)},
    )
    yield server
    server.stop()


def _image_request(max_tokens: int) -> dict[str, object]:
    return {
        "model": "tiny-vlm",
        "max_tokens": max_tokens,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is in this picture?"},
                    {"type": "image_url", "image_url": {"url": images.data_url(images.solid(images.RED))}},
                ],
            }
        ],
    }


def _stream_arrivals(server: Server, arrivals: list[float], started: threading.Event, stop: threading.Event) -> None:
    body = {
        "model": "tiny-vlm",
        "messages": [{"role": "user", "content": "tell a long story"}],
        "max_tokens": 1800,  # the tiny VLM's context is 2048 tokens
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream("POST", f"{server.url}/v3/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                arrivals.append(time.monotonic())
                if len(arrivals) == 5:
                    started.set()
                if stop.is_set():
                    return  # closing the connection cancels the rest


def _wait_idle(server: Server) -> None:
    deadline = time.monotonic() + 15
    while server.metric("ovserve_engine_requests") != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.metric("ovserve_engine_requests") == 0, server.log()


def test_text_streams_keep_their_cadence_while_an_image_request_is_admitted(slow_vlm: Server) -> None:
    arrivals: list[float] = []
    started, stop = threading.Event(), threading.Event()
    stream = threading.Thread(target=_stream_arrivals, args=(slow_vlm, arrivals, started, stop))
    stream.start()
    assert started.wait(30)
    sent = time.monotonic()
    answer = httpx.post(f"{slow_vlm.url}/v3/chat/completions", json=_image_request(SLOW_MAX_TOKENS), timeout=60)
    answered = time.monotonic()
    stop.set()
    stream.join(60)
    assert answer.status_code == 200, answer.text
    assert answered - sent >= SLOW_ADMISSION_S  # the fault really held the image request
    assert arrivals[-1] > answered, "the stream ended before the image request was answered"
    during = [b - a for a, b in itertools.pairwise(arrivals) if sent <= b <= answered]
    assert len(during) >= 10  # the stream kept producing tokens while the image was being admitted
    assert max(during) < SLOW_ADMISSION_S / 3
    _wait_idle(slow_vlm)


def test_an_image_request_cancelled_during_admission_leaves_nothing_running(slow_vlm: Server) -> None:
    body = {**_image_request(SLOW_MAX_TOKENS), "stream": True}
    url = f"{slow_vlm.url}/v3/chat/completions"
    with pytest.raises(httpx.ReadTimeout), httpx.stream("POST", url, json=body, timeout=0.5) as response:
        for _ in response.iter_lines():
            pass
    # The client is gone while add_request is still running; once it returns, the engine drops it.
    time.sleep(SLOW_ADMISSION_S)
    _wait_idle(slow_vlm)
    # The model still answers.
    after = httpx.post(f"{slow_vlm.url}/v3/chat/completions", json=_image_request(3), timeout=30)
    assert after.status_code == 200, after.text
