"""The console's static files, served from memory by exact name, with the console's security headers.

Contract: :class:`ConsoleFiles` reads every file of ``static/`` once (a few tens of KB) and answers
a name it holds, else a 404 (``NotFoundError``); no request path is ever joined to a file-system
path. Every answer carries :data:`SECURITY_HEADERS` (a strict Content-Security-Policy: scripts and
styles from this origin only, no inline script, no framing; ``nosniff``; no referrer) and
``Cache-Control: no-cache``, so after an upgrade the page and its modules never mix versions.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Mapping
from pathlib import Path

from aiohttp import web

from ovserve.console import STATIC_DIR
from ovserve.errors import NotFoundError

PAGE = "index.html"
# blob: for the speech answer's <audio> and a recorded clip; data: for generated images (b64_json).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "media-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".svg": "image/svg+xml"}


def _static_files(directory: Path) -> dict[str, tuple[bytes, str]]:
    """Every file of ``directory`` (name -> body, content type), read once: a few tens of KB."""
    files = {}
    for path in sorted(directory.iterdir()):
        if path.is_file() and not path.name.startswith("."):
            content_type = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            files[path.name] = (path.read_bytes(), content_type)
    return files


class ConsoleFiles:
    """The page and its assets, served from memory by exact name (no path is ever joined)."""

    def __init__(self, directory: Path = STATIC_DIR) -> None:
        self._files = _static_files(directory)

    def response(self, name: str) -> web.Response:
        found = self._files.get(name)
        if found is None:
            raise NotFoundError(f"no console file {name[:80]!r}")
        body, content_type = found
        charset = "utf-8" if content_type.startswith(("text/", "image/svg")) else None
        response = web.Response(body=body, content_type=content_type, charset=charset)
        response.headers["Cache-Control"] = "no-cache"
        response.headers.update(SECURITY_HEADERS)
        return response
