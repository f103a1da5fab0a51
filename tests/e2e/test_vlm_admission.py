"""A VLM request's admission (its vision encoder) never holds up the streams already running.

The engine adds a VLM request on its admission thread while the step loop keeps going. The
tiny test VLM encodes an image in milliseconds, so the slow-admission fault stands in for a large
image on a real model: the image request's ``add_request`` takes ``SLOW_ADMISSION_S`` longer.
Before the admission thread, that time was spent on the step thread and every running stream
waited for all of it.
"""

from __future__ import annotations

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


def _wait_idle(server: Server) -> None:
    deadline = time.monotonic() + 15
    while server.metric("ovserve_engine_requests") != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.metric("ovserve_engine_requests") == 0, server.log()


def test_text_requests_are_served_while_an_image_request_is_admitted(slow_vlm: Server) -> None:
    answers: dict[str, httpx.Response] = {}
    sent = time.monotonic()
    image = threading.Thread(
        target=lambda: answers.update(
            image=httpx.post(f"{slow_vlm.url}/v3/chat/completions", json=_image_request(SLOW_MAX_TOKENS), timeout=60)
        )
    )
    image.start()
    # The tiny image is decoded and sent to the engine within milliseconds; its admission then
    # takes SLOW_ADMISSION_S. (Polling the engine's metrics instead would need the engine loop to
    # answer, which is what a blocked admission would prevent.)
    time.sleep(SLOW_ADMISSION_S / 5)
    # A text request is added, generated and answered while the image is still being admitted.
    text_sent = time.monotonic()
    text = httpx.post(
        f"{slow_vlm.url}/v3/chat/completions",
        json={"model": "tiny-vlm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16},
        timeout=60,
    )
    text_done = time.monotonic()
    image.join(60)
    assert text.status_code == 200, text.text
    assert answers["image"].status_code == 200, answers["image"].text
    assert time.monotonic() - sent >= SLOW_ADMISSION_S  # the fault really held the image request
    # With the admission on the step thread, the text request waited for the rest of the admission,
    # so it could not be answered before the admission's end. A bound from that end, not from the
    # text request's own time: that stretches beside CPU-bound neighbours (0.62 s beside two).
    assert text_done - sent < SLOW_ADMISSION_S, f"text answered {text_done - text_sent:.2f} s after it was sent"
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
