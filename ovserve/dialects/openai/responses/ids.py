"""Response ids, and the replica hint they carry when each replica keeps its own store.

With the SQLite store (``memory`` or a file) a stored response exists only on the replica that
made it. Behind a router that does not keep a conversation on one replica, a
``previous_response_id`` or ``GET`` then lands on a replica that never saw it, and an unknown-id
404 leaves the client and the operator guessing. So each id carries a short hint of the replica
that made it, and another replica, not holding it, answers a 404 that says where the response is
and what fixes it (the adapter's message): sticky routing, or a shared store (``--responses_store
postgresql://...``), where any replica serves any id and ids carry no hint.

Shape: ``resp_`` + the hint (8 hex digits) + a random UUID (32 hex digits): OpenAI's prefix and
character set (its own ids are ``resp_`` and 48 hex digits; clients treat them as opaque), and the
hint at a fixed place, where a router could read it. The hint is the first 8 hex digits of the
SHA-256 of ``--replica_name`` (default: the host name and the port, :func:`default_replica_name`):
stable across restarts of the same replica, and it tells a client nothing about the replica (not
its host name). Ids of any other shape -- plain ``resp_`` + 32 hex digits, as before and with a
shared store -- name no replica and are looked up as they are.
"""

from __future__ import annotations

import hashlib
import re
import socket
import uuid
from dataclasses import dataclass

PREFIX = "resp_"
HINT_DIGITS = 8
_HINTED = re.compile(rf"{PREFIX}([0-9a-f]{{{HINT_DIGITS}}})[0-9a-f]{{32}}")


def default_replica_name(port: int) -> str:
    """The host name (a pod's name on Kubernetes) and the port: replicas on one machine differ too."""
    return f"{socket.gethostname()}:{port}"


def replica_hint(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:HINT_DIGITS]


def hint_in(response_id: str) -> str | None:
    """The replica hint ``response_id`` carries, if it has the hinted shape."""
    match = _HINTED.fullmatch(response_id)
    return match.group(1) if match else None


@dataclass(frozen=True)
class ResponseIds:
    """How this replica names its responses; ``hint`` None: without a hint (a shared store, or none)."""

    hint: str | None = None

    def new(self) -> str:
        return f"{PREFIX}{self.hint or ''}{uuid.uuid4().hex}"

    def elsewhere(self, response_id: str) -> str | None:
        """The hint of the replica that made ``response_id`` if that is another replica (None: this
        one, or an id without a hint, or this replica's ids carry none)."""
        if self.hint is None:
            return None
        hint = hint_in(response_id)
        return hint if hint is not None and hint != self.hint else None
