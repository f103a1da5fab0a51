"""How the export talks to its user: the ``[export]`` progress lines, and the one error a user can fix.

The driver announces each stage of an export (``ovserve.export.progress``: ``[export] [i/N] ...``
lines, or a live line on a terminal); every step prints its details through :func:`stage` and
raises :class:`ExportError` for a problem the user can fix from its message; ``ovserve.export.run``
prints that message as one line and exits with status 2, and the repository is unchanged. Anything
else a step raises is a bug (exit status 1, with a traceback).
"""

from __future__ import annotations

from ovserve.export.progress import note


class ExportError(Exception):
    """A problem the user can fix: reported as one line, exit status 2, repository unchanged."""


def stage(message: str) -> None:
    """One ``[export] message`` line inside the stage running now (see ``ovserve.export.progress``)."""
    note(message)


def gb(size: float) -> str:
    return f"{size / 1024**3:.2f} GB"


def load_failure(exc: Exception) -> ExportError:
    """The error for an exported model OpenVINO cannot load as the server would: its message on one line."""
    detail = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())[:400]
    return ExportError(f"the exported model does not load in OpenVINO as the server loads it: {detail}")
