"""API keys: who may use the server.

Contract:

- Keys come from ``--api_key`` (repeatable; ``OVSERVE_API_KEY`` adds one, see the settings
  schema) and ``--api_key_file`` (one key per line; blank lines and ``#`` comments ignored).
  The file is read again on SIGHUP and when its modification time changes (checked at most once
  a second, on requests), so keys rotate without a restart; a file that cannot be read keeps the
  last good keys and logs why.
- A request presents a key as ``Authorization: Bearer <key>`` (OpenAI, vLLM, llama.cpp, Jan;
  Anthropic's ``ANTHROPIC_AUTH_TOKEN``), ``x-api-key: <key>`` (Anthropic's SDKs) or ``api-key: <key>``
  (Azure AI Foundry). Keys are compared in constant time: both sides are
  hashed to a fixed length and every configured key is compared, whatever matches.
- Missing or wrong → 401 with ``WWW-Authenticate: Bearer``, in the route's error shape (OpenAI's;
  Anthropic's ``authentication_error`` on its routes); never a 500.
- Health probes stay open (Kubernetes and load balancers carry no keys). ``/metrics`` needs a key
  unless ``--metrics_public``. ``/health`` answers without a key but then lists no model names;
  nor does an unknown name's 404 on ``/v2/models/{name}/ready``: no answer to a caller without a
  key names a served model (``tests/fast/test_api_key_privacy.py`` asks every route).
- Keys are never logged: only how many are configured and where they came from.
- Every refused key is counted (:class:`FailedAuthentications`: ``ovserve_auth_failures_total`` by
  reason) and logged as a WARNING with the peer's address, at most once a minute (a brute force of
  thousands of keys is a few lines, each saying how many failures it stands for).
- Who called: on every request it lets through to a handler other than the open paths above,
  the middleware puts :data:`CALLER` on the request: :func:`caller_digest` of the key presented
  (one key, one caller: what stored responses belong to), or None when the server has no keys
  (everyone is the same caller). Handlers of the open paths must not read it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Middleware

from ovserve.errors import AuthenticationError

log = logging.getLogger(__name__)

# Paths that answer without a key: liveness/readiness probes.
_FILE_CHECK_INTERVAL_S = 1.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The caller's identity, for handlers: caller_digest(key), or None on a server without keys.
CALLER: web.RequestKey[str | None] = web.RequestKey("caller")


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def caller_digest(key: str) -> str:
    """A stable, non-reversible name for ``key``, safe to store: SHA-256 hex of a fixed prefix and
    the key (the prefix keeps it apart from the plain SHA-256 used to compare keys). Stable across
    restarts and key files, so a response stored under a key stays that key's; it names the key,
    not its holder: a removed key's responses belong to nobody any more."""
    return hashlib.sha256(b"ovserve caller\0" + key.encode("utf-8", "surrogatepass")).hexdigest()


