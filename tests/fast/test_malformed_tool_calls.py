"""A model that writes a broken tool call gets its text back as content, never a 500.

The scripted engine writes, in several families' formats, calls that are not calls: JSON that
does not parse, a call without a name, arguments that are not an object, output cut off inside
the call. The client must get a 200 whose content is exactly what the model wrote, no tool calls
and a finish reason of ``stop``, unary and streamed; the server logs why it was no call
(``ovserve.parsers.base``).
"""

from __future__ import annotations

import logging

import pytest

from ovserve.parsers import TOOL_PARSERS
from tests.fast.harness import choices_by_index, fast_model, streamed_text
from tests.fast.scripted_engine import reply

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}

# (tool parser, what the model wrote, in engine steps)
MALFORMED = [
    # Hermes: the JSON inside the tags does not parse.
    ("hermes3", ('<tool_call>\n{"name": "get_weather", ', '"arguments": {"city": }}\n</tool_call>')),
    # Hermes: valid JSON, but no name.
    ("qwen3", ("<tool_call>\n", '{"arguments": {"city": "Paris"}}\n</tool_call>')),
    # Mistral: output cut off inside the call list (max_tokens).
    ("mistral", ("[TOOL_CALLS][", '{"name": "get_weather", "arguments": {"city": "Par')),
    # Mistral v11: a name without [ARGS].
    ("mistral", ("[TOOL_CALLS]get_weather", '{"city": "Paris"}')),
    # Phi-4: arguments that are not an object.
    ("phi4", ("functools[", '{"name": "get_weather", "arguments": ["Paris"]}]')),
    # Llama 3: parameters given as a string that is not JSON.
    ("llama3", ('{"name": "get_weather", ', '"parameters": "city=Paris"}')),
]


@pytest.mark.parametrize(("parser", "pieces"), MALFORMED, ids=[f"{p}-{i}" for i, (p, _) in enumerate(MALFORMED)])
async def test_a_malformed_call_comes_back_as_content_with_a_warning(serve, messages, caplog, parser, pieces) -> None:
    text = "".join(pieces)
    served = await serve(fast_model(reply(*pieces), tool_format=TOOL_PARSERS[parser]))

    with caplog.at_level(logging.WARNING, logger="ovserve.parsers"):
        status, body = await served.chat(messages=messages, tools=[WEATHER_TOOL])
    assert status == 200, body
    (choice,) = body["choices"]
    assert choice["message"]["content"] == text
    assert "tool_calls" not in choice["message"] or not choice["message"]["tool_calls"]
    assert choice["finish_reason"] == "stop"
    warnings = [record for record in caplog.records if record.name.startswith("ovserve.parsers")]
    assert warnings and all(record.levelno == logging.WARNING for record in warnings)
    assert "returned as content" in warnings[0].getMessage()

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ovserve.parsers"):
        status, events = await served.chat(messages=messages, tools=[WEATHER_TOOL], stream=True)
    assert status == 200
    assert events[-1] == "[DONE]"
    (chunks,) = choices_by_index(events).values()
    assert streamed_text(chunks) == text
    assert not any(chunk["delta"].get("tool_calls") for chunk in chunks)
    assert [chunk["finish_reason"] for chunk in chunks if chunk["finish_reason"]] == ["stop"]
    assert any(record.name.startswith("ovserve.parsers") for record in caplog.records)
