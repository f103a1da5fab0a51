"""Memory of image requests: many large images in one request must not cost their full-size pixels.

Issue 10: 16 data-URL PNGs of 5800 x 5800 px (a 2 MB request, each image inside every per-image
cap) once peaked at 5.5 GB RSS in the server and 3.3 GB in the engine and left 3.7 GB allocated.
These tests send that request to tiny-vlm and watch both processes' VmRSS from /proc.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from ovserve.settings.media import MediaSettings
from tests import images
from tests.conftest import Server, contention_factor, start_server

SIDE = 5800  # 33.6 MP: under the 34 MP per-image cap
COUNT = 16  # the default --max_images_per_request
MB = 1024 * 1024
PEAK_ALLOWANCE = 1536 * MB  # above idle, server + engine
SETTLED_ALLOWANCE = 100 * MB  # above idle once the request is done
DEFAULT_BUDGET = MediaSettings().max_image_pixels_per_request


@pytest.fixture(scope="module")
def big_png_url() -> str:
    """A 5800 x 5800 RGB gradient: ~100 KB of PNG, ~136 MB once decoded by Pillow."""
    row = np.linspace(0, 255, SIDE, dtype=np.uint8)
    pixels = np.ascontiguousarray(np.broadcast_to(np.stack([row, row[::-1], row], axis=-1), (SIDE, SIDE, 3)))
    body = images.encode(Image.fromarray(pixels, "RGB"), "PNG", compress_level=9)
    return f"data:image/png;base64,{base64.b64encode(body).decode()}"


@pytest.fixture(scope="module")
def roomy_vlm_server(tiny_vlm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """tiny-vlm with a pixel budget that admits the 16 large images."""
    running = start_server(
        tmp_path_factory.mktemp("vlm-memory"),
        tiny_vlm,
        "--max_image_pixels_per_request",
        str(COUNT * SIDE * SIDE),
        model_name="tiny-vlm",
    )
    yield running
    running.stop()


def chat(server: Server, image_urls: list[str]) -> httpx.Response:
    parts: list[dict[str, Any]] = [{"type": "text", "text": "Describe these."}]
    parts += [{"type": "image_url", "image_url": {"url": url}} for url in image_urls]
    body = {"model": "tiny-vlm", "messages": [{"role": "user", "content": parts}], "max_tokens": 4, "temperature": 0}
    return httpx.post(f"{server.url}/v3/chat/completions", json=body, timeout=120)


def rss(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


class PeakSampler:
    """The largest summed RSS of some processes, sampled every 10 ms in a background thread."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.peak = rss(pids)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss(self.pids))
            time.sleep(0.01)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss(self.pids))


@pytest.mark.slow
def test_sixteen_large_pngs_cost_little_memory_and_all_of_it_comes_back(
    roomy_vlm_server: Server, big_png_url: str
) -> None:
    server = roomy_vlm_server
    pids = [server.process.pid, *server.engine_pids()]
    assert len(pids) == 2
    # A first image request makes the lazy first-use allocations (Pillow, the vision encoder).
    warm_up = chat(server, [images.data_url(images.solid(images.RED))])
    assert warm_up.status_code == 200, warm_up.text
    idle = rss(pids)

    with PeakSampler(pids) as sampler:
        response = chat(server, [big_png_url] * COUNT)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] is not None

    peak_growth = sampler.peak - idle
    assert peak_growth < PEAK_ALLOWANCE, f"peak {peak_growth / MB:.0f} MB above idle ({idle / MB:.0f} MB)"
    deadline = time.monotonic() + 10
    settled = rss(pids) - idle
    while settled > SETTLED_ALLOWANCE and time.monotonic() < deadline:
        time.sleep(0.2)
        settled = rss(pids) - idle
    assert settled < SETTLED_ALLOWANCE, f"{settled / MB:.0f} MB still allocated above idle ({idle / MB:.0f} MB)"


def test_default_pixel_budget_refuses_sixteen_large_pngs_before_decoding(vlm_server: Server, big_png_url: str) -> None:
    started = time.monotonic()
    response = chat(vlm_server, [big_png_url] * COUNT)
    elapsed = time.monotonic() - started

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "image_too_large"
    assert "--max_image_pixels_per_request" in error["message"]
    # The first image whose pixels take the running total over the budget; part 0 is the text.
    crossing = DEFAULT_BUDGET // (SIDE * SIDE) + 1
    assert error["param"] == f"messages.0.content.{crossing}.image_url"
    # Decoding these images takes several seconds; reading their headers takes milliseconds.
    assert elapsed < 5 * contention_factor(), f"the refusal took {elapsed:.1f} s"
