"""Forced tool calls in every format ovserve can force, on the real engine.

For each tool-call format that has a ``call_regex`` (read from ``ovserve.parsers.TOOL_PARSERS``
when this module is imported, so a format added later is covered without touching this file;
aliases of one format once), one server serves tiny-llm once per format, as a graph named after
the parser with ``tool_parser: NAME``. The grammar of ``tool_choice: "required"`` or a
named tool makes the random model write one call in that format; the server's parser must turn
it into exactly one OpenAI tool call whose arguments validate against the tool's schema, unary
and streamed (OpenAI's delta shape: ``index`` on every piece, ``id``/``type``/``name`` first).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from ovserve.core.guided import schema_regex
from ovserve.parsers import TOOL_PARSERS
from ovserve.parsers.detect import read_special_tokens
from tests.conftest import Server, start_config_server

# One parser name per forcible format (the registry's first name for it).
FORCIBLE = sorted(
    {id(fmt): name for name, fmt in reversed(list(TOOL_PARSERS.items())) if fmt.call_regex is not None}.values()
)

# A string with a length bound, a bounded integer and an enum: the three ways a schema narrows a value.
LOOKUP_ORDER = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Find an order",
        "parameters": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "maxLength": 10},
                "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
                "priority": {"type": "string", "enum": ["low", "normal", "urgent"]},
            },
            "required": ["order_id", "quantity", "priority"],
            "additionalProperties": False,
        },
    },
}
GET_TIME = {
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
TOOLS = [LOOKUP_ORDER, GET_TIME]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
NAMED = {"type": "function", "function": {"name": "lookup_order"}}
ASK = [{"role": "user", "content": "Where is my order?"}]
# A whole call with its markers and three bounded values fits well within this.
MAX_TOKENS = 200


@pytest.fixture(scope="module")
def formats_server(tiny_llm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """tiny-llm once per forcible format: the graph named NAME parses calls with tool_parser NAME."""
    root = tmp_path_factory.mktemp("forced")
    for name in FORCIBLE:
        graph_dir = root / name
        graph_dir.mkdir()
        options = f'models_path: "{tiny_llm}", tool_parser: "{name}"'
        graph_dir.joinpath("graph.pbtxt").write_text(
            'node: { calculator: "HttpLLMCalculator"\n'
            f"node_options: {{ [type.googleapis.com / mediapipe.LLMCalculatorOptions]: {{ {options} }} }} }}\n"
        )
    config = root / "config.json"
    config.write_text(json.dumps({"mediapipe_config_list": [{"name": name, "base_path": name} for name in FORCIBLE]}))
    # Readiness is 200 once no model is loading: every format's graph is up.
    server = start_config_server(root, config, model_name=FORCIBLE[0])
    yield server
    server.stop()


@dataclass(frozen=True)
class Served:
    server: Server
    model: str


@pytest.fixture(params=FORCIBLE)
def parser_server(request: pytest.FixtureRequest, formats_server: Server) -> Served:
    return Served(formats_server, request.param)


def create(served: Served, **fields: Any) -> Any:
    return served.server.client().chat.completions.create(
        model=served.model, messages=ASK, tools=TOOLS, max_tokens=MAX_TOKENS, **fields
    )


def assert_one_valid_call(completion: Any, names: set[str]) -> Any:
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    # No marker text (or anything else) around the call.
    assert not (choice.message.content or "").strip(), choice.message.content
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id  # call_<hex>, or the family's own id shape (Mistral: 9 chars)
    assert call.function.name in names
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    return call


def streamed_call(served: Served, **fields: Any) -> tuple[str, str]:
    """The one call of a stream, checked piece by piece; (name, concatenated arguments)."""
    chunks = [chunk.choices[0] for chunk in create(served, stream=True, **fields) if chunk.choices]
    pieces = [piece for choice in chunks for piece in choice.delta.tool_calls or []]
    assert pieces, chunks
    assert all(piece.index == 0 for piece in pieces)  # every piece says which call it belongs to
    first = pieces[0]
    assert first.id and first.type == "function"
    assert first.function is not None and first.function.name
    assert all(piece.id is None and (piece.function is None or piece.function.name is None) for piece in pieces[1:])
    arguments = "".join(piece.function.arguments or "" for piece in pieces if piece.function)
    jsonschema.validate(json.loads(arguments), SCHEMAS[first.function.name])
    assert chunks[-1].finish_reason == "tool_calls"
    assert not "".join(choice.delta.content or "" for choice in chunks).strip()
    return first.function.name, arguments


@pytest.mark.parametrize("name", FORCIBLE)
def test_a_forcible_formats_call_regex_writes_no_special_token_of_the_demo_model(name: str, tiny_llm: Path) -> None:
    """A grammar cannot make a model write a token its tokenizer declares special: a format whose
    forced call needs one must not have a call_regex (its markers exist only as special tokens)."""
    fmt = TOOL_PARSERS[name]
    assert fmt.call_regex is not None
    parameters = LOOKUP_ORDER["function"]["parameters"]
    regex = fmt.call_regex("lookup_order", parameters, lambda schema: schema_regex(schema, param="tools"))
    re.compile(regex)  # the engine's dialect is Python-compatible for what formats write
    for token in read_special_tokens(tiny_llm):
        assert token not in regex and re.escape(token) not in regex, (name, token)


def test_tool_choice_required_writes_one_valid_call_in_the_models_format(parser_server: Served) -> None:
    for seed in (1, 2, 3):  # sampled: values vary, the grammar holds them to the schema
        completion = create(parser_server, tool_choice="required", temperature=1.0, seed=seed)
        assert_one_valid_call(completion, set(SCHEMAS))


def test_tool_choice_required_streams_the_same_call_as_unary(parser_server: Served) -> None:
    unary = assert_one_valid_call(create(parser_server, tool_choice="required", temperature=0), set(SCHEMAS))
    name, arguments = streamed_call(parser_server, tool_choice="required", temperature=0)
    assert (name, arguments) == (unary.function.name, unary.function.arguments)


def test_a_named_tool_is_the_one_called_unary_and_streamed(parser_server: Served) -> None:
    for seed in (4, 5):
        completion = create(parser_server, tool_choice=NAMED, temperature=1.0, seed=seed)
        assert_one_valid_call(completion, {"lookup_order"})
    name, _ = streamed_call(parser_server, tool_choice=NAMED, temperature=1.0, seed=6)
    assert name == "lookup_order"
