"""Hostile image_url values: each gets a 4xx quickly, and nothing outside the policy is touched.

The server under test allows the host 127.0.0.1 and the directory ``root``. Evidence that
nothing else was reached, per case:

- the "evil" HTTP server on 127.0.0.2 logs every request; its log must stay empty;
- the allowed server's log must hold exactly the paths the case is expected to fetch;
- the canary outside ``root`` is a valid image: had ovserve read it, the request would have
  succeeded. Its access time is set far in the past and must be unchanged afterwards;
- policy refusals carry the code ``image_url_not_allowed``, which ovserve only raises before
  opening or connecting; a path that does not exist is refused with the very same message as one
  that does, so the filesystem cannot be probed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests import images
from tests.conftest import Server, contention_factor, free_port
from tests.e2e.conftest import MAX_IMAGE_MB, READ_TIMEOUT_S, TOTAL_TIMEOUT_S, MediaFiles
from tests.media_server import ENDLESS_LIMIT, MediaServer, NeverAccepts

NOT_ALLOWED = "image_url_not_allowed"
FETCH_FAILED = "image_fetch_failed"
TOO_LARGE = "image_too_large"
INVALID = "invalid_image"


@dataclass(frozen=True)
class Env:
    good: MediaServer
    evil: MediaServer
    files: MediaFiles
    never_accepts: NeverAccepts
    closed_port: int  # nothing listens there

    @property
    def g(self) -> str:  # the allowed origin
        return self.good.origin

    @property
    def e(self) -> str:  # the evil origin
        return self.evil.origin


@dataclass(frozen=True)
class Attack:
    name: str
    url: Callable[[Env], str]
    code: str
    good_paths: list[str] = field(default_factory=list)  # what the allowed server may see, in order
    within_s: float = 2.0
    message: str | None = None  # a fragment the error message must contain


ATTACKS = [
    # -- hosts ------------------------------------------------------------------------------------
    Attack("host not in the list", lambda env: f"{env.e}/img/red.png", NOT_ALLOWED, message="127.0.0.2"),
    Attack("name of an allowed IP", lambda env: f"http://localhost:{env.good.port}/img/red.png", NOT_ALLOWED),
    Attack(
        "userinfo: allowed@evil", lambda env: f"http://127.0.0.1@127.0.0.2:{env.evil.port}/img/red.png", NOT_ALLOWED
    ),
    Attack(
        "userinfo with password on the allowed host",
        lambda env: f"http://user:secret@127.0.0.1:{env.good.port}/img/red.png",
        NOT_ALLOWED,
    ),
    Attack("fragment: evil#@allowed", lambda env: f"{env.e}#@127.0.0.1/img/red.png", NOT_ALLOWED),
    Attack("backslash: evil\\@allowed", lambda env: f"{env.e}\\@127.0.0.1/img/red.png", NOT_ALLOWED),
    Attack("percent-encoded host", lambda env: f"http://127.0.0.%32:{env.evil.port}/img/red.png", NOT_ALLOWED),
    Attack("trailing dot", lambda env: f"http://127.0.0.1.:{env.good.port}/img/red.png", NOT_ALLOWED),
    Attack("decimal IP", lambda env: f"http://2130706434:{env.evil.port}/img/red.png", NOT_ALLOWED),
    Attack("hex IP", lambda env: f"http://0x7f000002:{env.evil.port}/img/red.png", NOT_ALLOWED),
    Attack("short IP", lambda env: f"http://127.2:{env.evil.port}/img/red.png", NOT_ALLOWED),
    Attack("octal IP", lambda env: f"http://0177.0.0.2:{env.evil.port}/img/red.png", NOT_ALLOWED),
    Attack("IPv6 loopback", lambda env: f"http://[::1]:{env.good.port}/img/red.png", NOT_ALLOWED),
    Attack("IPv4-mapped IPv6", lambda env: f"http://[::ffff:127.0.0.2]:{env.evil.port}/img/red.png", NOT_ALLOWED),
    Attack("space in the host", lambda env: f"http://127.0.0.1 .evil:{env.good.port}/img/red.png", NOT_ALLOWED),
    Attack("non-ASCII dots", lambda env: f"http://127\u30020\u30020\u30022:{env.evil.port}/img/red.png", NOT_ALLOWED),
    Attack("ftp scheme", lambda env: f"ftp://127.0.0.1:{env.good.port}/img/red.png", INVALID),
    # -- redirects --------------------------------------------------------------------------------
    Attack(
        "redirect to a disallowed host",
        lambda env: f"{env.g}/redirect?to={env.e}/img/red.png",
        NOT_ALLOWED,
        good_paths=["/redirect?to={evil}/img/red.png"],
    ),
    Attack(
        "redirect to a userinfo trick",
        lambda env: f"{env.g}/redirect?to=http://127.0.0.1@127.0.0.2:{env.evil.port}/img/red.png",
        NOT_ALLOWED,
        good_paths=["/redirect?to=http://127.0.0.1@127.0.0.2:{evil_port}/img/red.png"],
    ),
    Attack(
        "scheme-relative redirect to another host",
        lambda env: f"{env.g}/redirect?to=//127.0.0.2:{env.evil.port}/img/red.png",
        NOT_ALLOWED,
        good_paths=["/redirect?to=//127.0.0.2:{evil_port}/img/red.png"],
    ),
    Attack(
        "redirect to a local file",
        lambda env: f"{env.g}/redirect?to=file://{env.files.canary}",
        NOT_ALLOWED,
        good_paths=["/redirect?to=file://{canary}"],
    ),
    Attack("redirect loop", lambda env: f"{env.g}/loop", FETCH_FAILED, good_paths=["/loop"] * 6, message="redirects"),
    Attack(
        "one redirect too many",
        lambda env: f"{env.g}/chain/6",
        FETCH_FAILED,
        good_paths=[f"/chain/{hops}" for hops in range(6, 0, -1)],
    ),
    # -- slow and broken servers ------------------------------------------------------------------
    Attack(
        "server never answers",
        lambda env: f"{env.g}/hang",
        FETCH_FAILED,
        good_paths=["/hang"],
        within_s=READ_TIMEOUT_S + 2,
        message="timed out",
    ),
    Attack(
        "server drips bytes forever",
        lambda env: f"{env.g}/drip",
        FETCH_FAILED,
        good_paths=["/drip"],
        within_s=TOTAL_TIMEOUT_S + 2,
        message="timed out",
    ),
    Attack(
        "server never accepts the connection",
        lambda env: f"http://127.0.0.1:{env.never_accepts.port}/img/red.png",
        FETCH_FAILED,
        within_s=3,
    ),
    Attack("allowed host, closed port", lambda env: f"http://127.0.0.1:{env.closed_port}/img/red.png", FETCH_FAILED),
    Attack("HTTP 404", lambda env: f"{env.g}/img/missing.png", FETCH_FAILED, good_paths=["/img/missing.png"]),
    # -- sizes ------------------------------------------------------------------------------------
    Attack(
        "Content-Length over the cap (refused before reading)",
        lambda env: f"{env.g}/big",
        TOO_LARGE,
        good_paths=["/big"],
        within_s=READ_TIMEOUT_S,
    ),
    Attack(
        "body over the cap without Content-Length",
        lambda env: f"{env.g}/endless",
        TOO_LARGE,
        good_paths=["/endless"],
    ),
    Attack(
        "body just over the cap", lambda env: f"{env.g}/img/over-cap.png", TOO_LARGE, good_paths=["/img/over-cap.png"]
    ),
    Attack(
        "data URL over the cap",
        lambda env: images.data_url(b"\x89PNG" + b"\x00" * (MAX_IMAGE_MB * 1024 * 1024)),
        TOO_LARGE,
    ),
    Attack(
        "decompression bomb over http", lambda env: f"{env.g}/img/bomb.png", TOO_LARGE, good_paths=["/img/bomb.png"]
    ),
    Attack("bomb: 10000x10000 header", lambda env: images.data_url(images.png_header_only(10_000, 10_000)), TOO_LARGE),
    Attack("6000x6000 header", lambda env: images.data_url(images.png_header_only(6000, 6000)), TOO_LARGE),
    Attack("20000 px wide", lambda env: images.data_url(images.png_header_only(20_000, 2)), TOO_LARGE),
    Attack(
        "1 x 16384 strip (a memory bomb for the vision preprocessor)",
        lambda env: images.data_url(images.solid(images.RED, size=(16_384, 1))),
        INVALID,
        message="aspect ratio",
    ),
    # -- content ----------------------------------------------------------------------------------
    Attack("HTML instead of an image", lambda env: f"{env.g}/img/page.html", INVALID, good_paths=["/img/page.html"]),
    Attack("truncated PNG", lambda env: f"{env.g}/img/truncated.png", INVALID, good_paths=["/img/truncated.png"]),
    Attack("corrupt PNG", lambda env: images.data_url(images.corrupt_png()), INVALID),
    Attack("data URL of text", lambda env: "data:text/plain;base64,aGVsbG8=", INVALID),
    Attack("data URL, invalid base64", lambda env: "data:image/png;base64,iVBOR@@w0KGgo=", INVALID),
    Attack("data URL with a line break", lambda env: "data:image/png;base64,iVBORw0K\nGgo=", INVALID),
    Attack("data URL without base64", lambda env: "data:image/png,rawbytes", INVALID),
    Attack("prefix not anchored", lambda env: " " + images.data_url(images.solid(images.RED)), NOT_ALLOWED),
    Attack(
        "EPS (a format Pillow would hand to Ghostscript)",
        lambda env: images.data_url(b"%!PS-Adobe-3.0 EPSF-3.0\n"),
        INVALID,
    ),
    # -- local files ------------------------------------------------------------------------------
    Attack("'..' out of the root", lambda env: f"{env.files.root}/../outside/canary.png", NOT_ALLOWED),
    Attack("'..' to a missing file", lambda env: f"{env.files.root}/../outside/missing.png", NOT_ALLOWED),
    Attack("absolute path outside", lambda env: str(env.files.canary), NOT_ALLOWED),
    Attack("/etc/passwd", lambda env: "/etc/passwd", NOT_ALLOWED),
    Attack("/proc/self/environ", lambda env: "/proc/self/environ", NOT_ALLOWED),
    Attack("sibling sharing the root's prefix", lambda env: f"{env.files.base}/root-evil/red.png", NOT_ALLOWED),
    Attack("symlinked file escaping the root", lambda env: f"{env.files.root}/link-out.png", NOT_ALLOWED),
    Attack("symlinked directory escaping the root", lambda env: f"{env.files.root}/linkdir/canary.png", NOT_ALLOWED),
    Attack("relative path", lambda env: "outside/canary.png", NOT_ALLOWED),
    Attack("file URL outside", lambda env: env.files.canary.as_uri(), NOT_ALLOWED),
    Attack("file URL, encoded '..'", lambda env: f"file://{env.files.root}/%2e%2e/outside/canary.png", NOT_ALLOWED),
    Attack("file URL with a remote host", lambda env: f"file://127.0.0.2{env.files.root}/red.png", NOT_ALLOWED),
    Attack("NUL byte in the path", lambda env: f"{env.files.root}/red.png\x00.txt", NOT_ALLOWED),
    Attack("FIFO inside the root (must not hang)", lambda env: f"{env.files.root}/fifo.png", INVALID),
    Attack("directory inside the root", lambda env: f"{env.files.root}/sub", INVALID),
    Attack("missing file inside the root", lambda env: f"{env.files.root}/missing.png", INVALID),
    Attack("text file inside the root", lambda env: f"{env.files.root}/notes.txt", INVALID),
]


@pytest.fixture(scope="module")
def env(good_http: MediaServer, evil_http: MediaServer, media_files: MediaFiles) -> Iterator[Env]:
    never_accepts = NeverAccepts()
    yield Env(good_http, evil_http, media_files, never_accepts, closed_port=free_port())
    never_accepts.close()


def test_attack_table_is_large_enough() -> None:
    assert len(ATTACKS) >= 25
    assert len({attack.name for attack in ATTACKS}) == len(ATTACKS)


@pytest.mark.parametrize("attack", ATTACKS, ids=[attack.name for attack in ATTACKS])
def test_attack_is_refused_without_touching_anything(attack: Attack, env: Env, vlm_server: Server) -> None:
    canary = env.files.canary
    os.utime(canary, (1_000_000_000, canary.stat().st_mtime))  # atime in 2001: any read moves it
    url = attack.url(env)
    body = {
        "model": "tiny-vlm",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What is it?"}],
            }
        ],
        "max_tokens": 4,
    }
    started = time.monotonic()
    response = httpx.post(f"{vlm_server.url}/v3/chat/completions", json=body, timeout=30)
    elapsed = time.monotonic() - started

    assert 400 <= response.status_code < 500, response.text
    error = response.json()["error"]
    assert error["code"] == attack.code, error
    assert error["param"] == "messages.0.content.0.image_url"
    assert error["type"] == "invalid_request_error"
    if attack.message is not None:
        assert attack.message in error["message"]
    assert elapsed < attack.within_s * contention_factor(), f"took {elapsed:.1f} s"

    assert env.evil.paths() == []
    expected = [path.format(evil=env.e, evil_port=env.evil.port, canary=canary) for path in attack.good_paths]
    assert [httpx.URL(path).raw_path.decode() for path in env.good.paths()] == [
        httpx.URL(path).raw_path.decode() for path in expected
    ]
    assert canary.stat().st_atime == 1_000_000_000


def test_access_time_probe_sees_a_read(env: Env, vlm_server: Server) -> None:
    """Control for the canary check: a file the server does read gets a new access time."""
    allowed = env.files.root / "red.png"
    os.utime(allowed, (1_000_000_000, allowed.stat().st_mtime))
    body = {
        "model": "tiny-vlm",
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": str(allowed)}}]}],
        "max_tokens": 2,
    }
    response = httpx.post(f"{vlm_server.url}/v3/chat/completions", json=body, timeout=30)
    assert response.status_code == 200, response.text
    assert allowed.stat().st_atime > 1_000_000_000


def test_capped_download_stops_reading(env: Env, vlm_server: Server) -> None:
    """The cap is enforced while streaming: ovserve hangs up long before the body ends."""
    body = {
        "model": "tiny-vlm",
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"{env.g}/endless"}}]}],
    }
    response = httpx.post(f"{vlm_server.url}/v3/chat/completions", json=body, timeout=30)
    assert response.json()["error"]["code"] == TOO_LARGE
    deadline = time.monotonic() + 5
    while "/endless" not in env.good.bytes_sent and time.monotonic() < deadline:
        time.sleep(0.05)  # the handler records its count once the socket breaks
    # Socket buffers let the sender run a few MB ahead of the reader, not 200 MB.
    assert 0 < env.good.bytes_sent["/endless"] < 32 * 1024 * 1024 < ENDLESS_LIMIT


def test_one_forbidden_image_means_no_image_is_fetched(env: Env, vlm_server: Server) -> None:
    """All policy checks run before any download: the allowed URL is not fetched either."""
    content = [
        {"type": "image_url", "image_url": {"url": f"{env.g}/img/red.png"}},
        {"type": "image_url", "image_url": {"url": f"{env.e}/img/red.png"}},
    ]
    body = {"model": "tiny-vlm", "messages": [{"role": "user", "content": content}]}
    response = httpx.post(f"{vlm_server.url}/v3/chat/completions", json=body, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages.0.content.1.image_url"
    assert env.good.paths() == []
    assert env.evil.paths() == []


def test_too_many_images_fetch_nothing(env: Env, vlm_server: Server) -> None:
    """The count is checked with the policy, before any download (default cap: 16)."""
    content = [{"type": "image_url", "image_url": {"url": f"{env.g}/img/red.png"}}] * 17
    body = {"model": "tiny-vlm", "messages": [{"role": "user", "content": content}]}
    response = httpx.post(f"{vlm_server.url}/v3/chat/completions", json=body, timeout=30)
    assert response.status_code == 400
    assert "at most 16 images" in response.json()["error"]["message"]
    assert env.good.paths() == []


def test_server_still_serves_images_after_the_attacks(env: Env, vlm_server: Server) -> None:
    completion = vlm_server.client().chat.completions.create(
        model="tiny-vlm",
        messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"{env.g}/img/red.png"}}]}],  # type: ignore[list-item]
        max_tokens=4,
    )
    assert completion.choices[0].message.content is not None
    assert env.good.paths() == ["/img/red.png"]
