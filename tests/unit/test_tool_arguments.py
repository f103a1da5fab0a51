"""Tool-call arguments are one JSON object in the core: Anthropic and Ollama send that object as it
is, OpenAI's chat and Responses write it as one string, byte for byte what the parsers wrote when
they made the string themselves; arguments a client sends back as text are read by one function
with one fallback, whatever the dialect, and the chat template gets the object."""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace
from typing import Any

import pytest

from ovserve.core.conversation import Conversation, Message, template_message
from ovserve.core.conversation import ToolCall as HistoryCall
from ovserve.core.job import Delta
from ovserve.core.output import ChoiceOutput, parse_text
from ovserve.dialects.anthropic import adapter as anthropic
from ovserve.dialects.anthropic.events import BlockBuilder
from ovserve.dialects.anthropic.request import MessagesRequest
from ovserve.dialects.ollama import adapter as ollama
from ovserve.dialects.ollama import request as ollama_request
from ovserve.dialects.openai.chat import adapter as chat
from ovserve.dialects.openai.chat.request import ChatCompletionRequest
from ovserve.dialects.openai.responses import adapter as responses
from ovserve.dialects.openai.responses.events import OutputBuilder
from ovserve.dialects.openai.responses.request import ResponsesRequest
from ovserve.parsers import TOOL_PARSERS
from ovserve.parsers.calls import ToolCall, arguments_json, read_arguments

TOOLS = {
    "f": {
        "type": "object",
        "properties": {"l": {"type": "array"}, "m": {"type": "object"}, "s": {"type": ["string", "array"]}},
    }
}

# Model output and the arguments string the OpenAI dialects sent for it before the core carried
# objects (computed with the parsers of 6f59371~1): separators ", " and ": ", non-ASCII as it is,
# Python literals (tuples, non-string keys) as JSON writes them.
WRITTEN_BEFORE = [
    (
        "hermes3",
        '<tool_call>\n{"name": "f", "arguments": {"city": "Zürich", "q": "a\\"b\\\\c\\n\\u00e9\\ud83d\\ude00", '
        '"n": 1.50, "big": 12345678901234567890, "e": 1e5, "l": [1, {"x": null}], "t": true,"compact":{"k":1}}}\n'
        "</tool_call>",
        '{"city": "Zürich", "q": "a\\"b\\\\c\\né😀", "n": 1.5, "big": 12345678901234567890, "e": 100000.0, '
        '"l": [1, {"x": null}], "t": true, "compact": {"k": 1}}',
    ),
    (
        "pythonic",
        "[f(city='Zürich', t=(1, 2), n=-0.5, d={'k': None}, s=\"\\u00e9\")]",
        '{"city": "Zürich", "t": [1, 2], "n": -0.5, "d": {"k": null}, "s": "é"}',
    ),
    (
        "qwen3coder",
        "<tool_call>\n<function=f>\n<parameter=city>\nZürich\n</parameter>\n<parameter=l>\n(1, 'a')\n</parameter>\n"
        "<parameter=m>\n{1: 'a', 2.5: (3,)}\n</parameter>\n<parameter=s>\n(1, 2)\n</parameter>\n</function>\n"
        "</tool_call>",
        '{"city": "Zürich", "l": [1, "a"], "m": {"1": "a", "2.5": [3]}, "s": "(1, 2)"}',
    ),
    (
        "minicpm",
        "<|tool_call_start|>\n```python\nf(city='Zürich', t=(1, 2), d={1: 'a'}, ok=true)\n```\n<|tool_call_end|>",
        '{"city": "Zürich", "t": [1, 2], "d": {"1": "a"}, "ok": true}',
    ),
]

ARGUMENTS: dict[str, Any] = {"city": "Zürich", "q": 'a"b\\c\n😀', "n": 1.5, "l": [1, {"x": None}], "t": True}
OPENAI = '{"city": "Zürich", "q": "a\\"b\\\\c\\n😀", "n": 1.5, "l": [1, {"x": null}], "t": true}'
CALL = ToolCall(name="f", arguments=ARGUMENTS, id="call_1")


def step(*calls: ToolCall) -> Delta:
    return Delta(
        choice=0,
        reasoning="",
        content="",
        tool_calls=list(calls),
        logprobs=None,
        first=True,
        finish_reason=None,
        calls_before=0,
    )


def plain_json(value: object) -> bool:
    """Only the types JSON decodes to (no tuple, no non-string key)."""
    if isinstance(value, dict):
        return all(isinstance(key, str) and plain_json(item) for key, item in value.items())
    if isinstance(value, list):
        return all(plain_json(item) for item in value)
    return value is None or isinstance(value, str | int | float | bool)


@pytest.mark.parametrize(("parser", "text", "written"), WRITTEN_BEFORE, ids=[case[0] for case in WRITTEN_BEFORE])
def test_openai_arguments_are_the_bytes_the_parsers_wrote_before(parser: str, text: str, written: str) -> None:
    for chunk in (None, 1, 5):
        parsed = parse_text(text, tool_format=TOOL_PARSERS[parser], reasoning_format=None, tools=TOOLS, chunk=chunk)
        assert [call["function"]["arguments"] for call in parsed["tool_calls"]] == [written]  # type: ignore[index]


@pytest.mark.parametrize(("parser", "text", "written"), WRITTEN_BEFORE, ids=[case[0] for case in WRITTEN_BEFORE])
def test_parsed_arguments_are_a_plain_json_object(parser: str, text: str, written: str) -> None:
    output = ChoiceOutput(tool_format=TOOL_PARSERS[parser], reasoning_format=None, tools=TOOLS)
    calls = output.push(text).tool_calls + output.finish().tool_calls
    assert [call.arguments for call in calls] == [json.loads(written)]
    assert plain_json(calls[0].arguments)


