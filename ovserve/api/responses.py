"""HTTP handlers of the Responses API: ``POST /v3/responses``, ``GET`` and ``DELETE /v3/responses/{id}``.

Create comes in through the request envelope (``ovserve.api.envelope``: body, admission, lease,
deadline, metrics, disconnects); what differs is parsing (:func:`parse_responses_request`) and the
stream's shape (named events, ``response.failed`` on a failure after the first byte). ``GET`` and
``DELETE`` touch only the store.

Parsing: built-in tools are refused first with their own message; the fields the Responses API
owns are validated by :class:`~ovserve.dialects.openai.responses.request.ResponsesRequest`; every other field
goes through the chat field policy (``ovserve.api.field_policy``), so other servers' sampling
names are mapped, refused or ignored exactly as on ``/v3/chat/completions``. A validation error's
``param`` is the JSON path of the offending value (``input.2.content.0.image_url``).

Ownership: stored responses belong to the API key that created them (``envelope.caller_of``); another
key's ``GET``, ``DELETE`` or ``previous_response_id`` gets the same 404 as an unknown id.
"""

from __future__ import annotations

import logging

from aiohttp import web

from ovserve.api import keys
from ovserve.api.envelope import RequestView, Way, caller_of, json_response, validated
from ovserve.api.field_policy import Endpoint, apply_field_policy, parse_extra_parameters
from ovserve.api.sse import NamedEventWriter
from ovserve.dialects.openai.chat.request import ChatCompletionRequest
from ovserve.dialects.openai.responses.request import ResponsesRequest, builtin_tool_refusal
from ovserve.errors import BadRequestError, UnsupportedParameterError
from ovserve.json_types import JsonObject

log = logging.getLogger(__name__)

ENDPOINT = "responses"
# Fields only the Responses API has: validated by its model, never by the chat field policy (which
# would, e.g., drop "store" and "metadata" as chat metadata).
_OWNED = frozenset(ResponsesRequest.model_fields) - frozenset(ChatCompletionRequest.model_fields)
# Chat fields with a Responses equivalent: refused with a pointer rather than ignored.
_CHAT_ONLY = {
    "messages": "input",
    "response_format": "text.format",
    "max_completion_tokens": "max_output_tokens",
}


# OpenAI Responses fields that would change the output and have no equivalent here.
_UNSUPPORTED = {
    "conversation": "conversation objects are not supported; continue a response with previous_response_id",
    "prompt": "stored prompt templates are not supported; send instructions and input",
}


def parse_responses_request(request: RequestView, payload: JsonObject) -> ResponsesRequest:
    refusal = builtin_tool_refusal(payload.get("tools"))
    if refusal is not None:
        message, param = refusal
        raise UnsupportedParameterError(message, param=param)
    for name, why in _UNSUPPORTED.items():
        if payload.get(name) is not None:
            raise UnsupportedParameterError(f"'{name}' is not supported: {why}", param=name)
    for name, instead in _CHAT_ONLY.items():
        if name in payload:
            message = f"'{name}' is a chat completions field; the Responses API takes '{instead}'"
            raise BadRequestError(message, param=name)
    mode = parse_extra_parameters(request.headers.get("extra-parameters"))
    owned = {name: value for name, value in payload.items() if name in _OWNED}
    rest = {name: value for name, value in payload.items() if name not in _OWNED}
    cleaned, dropped = apply_field_policy(rest, Endpoint.CHAT, frozenset(ResponsesRequest.model_fields), mode)
    parsed = validated(ResponsesRequest, {**owned, **cleaned})
    ignored = sorted({*dropped, *parsed.unknown_fields()})
    if ignored:
        log.info("responses request to %r: ignoring fields %s", parsed.model, ignored)
    if parsed.include:
        log.info("responses request to %r: nothing to include for %s", parsed.model, parsed.include)
    return parsed


CREATE = Way(ENDPOINT, parse_responses_request, keys.RESPONSES, writer=NamedEventWriter)


async def get_response(request: web.Request) -> web.Response:
    endpoint = request.app[keys.RESPONSES]
    return json_response(await endpoint.retrieve(request.match_info["response_id"], owner=caller_of(request)))


async def delete_response(request: web.Request) -> web.Response:
    endpoint = request.app[keys.RESPONSES]
    return json_response(await endpoint.delete(request.match_info["response_id"], owner=caller_of(request)))
