"""Which errors of the SQLite store are faults of its disk or file, and which of those leave its
connection usable.

A fault (a full or read-only disk, a deleted or unreadable file, an I/O error) is counted, logged
and raised as :class:`~ovserve.dialects.openai.responses.store_common.StoreFault` by the store
(:mod:`~ovserve.dialects.openai.responses.store`); any other error of sqlite3 -- a mistake in a
statement, a constraint -- is a bug and stays an error. Told apart by SQLite's result code, never
by an exception's message.
"""

from __future__ import annotations

import enum
import sqlite3


class _Code(enum.IntEnum):
    """SQLite's primary result codes of a disk or file fault (sqlite3.h; the sqlite3 module names
    them from Python 3.11 on). Not SQLITE_ERROR (1): that is a statement's own mistake."""

    PERM = 3
    BUSY = 5
    LOCKED = 6
    NOMEM = 7
    READONLY = 8
    IOERR = 10
    CORRUPT = 11
    FULL = 13
    CANTOPEN = 14
    PROTOCOL = 15
    NOTADB = 26


_FAULT_CODES = frozenset(_Code)
# Faults after which the connection is still sound: it reads on a read-only disk and writes again
# once the disk has room, so it is kept. Any other fault closes it (the next call opens a new one).
# Extended codes (READONLY_DBMOVED, ...) are not in it: they say the connection is stale.
CONNECTION_SURVIVES = frozenset({_Code.FULL, _Code.READONLY, _Code.BUSY})


def is_fault(exc: BaseException) -> bool:
    """A failure of the disk or the database file, as opposed to a mistake in a statement (SQL
    errors, constraints, misuse: those stay errors, a 500 with a traceback)."""
    if isinstance(exc, OSError):
        return True
    code = result_code(exc)
    if code is None:  # Python 3.10, or raised by hand: by class (SQLite raises CORRUPT and NOTADB as the base)
        return isinstance(exc, sqlite3.OperationalError) or type(exc) is sqlite3.DatabaseError
    return code & 0xFF in _FAULT_CODES


def result_code(exc: BaseException) -> int | None:
    """SQLite's (extended) result code of ``exc``, if it carries one."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code if isinstance(code, int) else None


def describe(exc: BaseException) -> str:
    name = getattr(exc, "sqlite_errorname", None)
    return f"{type(exc).__name__}: {exc}" + (f" ({name})" if name else "")
