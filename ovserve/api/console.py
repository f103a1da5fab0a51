"""The browser console's routes (docs/console.md): the page, its static files, and the two small
key-protected JSON answers only the console needs.

Contract:

- ``GET /`` is shared with Ollama's liveness probe: a request whose ``Accept`` prefers ``text/html``
  (:func:`wants_html`: listed explicitly, with a q-value above 0 and at least that of ``*/*`` and of
  ``application/json``) gets the console page; anything else (no ``Accept``, ``*/*``, JSON, and every
  ``HEAD``) gets Ollama's ``Ollama is running``, byte for byte as before. Both answers say
  ``Vary: Accept``. With ``--console false`` everyone gets Ollama's answer and every ``/console/``
  path is a 404.
- The page and its files are open (no key) and hold no model name and no secret: the page's
  JavaScript asks the key-protected API for everything it shows, with the key the user typed.
  Only files in the package's ``static/`` directory are served, looked up by exact name.
- Every console answer carries a strict Content-Security-Policy (scripts and styles from this
  origin only, no inline script, no framing), ``X-Content-Type-Options: nosniff`` and
  ``Referrer-Policy: no-referrer``.
- ``GET /console/api/logs``: the recent warnings and errors (``ovserve.console.log_ring``);
  ``GET /console/api/info``: each served model's task and device, and the memory budget. Both need
  the API key as every other route does (the auth middleware), and answer errors in OpenAI's shape.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import hdrs, web
from aiohttp.helpers import parse_mimetype

from ovserve.api import keys, ollama
from ovserve.api.envelope import json_response
from ovserve.console.files import PAGE, SECURITY_HEADERS
from ovserve.errors import NotFoundError


def _quality(parameters: Mapping[str, str]) -> float:
    try:
        return min(max(float(parameters.get("q", "1")), 0.0), 1.0)
    except ValueError:
        return 0.0  # a malformed q-value counts as "not acceptable"


def wants_html(accept: str | None) -> bool:
    """Whether an ``Accept`` header prefers ``text/html`` (see the module's contract): a browser's
    ``text/html,...,*/*;q=0.8`` does; no header, ``*/*``, ``application/json`` do not."""
    if not accept:
        return False
    qualities: dict[str, float] = {}
    for item in accept.split(","):
        if not item.strip():
            continue
        media = parse_mimetype(item)
        name = f"{media.type}/{media.subtype}"
        qualities[name] = max(qualities.get(name, 0.0), _quality(media.parameters))
    html = qualities.get("text/html", 0.0)
    return html > 0 and html >= qualities.get("*/*", 0.0) and html >= qualities.get("application/json", 0.0)


def _enabled(request: web.Request) -> bool:
    return request.app[keys.SETTINGS].console


def _require_console(request: web.Request) -> None:
    if not _enabled(request):
        raise NotFoundError(f"no route for {request.method} {request.path} (the console is off: --console false)")


async def root(request: web.Request) -> web.Response:
    """``GET /``: the console for a browser, Ollama's liveness answer for everyone else."""
    if request.method == hdrs.METH_GET and _enabled(request) and wants_html(request.headers.get(hdrs.ACCEPT)):
        response = request.app[keys.CONSOLE_FILES].response(PAGE)
    else:
        response = await ollama.root(request)
    response.headers[hdrs.VARY] = hdrs.ACCEPT
    return response


async def redirect(request: web.Request) -> web.Response:
    """``/console`` -> ``/console/``: the page's relative links need the trailing slash."""
    _require_console(request)
    # Returned, not raised: the error middleware answers a raised HTTP exception only when it is an error.
    return web.Response(status=302, headers={hdrs.LOCATION: "/console/"})


async def page(request: web.Request) -> web.Response:
    _require_console(request)
    return request.app[keys.CONSOLE_FILES].response(PAGE)


async def static_file(request: web.Request) -> web.Response:
    _require_console(request)
    return request.app[keys.CONSOLE_FILES].response(request.match_info["file"])


def _with_headers(response: web.Response) -> web.Response:
    response.headers.update(SECURITY_HEADERS)
    response.headers["Cache-Control"] = "no-store"
    return response


async def logs(request: web.Request) -> web.Response:
    """The recent warnings and errors, oldest first."""
    _require_console(request)
    return _with_headers(json_response({"object": "list", "data": request.app[keys.CONSOLE_LOGS].snapshot()}))


async def info(request: web.Request) -> web.Response:
    """What ``/v3/models`` does not say and the Models view shows: each model's task and device,
    and the memory the loaded models take against ``--models_memory_budget``."""
    _require_console(request)
    residency = request.app[keys.RESIDENCY]
    models = [
        {"id": model.name, "task": model.task, "device": model.settings.device} for model in request.app[keys.MODELS]
    ]
    memory = {"budget_bytes": residency.budget, "in_use_bytes": residency.in_use()}
    return _with_headers(json_response({"models": models, "memory": memory}))
