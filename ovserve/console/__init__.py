"""The browser console's files and its server-side state (docs/console.md).

``static/`` holds the page (HTML, CSS, JavaScript modules): no build step, no CDN, shipped in the
wheel as package data; ``ovserve.api.console`` serves it. :mod:`ovserve.console.log_ring` keeps the
recent warnings and errors the console's Logs view shows. Nothing here knows a served model: the
page asks the key-protected API for everything it shows.
"""

from __future__ import annotations

from pathlib import Path

STATIC_DIR = Path(__file__).parent / "static"
