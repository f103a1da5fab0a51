"""HTTP handlers of Anthropic's Messages API: ``POST /v1/messages`` (also ``/v3``, and with
Claude Code's ``?beta=true``), ``POST /v1/messages/count_tokens``, and the Anthropic shapes of
``GET /v1/models`` for a request that carries ``anthropic-version``.

Both routes come in through the request envelope (``ovserve.api.envelope``: body, admission, lease,
deadline, metrics, disconnects); what differs is parsing (:func:`parse_messages_request`), the
stream's framing (an ``event:`` line naming each event's type) and the error shape (Anthropic's,
chosen per route by ``ovserve.api.table`` and written by the error middleware in ``ovserve.app``).

Options this server does not use (``context_management``, ``output_config``, ``service_tier``,
``container``, ``mcp_servers``... and ``anthropic-beta`` features) are accepted and ignored: each
name is logged once per server run, at INFO, so an agent that sends them on every turn does not
fill the log.
"""

from __future__ import annotations

from ovserve.api import keys
from ovserve.api.envelope import RequestView, Way, validated
from ovserve.api.sse import NamedEventWriter
from ovserve.dialects.anthropic.request import MessagesRequest, PromptRequest
from ovserve.json_types import JsonObject

ENDPOINT = "messages"


def _parse(request: RequestView, payload: JsonObject, model: type[PromptRequest]) -> PromptRequest:
    parsed = validated(model, payload)
    endpoint = request.app[keys.MESSAGES]
    endpoint.ignoring("options", parsed.unknown_fields())
    betas = request.headers.getall("anthropic-beta", [])
    endpoint.ignoring("beta features", (beta.strip() for header in betas for beta in header.split(",") if beta.strip()))
    return parsed


def parse_messages_request(request: RequestView, payload: JsonObject) -> MessagesRequest:
    parsed = _parse(request, payload, MessagesRequest)
    assert isinstance(parsed, MessagesRequest)
    return parsed


class MessagesWriter(NamedEventWriter):
    """Anthropic's stream: named events, and Anthropic's own ``ping`` event as the keep-alive (its
    SDKs and Claude Code read it as the API's; a comment would do for SSE, not for the dialect)."""

    keepalive = b'event: ping\ndata: {"type":"ping"}\n\n'


MESSAGES = Way(ENDPOINT, parse_messages_request, keys.MESSAGES, writer=MessagesWriter)
COUNT_TOKENS = Way("count_tokens", lambda request, payload: _parse(request, payload, PromptRequest), keys.COUNT_TOKENS)
