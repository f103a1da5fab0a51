"""Tool calling, reasoning content and structured output on the real engine.

The demo model is random, so grammars make the assertions deterministic: a forced tool call or a
response_format regex decides what the model writes, and the server's parsers must turn that
text into OpenAI's tool_calls / reasoning_content / content.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonschema
import openai
import pytest

from tests.conftest import Server, start_config_server

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}},
            "required": ["tz"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, TIME]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_tool_choice_required_returns_a_valid_call(client: openai.OpenAI) -> None:
    for seed in (1, 2, 3):
        completion = client.chat.completions.create(
            model="tiny-llm",
            messages=ASK,
            tools=TOOLS,
            tool_choice="required",
            max_tokens=60,
            seed=seed,  # type: ignore[arg-type]
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None
        (call,) = choice.message.tool_calls or []
        assert call.type == "function" and call.id.startswith("call_")
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_tool_choice_required_streams_id_and_name_then_arguments(client: openai.OpenAI) -> None:
    unary = client.chat.completions.create(
        model="tiny-llm",
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        max_tokens=60,
        temperature=0,  # type: ignore[arg-type]
    )
    stream = client.chat.completions.create(
        model="tiny-llm",
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        max_tokens=60,
        temperature=0,
        stream=True,  # type: ignore[arg-type]
    )
    deltas = [chunk.choices[0] for chunk in stream if chunk.choices]
    pieces = [tool for choice in deltas for tool in choice.delta.tool_calls or []]
    assert pieces[0].id and pieces[0].function and pieces[0].function.name
    assert all(piece.index == 0 for piece in pieces)
    arguments = "".join(piece.function.arguments or "" for piece in pieces if piece.function)
    (expected,) = unary.choices[0].message.tool_calls or []
    assert pieces[0].function.name == expected.function.name
    assert arguments == expected.function.arguments  # the streamed pieces are exactly the final JSON
    jsonschema.validate(json.loads(arguments), SCHEMAS[expected.function.name])
    assert deltas[-1].finish_reason == "tool_calls"
    assert not any(choice.delta.content for choice in deltas)


def test_named_tool_choice_calls_that_tool_and_hides_the_others(client: openai.OpenAI) -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    for seed in (1, 2):
        completion = client.chat.completions.create(
            model="tiny-llm",
            messages=ASK,
            tools=TOOLS,
            tool_choice=named,
            max_tokens=60,
            seed=seed,  # type: ignore[arg-type]
        )
        (call,) = completion.choices[0].message.tool_calls or []
        assert call.function.name == "get_time"
    only_time = client.chat.completions.create(model="tiny-llm", messages=ASK, tools=[TIME], max_tokens=1)  # type: ignore[arg-type]
    assert completion.usage is not None and only_time.usage is not None
    assert completion.usage.prompt_tokens == only_time.usage.prompt_tokens  # only the named tool was rendered


def test_tool_choice_none_hides_the_tools(client: openai.OpenAI) -> None:
    hidden = client.chat.completions.create(
        model="tiny-llm", messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=1
    )  # type: ignore[arg-type]
    plain = client.chat.completions.create(model="tiny-llm", messages=ASK, max_tokens=1)  # type: ignore[arg-type]
    shown = client.chat.completions.create(model="tiny-llm", messages=ASK, tools=TOOLS, max_tokens=1)  # type: ignore[arg-type]
    assert hidden.usage and plain.usage and shown.usage
    assert hidden.usage.prompt_tokens == plain.usage.prompt_tokens < shown.usage.prompt_tokens


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tool_choice": "required"}, None),  # no tools to force
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, None),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools.0.function.name"),
        (
            {"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
            "response_format",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
            "response_format.json_schema.schema",
        ),
        ({"response_format": {"type": "regex", "pattern": "(unclosed"}}, "response_format.pattern"),
        ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ],
)
def test_bad_tool_and_format_requests_are_400(server: Server, body: dict, param: str | None) -> None:
    response = httpx.post(
        f"{server.url}/v3/chat/completions", json={"model": "tiny-llm", "messages": ASK, **body}, timeout=30
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["message"]
    if param is not None:
        assert error["param"] == param


def test_response_format_json_schema_returns_valid_json(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"enum": ["yes", "no"]}, "sure": {"type": "boolean"}},
        "required": ["answer", "sure"],
        "additionalProperties": False,
    }
    response_format = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema, "strict": True}}
    for seed in (1, 2, 3):
        completion = client.chat.completions.create(
            model="tiny-llm",
            messages=ASK,
            response_format=response_format,
            max_tokens=40,
            seed=seed,  # type: ignore[arg-type]
        )
        jsonschema.validate(json.loads(completion.choices[0].message.content or ""), schema)
    stream = client.chat.completions.create(
        model="tiny-llm",
        messages=ASK,
        response_format=response_format,
        max_tokens=40,
        stream=True,  # type: ignore[arg-type]
    )
    jsonschema.validate(json.loads("".join(c.choices[0].delta.content or "" for c in stream if c.choices)), schema)


DIGIT_SCHEMA = {
    "type": "object",
    "properties": {"digit": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["digit"],
    "additionalProperties": False,
}


def test_json_schema_integer_bounds_hold_in_sampled_output(client: openai.OpenAI) -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "digit", "schema": DIGIT_SCHEMA}}
    for seed in range(1, 7):
        completion = client.chat.completions.create(
            model="tiny-llm",
            messages=ASK,
            response_format=response_format,  # type: ignore[arg-type]
            max_tokens=40,
            temperature=1.0,
            seed=seed,  # type: ignore[arg-type]
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        jsonschema.validate(json.loads(choice.message.content or ""), DIGIT_SCHEMA)


def test_forced_tool_call_arguments_respect_integer_bounds(client: openai.OpenAI) -> None:
    tool = {"type": "function", "function": {"name": "pick", "parameters": DIGIT_SCHEMA}}
    for seed in (1, 2, 3):
        completion = client.chat.completions.create(
            model="tiny-llm",
            messages=ASK,
            tools=[tool],  # type: ignore[list-item]
            tool_choice="required",
            max_tokens=60,
            temperature=1.0,
            seed=seed,  # type: ignore[arg-type]
        )
        (call,) = completion.choices[0].message.tool_calls or []
        jsonschema.validate(json.loads(call.function.arguments), DIGIT_SCHEMA)


@pytest.mark.parametrize(
    ("body", "param", "keyword"),
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "number", "minimum": 0, "maximum": 1}},
                }
            },
            "response_format.json_schema.schema",
            "'minimum' at /minimum",
        ),
        (
            {
                "tools": [
                    {"type": "function", "function": {"name": "f", "parameters": {**DIGIT_SCHEMA, "maxProperties": 1}}}
                ],
                "tool_choice": "required",
            },
            "tools.0.function.parameters",  # the schema of the tool, as for response_format
            "'maxProperties'",
        ),
    ],
)
def test_schema_keyword_ovserve_cannot_enforce_is_a_400_naming_it(
    server: Server, body: dict, param: str, keyword: str
) -> None:
    response = httpx.post(
        f"{server.url}/v3/chat/completions", json={"model": "tiny-llm", "messages": ASK, **body}, timeout=30
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert keyword in error["message"] and "cannot be enforced" in error["message"]


def test_response_format_json_object_and_ovms_formats(client: openai.OpenAI) -> None:
    exact = client.chat.completions.create(
        model="tiny-llm",
        messages=ASK,
        max_tokens=20,
        extra_body={"response_format": {"type": "const_string", "value": "Hello World!"}},
    )
    assert exact.choices[0].message.content == "Hello World!"
    pattern = client.chat.completions.create(
        model="tiny-llm",
        messages=ASK,
        max_tokens=20,
        extra_body={"response_format": {"type": "regex", "pattern": "[0-9]{3}-ok"}},
    )
    content = pattern.choices[0].message.content or ""
    assert len(content) == 6 and content[:3].isdigit() and content.endswith("-ok")
    obj = client.chat.completions.create(
        model="tiny-llm", messages=ASK, max_tokens=30, response_format={"type": "json_object"}
    )
    if obj.choices[0].finish_reason == "stop":  # a random model may run out of tokens inside the object
        assert isinstance(json.loads(obj.choices[0].message.content or ""), dict)


def test_model_written_tool_call_is_parsed_with_tool_choice_auto(client: openai.OpenAI) -> None:
    # The grammar makes the random model write a Hermes/Qwen call; the server's parser must
    # turn it into tool_calls (auto: the model decided to call).
    written = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "unit": "c"}}\n</tool_call>'
    extra = {"response_format": {"type": "const_string", "value": "Let me look." + written}}
    completion = client.chat.completions.create(
        model="tiny-llm", messages=ASK, tools=TOOLS, max_tokens=80, extra_body=extra
    )  # type: ignore[arg-type]
    message = completion.choices[0].message
    assert message.content == "Let me look."
    (call,) = message.tool_calls or []
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Rome", "unit": "c"})
    assert completion.choices[0].finish_reason == "tool_calls"
    # Without tools the same text is plain content: no tools, no parsing.
    plain = client.chat.completions.create(model="tiny-llm", messages=ASK, max_tokens=80, extra_body=extra)  # type: ignore[arg-type]
    assert plain.choices[0].message.content == "Let me look." + written and not plain.choices[0].message.tool_calls
    # skip_special_tokens=false returns the raw text with the parsers off (OVMS).
    raw = client.chat.completions.create(
        model="tiny-llm",
        messages=ASK,
        tools=TOOLS,
        max_tokens=80,
        extra_body={**extra, "skip_special_tokens": False},  # type: ignore[arg-type]
    )
    assert written in (raw.choices[0].message.content or "") and not raw.choices[0].message.tool_calls


def test_parallel_tool_calls_false_returns_one_call(client: openai.OpenAI) -> None:
    two = (
        '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>'
    )
    extra = {"response_format": {"type": "const_string", "value": two}}
    both = client.chat.completions.create(model="tiny-llm", messages=ASK, tools=TOOLS, max_tokens=120, extra_body=extra)  # type: ignore[arg-type]
    assert [json.loads(c.function.arguments)["tz"] for c in both.choices[0].message.tool_calls or []] == ["UTC", "CET"]
    one = client.chat.completions.create(
        model="tiny-llm",
        messages=ASK,
        tools=TOOLS,
        max_tokens=120,
        parallel_tool_calls=False,
        extra_body=extra,  # type: ignore[arg-type]
    )
    assert [json.loads(c.function.arguments)["tz"] for c in one.choices[0].message.tool_calls or []] == ["UTC"]


def test_multi_turn_tool_conversation(client: openai.OpenAI) -> None:
    messages: list = list(ASK)
    weather = {"type": "function", "function": {"name": "get_weather"}}
    first = client.chat.completions.create(
        model="tiny-llm",
        messages=messages,
        tools=TOOLS,
        tool_choice=weather,
        max_tokens=60,  # type: ignore[arg-type]
    )
    call = (first.choices[0].message.tool_calls or [])[0]
    messages.append(first.choices[0].message.model_dump(exclude_none=True))  # the assistant's tool call, as returned
    messages.append(
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "sky": "clear"})}
    )
    answer = client.chat.completions.create(
        model="tiny-llm", messages=messages, tools=TOOLS, max_tokens=20, temperature=0
    )
    assert answer.choices[0].message.content is not None
    assert answer.usage is not None and first.usage is not None
    # The second prompt holds the first one, the call and the tool's answer.
    assert answer.usage.prompt_tokens > first.usage.prompt_tokens + 20


# -- reasoning ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reasoning_server(tiny_llm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """tiny-llm behind a graph with reasoning_parser qwen3 and enable_tool_guided_generation."""
    root = tmp_path_factory.mktemp("reasoning")
    (root / "thinker").mkdir()
    (root / "thinker" / "graph.pbtxt").write_text(
        'node: { calculator: "HttpLLMCalculator" node_options: { '
        "[type.googleapis.com / mediapipe.LLMCalculatorOptions]: { "
        f'models_path: "{tiny_llm}" reasoning_parser: "qwen3" tool_parser: "hermes3" '
        "enable_tool_guided_generation: true } } }\n"
    )
    (root / "config.json").write_text(
        json.dumps({"mediapipe_config_list": [{"name": "tiny-llm", "base_path": "thinker"}]})
    )
    server = start_config_server(root, root / "config.json")
    yield server
    server.stop()


THOUGHT = {"response_format": {"type": "regex", "pattern": "<think>[a-z ]{5,30}</think>\n\nThe answer is [0-9]{2}\\."}}


def test_reasoning_goes_to_reasoning_content_unary_and_stream(reasoning_server: Server) -> None:
    client = reasoning_server.client()
    unary = client.chat.completions.create(
        model="tiny-llm", messages=ASK, max_tokens=60, temperature=0, extra_body=THOUGHT
    )
    message = unary.choices[0].message.model_dump()
    assert message["content"].startswith("The answer is ") and "<think>" not in message["content"]
    assert message["reasoning_content"] and "think>" not in message["reasoning_content"]
    stream = client.chat.completions.create(
        model="tiny-llm", messages=ASK, max_tokens=60, temperature=0, stream=True, extra_body=THOUGHT
    )
    deltas = [chunk.choices[0].delta.model_dump() for chunk in stream if chunk.choices]
    reasoning = "".join(delta.get("reasoning_content") or "" for delta in deltas)
    content = "".join(delta.get("content") or "" for delta in deltas)
    assert (reasoning, content) == (message["reasoning_content"], message["content"])
    # Reasoning never leaks into a content delta, whatever the token boundaries were.
    assert not any("think" in (delta.get("content") or "") for delta in deltas)


def test_enable_thinking_false_is_honoured_through_the_template(reasoning_server: Server) -> None:
    client = reasoning_server.client()
    answer = {"response_format": {"type": "const_string", "value": "Plain answer."}}
    completion = client.chat.completions.create(
        model="tiny-llm", messages=ASK, max_tokens=20,
        extra_body={**answer, "chat_template_kwargs": {"enable_thinking": False}},
    )  # fmt: skip
    message = completion.choices[0].message.model_dump()
    assert message["content"] == "Plain answer." and not message.get("reasoning_content")


def test_guided_tool_generation_keeps_free_text_free(reasoning_server: Server) -> None:
    # enable_tool_guided_generation constrains only what follows <tool_call>: plain answers stay possible.
    client = reasoning_server.client()
    completion = client.chat.completions.create(
        model="tiny-llm",
        messages=ASK,
        tools=TOOLS,
        max_tokens=30,
        temperature=0,  # type: ignore[arg-type]
    )
    choice = completion.choices[0]
    for call in choice.message.tool_calls or []:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    assert choice.finish_reason in {"stop", "length", "tool_calls"}
