"""Which Responses store ``--responses_store`` names, and what its users may call on either.

:class:`Store` is what the endpoint and ``/metrics`` use of a store. Two backends satisfy it with the
same semantics (owners, bounds with LRU eviction, ``store: false``, delete, faults counted and
raised as :class:`~ovserve.dialects.openai.responses.store.StoreFault`, never a failed generation):
:class:`~ovserve.dialects.openai.responses.store.ResponseStore`, one SQLite database (``memory``, a
file path, or ``none``: the embedded default), and
:class:`~ovserve.dialects.openai.responses.store_postgres.PostgresResponseStore`, a PostgreSQL
database several replicas share (a ``postgresql://`` or ``postgres://`` URL). The PostgreSQL driver
is an optional extra (``pip install ovserve[postgres]``): it is imported only for such a URL.
"""

from __future__ import annotations

from typing import Protocol

from ovserve.dialects.openai.responses.store import ResponseStore, StoredResponse
from ovserve.json_types import JsonObject

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class Store(Protocol):
    """A Responses store; every call but ``start`` and ``aclose`` may raise ``StoreFault``."""

    @property
    def enabled(self) -> bool: ...
    @property
    def failures(self) -> dict[str, int]: ...
    async def start(self) -> None: ...
    async def put(self, response: JsonObject, conversation: list[JsonObject], *, owner: str) -> bool: ...
    async def get(self, response_id: str, *, owner: str, conversation: bool = True) -> StoredResponse | None: ...
    async def delete(self, response_id: str, *, owner: str) -> bool: ...
    async def stats(self) -> tuple[int, int]: ...
    async def aclose(self) -> None: ...


def is_postgres(location: str) -> bool:
    return location.startswith(POSTGRES_SCHEMES)


def open_store(location: str, *, max_count: int, max_bytes: int) -> Store:
    """The store ``location`` names (a PostgreSQL URL, or what :class:`ResponseStore` takes)."""
    if is_postgres(location):
        from ovserve.dialects.openai.responses.store_postgres import PostgresResponseStore  # the optional extra

        return PostgresResponseStore(location, max_count=max_count, max_bytes=max_bytes)
    return ResponseStore(location, max_count=max_count, max_bytes=max_bytes)
