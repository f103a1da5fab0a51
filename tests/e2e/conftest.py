"""VLM fixtures: tiny-vlm served with a media policy, local HTTP servers and a media directory.

The policy under test allows the host ``127.0.0.1`` and the directory ``<base>/root``. An "evil"
server listens on ``127.0.0.2`` (another loopback address, so another host as far as the policy
is concerned) and outside the root lies a canary image: a test that makes ovserve reach either
would see a 200 instead of a refusal, and the evil server's access log would not be empty.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from tests import images
from tests.conftest import Server, start_server
from tests.media_server import MediaServer

# Small caps and timeouts keep the hostile cases fast; the defaults are documented in the README.
MAX_IMAGE_MB = 1
CONNECT_TIMEOUT_S = 1
READ_TIMEOUT_S = 1
TOTAL_TIMEOUT_S = 3


@dataclass(frozen=True)
class MediaFiles:
    base: Path
    root: Path  # --allowed_local_media_path
    outside: Path  # a sibling of root, holding the canary
    canary: Path  # a valid image outside root: reading it would make the request succeed


@pytest.fixture(scope="session")
def tiny_vlm(demo_models: dict[str, Path]) -> Path:
    return demo_models["tiny-vlm"]


@pytest.fixture(scope="session")
def media_files(tmp_path_factory: pytest.TempPathFactory) -> MediaFiles:
    base = tmp_path_factory.mktemp("media")
    root, outside, sibling = base / "root", base / "outside", base / "root-evil"
    for directory in (root, outside, sibling, root / "sub"):
        directory.mkdir()
    (root / "red.png").write_bytes(images.solid(images.RED))
    (root / "blue.png").write_bytes(images.solid(images.BLUE))
    (root / "sub" / "blue.jpg").write_bytes(images.solid(images.BLUE, "JPEG"))
    (root / "notes.txt").write_text("not an image")
    (root / "link-inside.png").symlink_to(root / "blue.png")
    (root / "link-out.png").symlink_to(outside / "canary.png")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    os.mkfifo(root / "fifo.png")
    canary = outside / "canary.png"
    canary.write_bytes(images.solid(images.RED))
    (sibling / "red.png").write_bytes(images.solid(images.RED))
    return MediaFiles(base=base, root=root, outside=outside, canary=canary)


def _image_files() -> dict[str, tuple[str, bytes]]:
    return {
        "/img/red.png": ("image/png", images.solid(images.RED)),
        "/img/blue.png": ("image/png", images.solid(images.BLUE)),
        "/img/red.jpg": ("image/jpeg", images.solid(images.RED, "JPEG")),
        "/img/page.html": ("text/html", b"<html><body>an image?</body></html>"),
        "/img/truncated.png": ("image/png", images.truncated_png()),
        "/img/bomb.png": ("image/png", images.png_header_only(100_000, 100_000)),
        "/img/over-cap.png": ("image/png", b"\x89PNG" + b"\x00" * (MAX_IMAGE_MB * 1024 * 1024 + 10)),
    }


@pytest.fixture(scope="session")
def good_http() -> Iterator[MediaServer]:
    """The allowed host (127.0.0.1)."""
    server = MediaServer(host="127.0.0.1", files=_image_files()).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def evil_http() -> Iterator[MediaServer]:
    """A host outside the policy (127.0.0.2): its access log must stay empty."""
    server = MediaServer(host="127.0.0.2", files=_image_files()).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def vlm_server(tiny_vlm: Path, media_files: MediaFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(
        tmp_path_factory.mktemp("vlm-server"),
        tiny_vlm,
        "--allowed_media_domains",
        "127.0.0.1",
        "--allowed_local_media_path",
        str(media_files.root),
        "--max_image_mb",
        str(MAX_IMAGE_MB),
        "--media_connect_timeout",
        str(CONNECT_TIMEOUT_S),
        "--media_read_timeout",
        str(READ_TIMEOUT_S),
        "--media_timeout",
        str(TOTAL_TIMEOUT_S),
        model_name="tiny-vlm",
    )
    yield running
    running.stop()


@pytest.fixture()
def vlm_client(vlm_server: Server) -> openai.OpenAI:
    return vlm_server.client()


@pytest.fixture(autouse=True)
def _fresh_access_logs(request: pytest.FixtureRequest) -> None:
    """Each test sees only its own accesses on the local HTTP servers."""
    for name in ("good_http", "evil_http"):
        if name in request.fixturenames:
            request.getfixturevalue(name).clear()
