"""Images for VLM requests: ``image_url`` resolution under the media policy, then decoding.

Deny by default (OVMS's ``--allowed_media_domains`` / ``--allowed_local_media_path`` contract):

- ``data:image/<type>;base64,<data>``: always allowed; strict base64.
- ``http(s)://``: only when the URL's host is listed exactly (``all`` allows any host). URLs are
  parsed strictly and cross-checked with yarl (aiohttp's own parser), so the host that was
  checked is the host that gets contacted: credentials, percent-encoded or non-canonical numeric
  hosts, backslashes and any disagreement between the parsers are refused. Redirects are
  followed by hand, re-checking every hop. Connect, read and total timeouts apply, and the size
  cap is enforced while streaming the body.
- local paths and ``file://`` URLs: only under the allowed directory. A path is refused from its
  text alone when it lexically leaves the root (no filesystem access at all), then resolved
  (``..`` and symlinks) and checked again before it is opened; the opened descriptor must be a
  regular file, and on Linux its real path is checked once more.

Every check that needs no I/O runs for all images of a request before anything is fetched, so a
request with one forbidden URL contacts no host at all.

Memory contract (a 33 KB request of 16 tiny PNGs of 5800 x 5800 px once took 5.7 GB): downloads
and reads run concurrently, each bounded by ``--max_image_mb``. Then every image's header is read
(Pillow decompresses nothing in ``Image.open``): per-image caps and the request's pixel budget
(``--max_image_pixels_per_request``) are checked before any pixel is decoded. Decoding is
sequential per request and at most :data:`DECODE_SLOTS` run at once in the process, each shrunk at
once towards the model's input (:class:`ovserve.models.vision.ImageTarget`; JPEGs are decoded at reduced
scale), and each image's encoded bytes are dropped once it is decoded. So at most
``DECODE_SLOTS`` full-size images are alive in the server, and only the small arrays cross to the
engine. Decoding (``ovserve.core.image_decode``: Pillow, a restricted set of formats) runs off the
event loop.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import logging
import os
import re
import stat
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import numpy as np
import yarl

from ovserve import __version__
from ovserve.core.conversation import Image as ImageRef
from ovserve.core.image_decode import decode_image, open_image
from ovserve.errors import MediaError, MediaFetchError, MediaNotAllowedError, MediaTooLargeError
from ovserve.models.vision import ImageTarget
from ovserve.settings.media import ALL_MEDIA_DOMAINS, MediaSettings

log = logging.getLogger(__name__)

MAX_REDIRECTS = 5
# Full-size decodes alive at once in the server process, across requests: one per core of a small
# edge machine. Each holds up to ~136 MB (MAX_IMAGE_PIXELS) for a fraction of a second.
DECODE_SLOTS = 2
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_CHUNK_BYTES = 64 * 1024

_DATA_URL = re.compile(r"data:(?P<mime>image/[a-z0-9.+-]+);base64,(?P<data>.*)", re.IGNORECASE | re.DOTALL)
_HTTP_URL = re.compile(r"(?P<scheme>https?)://(?P<authority>[^/?#]*)(?P<rest>[/?#].*)?", re.IGNORECASE | re.DOTALL)
_AUTHORITY = re.compile(r"(?P<host>[a-z0-9.-]+|\[[0-9a-f:.]+\])(?::(?P<port>[0-9]{1,5}))?", re.IGNORECASE)
_FILE_URL = re.compile(r"file://(?P<host>[^/]*)(?P<path>/.*)", re.IGNORECASE | re.DOTALL)
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]+:", re.IGNORECASE)
_PRINTABLE_ASCII = re.compile(r"[\x21-\x7e]+")
_NUMERIC_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+", re.IGNORECASE)


# -- where an image comes from (decided without I/O) ------------------------------------------


@dataclass(frozen=True)
class _Inline:
    payload: str  # base64 text, decoded off the event loop


@dataclass(frozen=True)
class _Remote:
    url: yarl.URL


@dataclass(frozen=True)
class _Local:
    path: Path  # absolute, lexically inside the root; not resolved yet


_Source = _Inline | _Remote | _Local


@dataclass(frozen=True)
class ImageRequest:
    """One image_url part, checked against the policy, not yet loaded."""

    param: str  # e.g. messages.0.content.1.image_url: where errors point
    source: _Source


class MediaResolver:
    """Turns a request's image_url parts into RGB arrays under the media policy.

    ``start``/``close`` bracket the app's lifetime (one aiohttp session for all downloads).
    """

    def __init__(self, settings: MediaSettings) -> None:
        self.settings = settings
        self._allow_all = settings.allowed_media_domains == [ALL_MEDIA_DOMAINS]
        self._domains = frozenset(settings.allowed_media_domains)
        self._roots: tuple[Path, ...] = ()
        self._real_root: Path | None = None
        if settings.allowed_local_media_path is not None:
            given = Path(os.path.abspath(settings.allowed_local_media_path))
            self._real_root = given.resolve(strict=True)
            # Lexical checks accept the root as configured and as resolved (e.g. /tmp -> /private/tmp).
            self._roots = (given, self._real_root)
        self._session: aiohttp.ClientSession | None = None
        # One resolver per server process: this bounds full-size decodes across all requests.
        self._decode_slots = asyncio.Semaphore(DECODE_SLOTS)

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            # Redirects, decompression, cookies and proxies all change what gets contacted or how
            # much is read; none is left to the client library.
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            headers={"User-Agent": f"ovserve/{__version__}", "Accept": "image/*", "Accept-Encoding": "identity"},
            raise_for_status=False,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- policy (no I/O) ------------------------------------------------------------------------

    def plan(self, images: list[ImageRef], *, param: str) -> list[ImageRequest]:
        """Check every image of the conversation against the policy, in prompt order (``param``:
        what too many images names)."""
        if len(images) > self.settings.max_images_per_request:
            raise MediaError(
                f"at most {self.settings.max_images_per_request} images per request (--max_images_per_request)",
                param=param,
            )
        return [ImageRequest(image.origin, self.classify(image.url, image.origin)) for image in images]

    def classify(self, url: str, param: str) -> _Source:
        if not url:
            raise MediaError("image_url is empty", param=param)
        data = _DATA_URL.fullmatch(url)
        if data is not None:
            if len(data["data"]) > 4 * (self.settings.max_image_bytes // 3 + 1):
                raise MediaTooLargeError(self._too_large(), param=param)
            return _Inline(data["data"])
        if url[:5].lower() == "data:":
            raise MediaError("only base64 image data URLs are accepted (data:image/<type>;base64,...)", param=param)
        if _HTTP_URL.match(url):
            return _Remote(self.check_remote(url, param))
        if url[:5].lower() == "file:":
            return _Local(self._check_local(self._file_url_path(url, param), param))
        if _SCHEME.match(url):
            raise MediaError("unsupported image_url scheme (use data:, http(s)://, file:// or a path)", param=param)
        return _Local(self._check_local(url, param))

    def check_remote(self, url: str, param: str) -> yarl.URL:
        """The URL as aiohttp will use it, if its host is allowed; raises otherwise."""
        if not self._domains:
            raise MediaNotAllowedError(
                "image URLs are disabled on this server (start it with --allowed_media_domains)", param=param
            )
        # RFC 3986 URLs are printable ASCII: spaces, controls, backslashes and non-ASCII are
        # where parsers disagree about the host.
        if not _PRINTABLE_ASCII.fullmatch(url) or "\\" in url:
            raise MediaNotAllowedError("the image URL has characters a URL may not contain", param=param)
        parts = _HTTP_URL.fullmatch(url)
        authority = _AUTHORITY.fullmatch(parts["authority"]) if parts else None
        if parts is None or authority is None:
            # Userinfo ("allowed@evil"), percent-encoding and stray characters all land here.
            raise MediaNotAllowedError("the image URL's host part is not a plain host[:port]", param=param)
        host = authority["host"].lower().removeprefix("[").removesuffix("]")
        if host.endswith(".") or ".." in host:
            # "example.com." resolves like "example.com" but would not match its entry.
            raise MediaNotAllowedError(f"'{host}' is not a plain host name", param=param)
        if _ambiguous_numeric_host(host):
            raise MediaNotAllowedError(f"'{host}' is not a canonical IP address", param=param)
        if not self._allow_all and host not in self._domains:
            raise MediaNotAllowedError(f"host '{host}' is not in --allowed_media_domains", param=param)
        try:
            parsed = yarl.URL(url)
        except ValueError as exc:
            raise MediaNotAllowedError(f"the image URL cannot be parsed: {exc}", param=param) from None
        port = int(authority["port"]) if authority["port"] else None
        if (parsed.raw_host or "").lower() != host or (port is not None and parsed.port != port) or parsed.user:
            raise MediaNotAllowedError("the image URL is ambiguous", param=param)
        return parsed

    def _file_url_path(self, url: str, param: str) -> str:
        match = _FILE_URL.fullmatch(url)
        if match is None or match["host"].lower() not in {"", "localhost"}:
            raise MediaNotAllowedError("file URLs must be file:///absolute/path (or file://localhost/...)", param=param)
        if "?" in match["path"] or "#" in match["path"]:
            raise MediaError("file URLs may not have a query or fragment", param=param)
        return urllib.parse.unquote(match["path"])

    def _check_local(self, raw_path: str, param: str) -> Path:
        if self._real_root is None:
            raise MediaNotAllowedError(
                "local image paths are disabled on this server (start it with --allowed_local_media_path)",
                param=param,
            )
        if "\x00" in raw_path:
            raise MediaNotAllowedError("the image path contains a NUL byte", param=param)
        path = Path(raw_path)
        if not path.is_absolute():
            raise MediaNotAllowedError("local image paths must be absolute", param=param)
        # From the text alone: a path whose '..' climbs out of the root is refused before any
        # filesystem call. Resolving symlinks happens later, just before opening.
        normalized = Path(os.path.normpath(path))
        if not any(normalized.is_relative_to(root) for root in self._roots):
            raise MediaNotAllowedError(self._outside_root(), param=param)
        return path

    def _outside_root(self) -> str:
        # The same words whether or not the path exists: no probing of the filesystem.
        return "the image path is outside --allowed_local_media_path"

    def _too_large(self) -> str:
        return f"the image is larger than --max_image_mb ({self.settings.max_image_mb:g} MB)"

    # -- loading (I/O) -------------------------------------------------------------------------

    async def load(self, planned: list[ImageRequest], target: ImageTarget) -> list[np.ndarray]:
        """Fetch, check and decode every planned image; uint8 RGB arrays [H, W, 3] in order.

        Each array is shrunk towards ``target`` (never enlarged). See the module doc for the
        memory contract.
        """
        loop = asyncio.get_running_loop()
        encoded: list[bytes | None] = list(await self._fetch_all(planned))
        await loop.run_in_executor(None, self._check_pixel_budget, planned, encoded)
        arrays = []
        for index, item in enumerate(planned):
            data = encoded[index]
            assert data is not None
            async with self._decode_slots:
                arrays.append(await loop.run_in_executor(None, decode_image, data, item.param, target))
            # Up to --max_image_mb each: not kept for the rest of the request.
            encoded[index] = data = None
        return arrays

    async def _fetch_all(self, planned: list[ImageRequest]) -> list[bytes]:
        tasks = [asyncio.ensure_future(self._fetch(item)) for item in planned]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            # The first failure wins: stop the other downloads and collect their outcomes.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _fetch(self, item: ImageRequest) -> bytes:
        loop = asyncio.get_running_loop()
        source = item.source
        if isinstance(source, _Remote):
            return await self._download(source.url, item.param)
        if isinstance(source, _Inline):
            return await loop.run_in_executor(None, self._decode_base64, source.payload, item.param)
        return await loop.run_in_executor(None, self._read_local, source.path, item.param)

    def _check_pixel_budget(self, planned: list[ImageRequest], encoded: list[bytes | None]) -> None:
        """Per-image caps and the request's pixel budget, from the headers alone (runs in a thread)."""
        budget = self.settings.max_image_pixels_per_request
        total = 0
        for item, data in zip(planned, encoded, strict=True):
            assert data is not None
            with open_image(data, item.param) as image:
                width, height = image.size
            total += width * height
            if total > budget:
                raise MediaTooLargeError(
                    f"the request's images have {total} pixels up to this one ({width}x{height}); the limit is "
                    f"{budget} pixels per request (--max_image_pixels_per_request)",
                    param=item.param,
                )

    def _decode_base64(self, payload: str, param: str) -> bytes:
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise MediaError("the data URL is not valid base64", param=param) from None
        if len(data) > self.settings.max_image_bytes:
            raise MediaTooLargeError(self._too_large(), param=param)
        return data

    def _read_local(self, path: Path, param: str) -> bytes:
        assert self._real_root is not None  # _check_local refused the path otherwise
        real = path.resolve()
        if not real.is_relative_to(self._real_root):
            raise MediaNotAllowedError(self._outside_root(), param=param)
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            # O_NONBLOCK: opening a FIFO must not hang; it is refused as not a regular file below.
            fd = os.open(real, flags)
        except FileNotFoundError:
            raise MediaError("no such image file under --allowed_local_media_path", param=param) from None
        except OSError:
            raise MediaError("the image file cannot be opened", param=param) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise MediaError("the image path is not a regular file", param=param)
            proc_link = f"/proc/self/fd/{fd}"
            # A directory swapped for a symlink between resolve() and open() would escape; the
            # descriptor's real path cannot lie.
            if os.path.exists(proc_link) and not Path(os.readlink(proc_link)).is_relative_to(self._real_root):
                raise MediaNotAllowedError(self._outside_root(), param=param)
            if info.st_size > self.settings.max_image_bytes:
                raise MediaTooLargeError(self._too_large(), param=param)
            with os.fdopen(fd, "rb", closefd=False) as file:
                data = file.read(self.settings.max_image_bytes + 1)
        finally:
            os.close(fd)
        if len(data) > self.settings.max_image_bytes:
            raise MediaTooLargeError(self._too_large(), param=param)
        return data

    async def _download(self, url: yarl.URL, param: str) -> bytes:
        if self._session is None:
            raise RuntimeError("MediaResolver.start() was not awaited")
        settings = self.settings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.total_timeout_s
        for _ in range(MAX_REDIRECTS + 1):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            timeout = aiohttp.ClientTimeout(
                total=remaining, sock_connect=settings.connect_timeout_s, sock_read=settings.read_timeout_s
            )
            try:
                async with self._session.get(url, allow_redirects=False, timeout=timeout) as response:
                    if response.status in _REDIRECT_STATUSES:
                        url = self._redirect_target(url, response.headers.get("Location"), param)
                        continue
                    if response.status != 200:
                        raise MediaFetchError(f"fetching the image failed: HTTP {response.status}", param=param)
                    return await self._read_body(response, param)
            except asyncio.TimeoutError:
                raise MediaFetchError("fetching the image timed out", param=param) from None
            except (aiohttp.ClientError, ValueError) as exc:
                raise MediaFetchError(f"fetching the image failed: {type(exc).__name__}", param=param) from None
        else:
            raise MediaFetchError(f"fetching the image took more than {MAX_REDIRECTS} redirects", param=param)
        raise MediaFetchError("fetching the image timed out", param=param)

    def _redirect_target(self, current: yarl.URL, location: str | None, param: str) -> yarl.URL:
        if not location:
            raise MediaFetchError("the image URL redirected without a Location", param=param)
        try:
            target = str(current.join(yarl.URL(location)))
        except ValueError:
            raise MediaNotAllowedError("the image URL redirected to an unparsable location", param=param) from None
        if not _HTTP_URL.match(target):
            raise MediaNotAllowedError("the image URL redirected to a non-HTTP location", param=param)
        return self.check_remote(target, param)

    async def _read_body(self, response: aiohttp.ClientResponse, param: str) -> bytes:
        cap = self.settings.max_image_bytes
        if response.content_length is not None and response.content_length > cap:
            raise MediaTooLargeError(self._too_large(), param=param)  # refused before reading the body
        body = bytearray()
        async for chunk in response.content.iter_chunked(_CHUNK_BYTES):
            body += chunk
            if len(body) > cap:
                raise MediaTooLargeError(self._too_large(), param=param)
        return bytes(body)


def _ambiguous_numeric_host(host: str) -> bool:
    """Hosts like 2130706433, 0x7f.1 or 127.1 that the resolver reads as IPv4 addresses.

    Only canonical dotted quads (and IPv6 literals) are taken as IP addresses; anything else made
    of numeric labels would be matched against the allow-list as a name but connected to as an
    address.
    """
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return True
        return False
    labels = host.rstrip(".").split(".")
    if not all(_NUMERIC_LABEL.fullmatch(label) for label in labels):
        return False
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return True
    return False