def test_arguments_json_keeps_default_separators_and_non_ascii() -> None:
    assert arguments_json(ARGUMENTS) == OPENAI
    assert arguments_json({}) == "{}"


def test_openai_chat_streams_and_answers_the_same_string() -> None:
    pieces = list(chat._pieces(step(CALL)))
    streamed = "".join(
        call.function.arguments or "" for piece in pieces for call in piece.tool_calls or [] if call.function
    )
    assert streamed == OPENAI
    message = chat._message_body("", "", [CALL])
    assert message.tool_calls is not None and message.tool_calls[0].function.arguments == OPENAI


def test_responses_item_and_its_events_carry_the_same_string() -> None:
    items: list[Any] = []
    events = [event.model_dump() for event in OutputBuilder(items, itertools.count()).push(step(CALL))]
    assert items[0].arguments == OPENAI
    by_type = {event["type"]: event for event in events}
    assert by_type["response.function_call_arguments.delta"]["delta"] == OPENAI
    assert by_type["response.function_call_arguments.done"]["arguments"] == OPENAI


def test_anthropic_tool_use_input_is_the_object() -> None:
    builder = BlockBuilder()
    events = [event.model_dump() for event in builder.push(step(CALL))]
    assert builder.blocks[0].input == ARGUMENTS  # type: ignore[union-attr]
    (partial,) = [event["delta"]["partial_json"] for event in events if event["type"] == "content_block_delta"]
    assert json.loads(partial) == ARGUMENTS


def test_ollama_arguments_are_the_object() -> None:
    call = SimpleNamespace(job=SimpleNamespace(model=SimpleNamespace(name="m")), chat=True)
    line = ollama._line(call, step(CALL))  # type: ignore[arg-type]
    assert line.message.tool_calls[0].function.arguments == ARGUMENTS  # type: ignore[union-attr]
    assert json.loads(line.model_dump_json())["message"]["tool_calls"][0]["function"]["arguments"] == ARGUMENTS


@pytest.mark.parametrize(
    ("text", "value", "unreadable"),
    [
        ('{"a": [1, "é"]}', {"a": [1, "é"]}, None),
        ("{}", {}, None),
        ("", {}, ""),
        ("  \n", {}, "  \n"),
        ("not json", {"arguments": "not json"}, "not json"),
        ('{"a": 1', {"arguments": '{"a": 1'}, '{"a": 1'),
        ("[1, 2]", {"arguments": "[1, 2]"}, "[1, 2]"),
        ('"x"', {"arguments": '"x"'}, '"x"'),
        ("3", {"arguments": "3"}, "3"),
        ("null", {"arguments": "null"}, "null"),
        ('{"a": NaN}', {"arguments": '{"a": NaN}'}, '{"a": NaN}'),
        ("[" * 100_000, {"arguments": "[" * 100_000}, "[" * 100_000),
    ],
    ids=[
        "object",
        "empty-object",
        "empty",
        "blank",
        "not-json",
        "cut",
        "array",
        "string",
        "number",
        "null",
        "nan",
        "deep",
    ],
)
def test_arguments_sent_as_text_have_one_fallback(text: str, value: dict[str, Any], unreadable: str | None) -> None:
    assert read_arguments(text) == (value, unreadable)


def _history(conversation: Conversation) -> HistoryCall:
    (call,) = [call for message in conversation.messages for call in message.tool_calls]
    return call


def _chat(arguments: str) -> HistoryCall:
    assistant = {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": arguments}}]}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}, assistant]}
    return _history(chat.conversation_of(ChatCompletionRequest.model_validate(body)))


def _responses(arguments: str) -> HistoryCall:
    item = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": arguments}
    request = ResponsesRequest.model_validate({"model": "m", "input": [{"role": "user", "content": "hi"}, item]})
    return _history(responses.conversation_of(request, []))


def _anthropic(arguments: dict[str, Any]) -> HistoryCall:
    use = {"type": "tool_use", "id": "c1", "name": "f", "input": arguments}
    result = {"type": "tool_result", "tool_use_id": "c1", "content": "42"}  # a final assistant turn is a prefill
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [use]}]
    body = {"model": "m", "max_tokens": 5, "messages": [*messages, {"role": "user", "content": [result]}]}
    return _history(anthropic.conversation_of(MessagesRequest.model_validate(body)))


def _ollama(arguments: dict[str, Any]) -> HistoryCall:
    assistant = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "f", "arguments": arguments}}],
    }
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}, assistant]}
    return _history(ollama.chat_conversation(ollama_request.ChatRequest.model_validate(body)))


def test_history_arguments_are_one_object_whatever_the_dialect() -> None:
    compact = json.dumps(ARGUMENTS, separators=(",", ":"))  # a client's own spelling of the same object
    calls = [_chat(compact), _responses(compact), _anthropic(ARGUMENTS), _ollama(ARGUMENTS)]
    assert [(call.arguments, call.unreadable_arguments) for call in calls] == [(ARGUMENTS, None)] * 4


def test_unreadable_history_text_reaches_the_template_as_the_fallback_in_every_text_dialect() -> None:
    for call in (_chat("not json"), _responses("not json")):
        assert (call.arguments, call.unreadable_arguments) == ({"arguments": "not json"}, "not json")
    # What an object dialect would send for it renders the same: the template sees one shape.
    fallback = _anthropic({"arguments": "not json"})
    for call in (_chat("not json"), _responses("not json"), fallback, _ollama({"arguments": "not json"})):
        rendered = template_message(Message("assistant", "messages.1.content", [call]), None)
        assert rendered["tool_calls"][0]["function"]["arguments"] == {"arguments": "not json"}
