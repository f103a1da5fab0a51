"""HTTP handlers of OpenAI's Batch API: ``POST /v1/batches``, ``GET /v1/batches`` and
``/v1/batches/{id}``, ``POST /v1/batches/{id}/cancel`` (also under ``/v3``), and the one way a
batch's line is answered.

The handlers touch only the batch runner and its store (``ovserve.dialects.openai.batches``); no
model work happens in them. A batch's lines are answered by :func:`line_answerer`: each body goes
through the request envelope's :func:`~ovserve.api.envelope.answer_body` with the :class:`Way` of
the same route an interactive request would take (``WAYS``), so a line is parsed, prepared,
admitted, leased, timed and counted exactly as the interactive request with the same body, and
its answer is the same JSON. Batches belong to the API key that created them.
"""

from __future__ import annotations

import json
import logging
from typing import Any, cast

from aiohttp import web

from ovserve.api import keys, responses, routes
from ovserve.api.envelope import Way, answer_body, caller_of, json_response, read_json_object, validated
from ovserve.api.sse import dumps
from ovserve.dialects.openai.batches.objects import BatchList, CreateBatchRequest, ListQuery
from ovserve.dialects.openai.batches.runner import Answerer
from ovserve.errors import OvserveError, error_body
from ovserve.json_types import JsonObject

log = logging.getLogger(__name__)

# The route each batch endpoint's lines take, as interactive requests to it do.
WAYS: dict[str, Way[Any]] = {
    "/v1/chat/completions": routes.CHAT,
    "/v1/completions": routes.COMPLETIONS,
    "/v1/embeddings": routes.EMBEDDINGS,
    "/v1/responses": responses.CREATE,
}


def line_answerer(app: web.Application) -> Answerer:
    """Answer one batch line for its owner: (status, JSON body), an error as OpenAI's error body."""

    async def answer(endpoint: str, body: JsonObject, owner: str) -> tuple[int, JsonObject]:
        try:
            answer = await answer_body(app, WAYS[endpoint], body, owner)
        except OvserveError as exc:
            return exc.status, cast(JsonObject, exc.body())
        except Exception:
            log.exception("a batch request to %s failed", endpoint)
            return 500, cast(JsonObject, error_body("internal server error; see the server log", "server_error"))
        # The answer's own JSON encoding, read back as data for the output line.
        return 200, json.loads(dumps(answer))

    return answer


async def create_batch(request: web.Request) -> web.Response:
    parsed = validated(CreateBatchRequest, await read_json_object(request))
    return json_response(await request.app[keys.BATCHES].create(parsed, owner=caller_of(request)))


async def get_batch(request: web.Request) -> web.Response:
    runner = request.app[keys.BATCHES]
    return json_response(await runner.get(request.match_info["batch_id"], owner=caller_of(request)))


async def cancel_batch(request: web.Request) -> web.Response:
    runner = request.app[keys.BATCHES]
    return json_response(await runner.cancel(request.match_info["batch_id"], owner=caller_of(request)))


async def list_batches(request: web.Request) -> web.Response:
    runner = request.app[keys.BATCHES]
    query = validated(ListQuery, dict(request.query))
    owner = caller_of(request)
    stored, more = await runner.store.page(query, owner=owner)
    batches = [runner.current(batch) for batch in stored]  # live counts where running
    return json_response(
        BatchList(
            object="list",
            data=batches,
            first_id=batches[0].id if batches else None,
            last_id=batches[-1].id if batches else None,
            has_more=more,
        )
    )
