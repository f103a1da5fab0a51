"""Which Responses store ``--responses_store`` names, and what its users may call on either.

:class:`Store` is what the endpoint and ``/metrics`` use of a store. Two backends satisfy it with the
same semantics (owners, bounds with LRU eviction, ``store: false``, delete, faults counted and
raised as :class:`~ovserve.dialects.openai.responses.store.StoreFault`, never a failed generation):
:class:`~ovserve.dialects.openai.responses.store.ResponseStore`, one SQLite database (``memory``, a
file path, or ``none``: the embedded default), and
:class:`~ovserve.dialects.openai.responses.store_postgres.PostgresResponseStore`, a PostgreSQL
database several replicas share (a ``postgresql://`` or ``postgres://`` URL). The PostgreSQL driver
is an optional extra (``pip install ovserve[postgres]``): it is imported only for such a URL.

Settings that cannot work (the driver missing, a URL libpq cannot read, a password file that cannot
be read or given to a store that is not PostgreSQL) are :class:`StoreSettingError`:
:func:`check_store` tells the command line before any model loads, and :func:`open_store` refuses them.

Response ids (:func:`response_ids`): a store of this replica's own (``memory``, a file) gives them
this replica's hint (:mod:`~ovserve.dialects.openai.responses.ids`); a shared store, or none, plain ids.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from ovserve.clock import SYSTEM_CLOCK, Clock
from ovserve.dialects.openai.responses.ids import ResponseIds, replica_hint
from ovserve.dialects.openai.responses.store import DISABLED, ResponseStore, StoredResponse
from ovserve.dialects.openai.responses.store_common import StoreSettingError
from ovserve.json_types import JsonObject

log = logging.getLogger(__name__)

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


def check_store(location: str, password_file: Path | None = None) -> None:
    """StoreSettingError if :func:`open_store` would refuse these settings; opens nothing."""
    if not is_postgres(location):
        if password_file is not None:
            raise StoreSettingError(
                "--responses_store_password_file is the password of a PostgreSQL store, and --responses_store "
                "is not a postgresql:// URL"
            )
        return
    try:
        from ovserve.dialects.openai import postgres  # the optional extra
    except ImportError:
        raise StoreSettingError(
            "--responses_store: a PostgreSQL store needs its driver: pip install 'ovserve[postgres]'"
        ) from None
    postgres.check_url(location)
    if password_file is not None:
        postgres.PasswordFile(password_file)


def open_store(
    location: str,
    *,
    max_count: int,
    max_bytes: int,
    max_age: float | None = None,
    password_file: Path | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> Store:
    """The store ``location`` names (a PostgreSQL URL, or what :class:`ResponseStore` takes);
    ``max_age`` in seconds (None: no age bound); StoreSettingError as :func:`check_store`."""
    check_store(location, password_file)
    if is_postgres(location):
        from ovserve.dialects.openai.responses.store_postgres import PostgresResponseStore

        return PostgresResponseStore(
            location,
            max_count=max_count,
            max_bytes=max_bytes,
            max_age=max_age,
            password_file=password_file,
            clock=clock,
        )
    return ResponseStore(location, max_count=max_count, max_bytes=max_bytes, max_age=max_age, clock=clock)


def response_ids(location: str, replica_name: str) -> ResponseIds:
    """How this replica names its responses with the store ``location`` names."""
    if is_postgres(location) or location == DISABLED:
        return ResponseIds()
    ids = ResponseIds(replica_hint(replica_name))
    log.info(
        "responses store: this replica's own (%s); response ids carry its hint %s (--replica_name %s)",
        location,
        ids.hint,
        replica_name,
    )
    return ids
