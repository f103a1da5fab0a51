"""The recent warnings and errors of the ``ovserve`` logger, for the console's Logs view.

Contract: :class:`LogRing` is a ``logging.Handler`` at WARNING that keeps the last ``size`` records
(a bounded deque: memory never grows) as small dicts; :meth:`LogRing.snapshot` returns them oldest
first. It is attached to the ``ovserve`` logger while the app runs (``ovserve.app``). It costs
nothing per token: generation logs nothing at WARNING on its hot path, and a record is formatted
once, when it is logged. API keys are never logged (``ovserve.api.auth``), so none can reach it.
"""

from __future__ import annotations

import logging
import traceback
from collections import deque
from typing import TypedDict

DEFAULT_SIZE = 200
# A message longer than this is cut: one runaway record must not make the Logs answer huge.
MAX_MESSAGE_CHARS = 4000


class LogEntry(TypedDict):
    time: float  # Unix time
    level: str
    logger: str
    message: str


class LogRing(logging.Handler):
    """The last ``size`` records at WARNING and above."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        super().__init__(level=logging.WARNING)
        self._entries: deque[LogEntry] = deque(maxlen=size)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                # The exception's own line, not its traceback: the server log has the traceback.
                message += " | " + "".join(traceback.format_exception_only(record.exc_info[1])).strip()
        except Exception:  # a record whose arguments do not format: say so rather than drop it
            message = f"{record.msg!r} (its arguments did not format)"
        entry = LogEntry(time=record.created, level=record.levelname, logger=record.name, message=message)
        if len(message) > MAX_MESSAGE_CHARS:
            entry["message"] = message[:MAX_MESSAGE_CHARS] + " …"
        self._entries.append(entry)  # emit() runs under the handler's lock (Handler.handle)

    def snapshot(self) -> list[LogEntry]:
        """The records kept, oldest first (taken under the lock: records may arrive from threads)."""
        self.acquire()
        try:
            return list(self._entries)
        finally:
            self.release()
