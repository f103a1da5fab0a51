"""The browser console's server side on the fast layer (docs/console.md): ``GET /`` decided by
``Accept`` (a browser gets the page, Ollama's clients keep their probe answer), the console's
security headers, ``--console false``, and the key-protected logs and info answers."""

from __future__ import annotations

import fnmatch
import json
import logging
import re

import pytest

from ovserve.api.console import wants_html
from ovserve.console import STATIC_DIR
from ovserve.console.log_ring import LogRing
from tests.conftest import ROOT
from tests.fast.harness import MODEL, fast_model

# What Chromium and Firefox send for a page.
BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
KEY = "sk-console"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.mark.parametrize(
    ("accept", "html"),
    [
        (BROWSER, True),
        ("text/html", True),
        ("application/xhtml+xml, text/html;q=0.9, */*;q=0.8", True),
        (None, False),  # Ollama's Go client probe, curl without -H
        ("", False),
        ("*/*", False),
        ("application/json", False),  # the ollama Python client
        ("application/json, text/html;q=0.5", False),
        ("text/html;q=0.5, */*", False),  # */* preferred
        ("text/html;q=0", False),  # "not text/html"
        ("text/html;q=oops", False),  # a malformed q-value is not a preference
        ("text/*", False),  # only an explicit text/html asks for the page
    ],
)
def test_only_an_accept_that_prefers_html_gets_the_console(accept: str | None, html: bool) -> None:
    assert wants_html(accept) is html


async def test_a_browser_gets_the_console_at_root_and_ollamas_probe_keeps_its_answer(serve) -> None:
    served = await serve(fast_model())
    async with served.client.get("/", headers={"Accept": BROWSER}) as r:
        assert r.status == 200 and r.content_type == "text/html"
        assert 'data-testid="api-key-input"' in await r.text()
        assert r.headers["Vary"] == "Accept"
        assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
    for headers in ({}, {"Accept": "*/*"}, {"Accept": "application/json"}):
        async with served.client.get("/", headers=headers, skip_auto_headers=["Accept"]) as r:
            assert (r.status, r.content_type, await r.text()) == (200, "text/plain", "Ollama is running"), headers
            assert r.headers["Vary"] == "Accept"
    async with served.client.head("/", headers={"Accept": BROWSER}) as r:
        assert r.status == 200 and r.content_type == "text/plain"  # HEAD is always the probe


async def test_console_answers_carry_a_strict_content_security_policy(serve) -> None:
    served = await serve(fast_model())
    for path in ("/console/", "/console/static/app.js", "/console/static/console.css", "/console/api/logs"):
        async with served.client.get(path) as r:
            assert r.status == 200, path
            policy = r.headers["Content-Security-Policy"]
            assert "default-src 'self'" in policy and "script-src 'self'" in policy
            assert "frame-ancestors 'none'" in policy and "unsafe" not in policy
            assert r.headers["X-Content-Type-Options"] == "nosniff"
            assert r.headers["Referrer-Policy"] == "no-referrer"
    async with served.client.get("/console/static/app.js") as r:
        assert r.content_type == "text/javascript"  # modules load only with a JavaScript type under nosniff
    async with served.client.get("/console", allow_redirects=False) as r:
        assert (r.status, r.headers["Location"]) == (302, "/console/")


@pytest.mark.parametrize("name", ["missing.js", "..%2Fapp.py", "%2E%2E%2F__init__.py", ".hidden"])
async def test_only_the_console_files_are_served(serve, name: str) -> None:
    served = await serve(fast_model())
    async with served.client.get(f"/console/static/{name}") as r:
        assert r.status == 404
        assert (await r.json())["error"]["code"] == "not_found"


