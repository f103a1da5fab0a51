"""With API keys configured, a caller without a valid key learns no served model's name.

Every route of the app (read from its router, so a route added later is covered), every method
it answers, with plausible bodies and unknown model names; then paths and methods no route
answers; then the same during a drain. No answer's body or headers may contain a served name.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from aiohttp import web

from ovserve.api import keys
from tests.fast.harness import fast_model

# Names that cannot appear in an answer by accident.
SERVED = ("zq-private-llm", "zq-private-embedder")
UNKNOWN = "no-such-model"

# Enough fields for any JSON route to get past its parsing, were it to be reached.
_JSON_BODY: dict[str, Any] = {
    "model": UNKNOWN,
    "messages": [{"role": "user", "content": "hi"}],
    "prompt": "hi",
    "input": "hi",
    "query": "hi",
    "documents": ["hi"],
    "tokens": [1, 2],
    "max_tokens": 4,
    "name": UNKNOWN,
    "voice": "alloy",
}


def _path(canonical: str) -> str:
    return canonical.replace("{name}", UNKNOWN).replace("{response_id}", "resp_unknown")


def _form() -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("model", UNKNOWN)
    form.add_field("file", b"RIFF....WAVE", filename="a.wav", content_type="audio/wav")
    return form


def _requests(app: web.Application) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, request keyword arguments) for every route, then for no route."""
    sent: list[tuple[str, str, dict[str, Any]]] = []
    for route in app.router.routes():
        canonical = route.resource.canonical if route.resource is not None else None
        if canonical is None:
            continue
        path = _path(canonical)
        if route.method in ("GET", "HEAD", "DELETE"):
            sent.append((route.method, path, {}))
            sent.append((route.method, path + "?model=" + UNKNOWN, {}))
        elif "/audio/transcriptions" in path or "/audio/translations" in path:
            sent.append((route.method, path, {"data": _form()}))
        else:
            sent.append((route.method, path, {"json": _JSON_BODY}))
            sent.append((route.method, path, {"data": b"{not json", "headers": {"Content-Type": "application/json"}}))
            sent.append((route.method, path, {"json": _JSON_BODY, "headers": {"anthropic-version": "2023-06-01"}}))
        # The wrong method on a served path: a 405.
        sent.append(("PATCH", path, {"json": _JSON_BODY}))
    # No route at all: 404s, in each dialect's shape.
    for path in ("/v3/nothing", "/v1/models/x/y", "/api/nothing", "/v2/models/" + UNKNOWN, "/v2/models/x/ready/y"):
        sent.append(("GET", path, {}))
        sent.append(("POST", path, {"json": _JSON_BODY}))
    return sent


async def _leaks(client: Any, app: web.Application, credentials: dict[str, str]) -> list[str]:
    leaks: list[str] = []
    for method, path, kwargs in _requests(app):
        kwargs = {**kwargs, "headers": {**kwargs.get("headers", {}), **credentials}}
        if "data" in kwargs and isinstance(kwargs["data"], aiohttp.FormData):
            kwargs["data"] = _form()  # a FormData is consumed by one request
        async with client.request(method, path, **kwargs) as response:
            body = await response.read()
            headers = json.dumps(list(response.headers.items()))
            assert response.status in (200, 204, 401, 404, 405, 503, 529), (method, path, response.status, body)
            for name in SERVED:
                if name.encode() in body or name in headers:
                    leaks.append(f"{method} {path} ({response.status}): {body[:200]!r}")
    return leaks


async def test_no_answer_to_a_caller_without_a_key_names_a_served_model(serve) -> None:
    served = await serve(
        fast_model(name=SERVED[0]), fast_model(name=SERVED[1], task="embeddings"), api_key=["sk-private"]
    )
    client = served.client
    app = client.server.app
    assert len(_requests(app)) > 100  # the router's routes were found
    for credentials in ({}, {"Authorization": "Bearer wrong"}, {"x-api-key": "wrong"}):
        assert await _leaks(client, app, credentials) == []
    # During a drain the probes still answer and everything else is refused before the key check.
    app[keys.DRAIN].begin()
    assert await _leaks(client, app, {}) == []


async def test_model_readiness_lists_the_served_models_only_to_a_caller_with_a_key(serve) -> None:
    served = await serve(fast_model(name=SERVED[0]), api_key=["sk-private"])
    async with served.client.get(f"/v2/models/{UNKNOWN}/ready") as r:
        assert r.status == 404
        assert SERVED[0] not in await r.text()
    async with served.client.get(f"/v2/models/{UNKNOWN}/ready", headers={"Authorization": "Bearer sk-private"}) as r:
        assert r.status == 404
        assert f"available: {SERVED[0]}" in (await r.json())["error"]["message"]
    async with served.client.get(f"/v2/models/{SERVED[0]}/ready") as r:
        assert r.status == 200  # a probe that knows the name still gets its answer