def _keys_from_file(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


class ApiKeys:
    """The configured keys; empty means the server is open to anyone who reaches it."""

    def __init__(self, keys: Iterable[str] = (), key_file: Path | None = None) -> None:
        self._static = [key for key in keys if key]
        self._file = key_file
        self._file_mtime: float | None = None
        self._file_keys: list[str] = []
        self._next_check = 0.0
        self._digests: list[bytes] = []
        if key_file is not None:
            # At startup an unreadable key file is the operator's mistake: fail loudly.
            self._file_keys = _keys_from_file(key_file)
            self._file_mtime = key_file.stat().st_mtime
        self._rebuild()

    def _rebuild(self) -> None:
        self._digests = [_digest(key) for key in [*self._static, *self._file_keys]]

    @property
    def enabled(self) -> bool:
        return bool(self._digests) or self._file is not None

    def __len__(self) -> int:
        return len(self._digests)

    def reload(self) -> None:
        """Read the key file again (SIGHUP, or its modification time changed)."""
        if self._file is None:
            return
        try:
            mtime = self._file.stat().st_mtime
            keys = _keys_from_file(self._file)
        except (OSError, UnicodeError) as exc:
            log.error("cannot reread the API key file %s (%s); keeping the %d keys in use", self._file, exc, len(self))
            return
        self._file_keys, self._file_mtime = keys, mtime
        self._rebuild()
        log.info("API keys reloaded from %s: %d key(s) in use", self._file, len(self))

    def _reload_if_changed(self) -> None:
        if self._file is None:
            return
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + _FILE_CHECK_INTERVAL_S
        try:
            changed = self._file.stat().st_mtime != self._file_mtime
        except OSError:
            changed = True  # reload() logs why it cannot read the file
        if changed:
            self.reload()

    def accepts(self, presented: str | None) -> bool:
        self._reload_if_changed()
        if presented is None:
            return False
        offered = _digest(presented)
        matched = False
        for digest in self._digests:  # no early exit: the time does not depend on which key matched
            matched |= hmac.compare_digest(offered, digest)
        return matched


def presented_key(request: web.Request) -> str | None:
    authorization = request.headers.get("Authorization")
    if authorization is not None:
        scheme, _, credentials = authorization.partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            return credentials.strip()
    for header in ("x-api-key", "api-key"):
        api_key = request.headers.get(header)
        if api_key and api_key.strip():
            return api_key.strip()
    return None


def is_authorized(request: web.Request, keys: ApiKeys) -> bool:
    return not keys.enabled or keys.accepts(presented_key(request))


# At most one WARNING about refused keys per this many seconds.
_FAILURE_LOG_INTERVAL_S = 60.0


class FailedAuthentications:
    """Refused keys: counted by reason, logged with the peer's address (never the key), at most
    one line per minute."""

    def __init__(self, count: Callable[[str], None], *, interval_s: float = _FAILURE_LOG_INTERVAL_S) -> None:
        self._count = count
        self._interval_s = interval_s
        self._last_logged: float | None = None
        self._unlogged = 0  # failures since the last line
        self._peers: dict[str, int] = {}

    def record(self, reason: str, peer: str | None) -> None:
        self._count(reason)
        self._unlogged += 1
        where = peer or "unknown"
        self._peers[where] = self._peers.get(where, 0) + 1
        now = time.monotonic()
        if self._last_logged is not None and now - self._last_logged < self._interval_s:
            return
        busiest = sorted(self._peers.items(), key=lambda item: -item[1])[:3]
        peers = ", ".join(f"{address} ({count})" for address, count in busiest)
        log.warning(
            "%d request(s) refused for a missing or wrong API key%s; from %s",
            self._unlogged,
            f" in the last {now - self._last_logged:.0f} s" if self._last_logged is not None else "",
            peers,
        )
        self._last_logged, self._unlogged, self._peers = now, 0, {}


def auth_middleware(
    keys: ApiKeys, *, is_open: Callable[[web.Request], bool], failures: FailedAuthentications
) -> Middleware:
    """Refuses a request without a valid key (401) unless ``is_open`` says its route needs none."""

    @web.middleware
    async def check_key(request: web.Request, handler: Handler) -> web.StreamResponse:
        if is_open(request):
            return await handler(request)
        if not keys.enabled:
            request[CALLER] = None
            return await handler(request)
        presented = presented_key(request)
        if keys.accepts(presented):
            assert presented is not None  # accepts() refuses a missing key
            request[CALLER] = caller_digest(presented)
            return await handler(request)
        failures.record("missing_key" if presented is None else "invalid_key", request.remote)
        if presented is None:
            raise AuthenticationError(
                "no API key: send 'Authorization: Bearer <key>' (or the 'x-api-key' or Azure's 'api-key' header)",
                code="missing_api_key",
            )
        raise AuthenticationError("the API key is not valid", code="invalid_api_key")

    return check_key