async def test_with_a_key_the_page_is_open_but_names_no_model_and_its_data_needs_the_key(serve) -> None:
    served = await serve(fast_model(), api_key=[KEY])
    for path, headers in (("/", {"Accept": BROWSER}), ("/console/", {}), ("/console/static/models.js", {})):
        async with served.client.get(path, headers=headers) as r:
            assert r.status == 200, path
            assert MODEL not in await r.text()
    for path in ("/console/api/info", "/console/api/logs"):
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            async with served.client.get(path, headers=headers) as r:
                assert r.status == 401, path
                error = (await r.json())["error"]
                assert error["code"] in ("missing_api_key", "invalid_api_key") and MODEL not in error["message"]
    async with served.client.get("/console/api/info", headers=AUTH) as r:
        assert r.status == 200
        info = await r.json()
    assert info["models"] == [{"id": MODEL, "task": "text_generation", "device": "CPU"}]
    assert info["memory"] == {"budget_bytes": None, "in_use_bytes": info["memory"]["in_use_bytes"]}


async def test_console_false_leaves_root_to_ollama_and_every_console_path_404(serve) -> None:
    served = await serve(fast_model(), console=False)
    async with served.client.get("/", headers={"Accept": BROWSER}) as r:
        assert await r.text() == "Ollama is running"
    for path in ("/console", "/console/", "/console/static/app.js", "/console/api/logs", "/console/api/info"):
        async with served.client.get(path) as r:
            assert r.status == 404, path
            assert "error" in await r.json()


async def test_logs_show_the_servers_recent_warnings_and_errors_to_a_caller_with_the_key(serve) -> None:
    served = await serve(fast_model(), api_key=[KEY])
    logger = logging.getLogger("ovserve.console_test")
    logger.info("an info line is not kept")
    logger.warning("disk %s is %d%% full", "/srv", 97)
    try:
        raise ValueError("bad <b>thing</b>")
    except ValueError:
        logger.exception("the engine failed")
    async with served.client.get("/console/api/logs", headers=AUTH) as r:
        assert r.status == 200
        entries = [e for e in (await r.json())["data"] if e["logger"] == "ovserve.console_test"]
    assert [(e["level"], e["message"]) for e in entries] == [
        ("WARNING", "disk /srv is 97% full"),
        ("ERROR", "the engine failed | ValueError: bad <b>thing</b>"),
    ]
    assert all(isinstance(e["time"], float) for e in entries)


def test_the_log_ring_keeps_only_the_last_records() -> None:
    ring = LogRing(size=3)
    logger = logging.getLogger("ovserve.console_ring_test")
    logger.addHandler(ring)
    try:
        for index in range(5):
            logger.warning("line %d", index)
        logger.info("not kept")
    finally:
        logger.removeHandler(ring)
    assert [entry["message"] for entry in ring.snapshot()] == ["line 2", "line 3", "line 4"]


def test_the_page_has_no_inline_script_and_its_code_never_writes_html() -> None:
    """The CSP forbids inline script; and model output, log lines and error messages are hostile:
    the console's code inserts text only (textContent), never markup."""
    page = (STATIC_DIR / "index.html").read_text()
    assert all("src=" in tag for tag in re.findall(r"<script[^>]*>", page))
    assert not re.search(r"\son[a-z]+=", page)  # no inline event handlers either
    for referenced in re.findall(r'(?:src|href)="/console/static/([^"]+)"', page):
        assert (STATIC_DIR / referenced).is_file(), referenced
    for script in STATIC_DIR.glob("*.js"):
        code = script.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in code, f"{script.name} uses {sink}"


def test_the_wheel_ships_every_console_file() -> None:
    """pyproject's package data for ovserve.console covers each file the page needs (a file it
    missed would be a 404 after ``pip install``, never in a source checkout)."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    declared = re.search(r'^"ovserve\.console" = (\[.*\])$', pyproject, flags=re.MULTILINE)
    assert declared is not None, "[tool.setuptools.package-data] names no ovserve.console files"
    shipped = json.loads(declared.group(1))
    files = [path.relative_to(STATIC_DIR.parent).as_posix() for path in STATIC_DIR.rglob("*") if path.is_file()]
    assert files and all(any(fnmatch.fnmatch(name, pattern) for pattern in shipped) for name in files)
    assert all(path.parent == STATIC_DIR for path in STATIC_DIR.rglob("*"))  # static/* is one level deep
