"""response_format is validated at the edge: every malformed shape is a 400 naming the field."""

from __future__ import annotations

import re
from typing import Any

import pydantic
import pytest

from ovserve.core.conversation import OutputFormat, RegexFormat
from ovserve.core.guided import response_format_grammar
from ovserve.dialects.openai.chat.adapter import conversation_of
from ovserve.dialects.openai.chat.request import ChatCompletionRequest, JSONSchemaFormat
from ovserve.errors import BadRequestError, bad_request


def _format(request: ChatCompletionRequest) -> OutputFormat | None:
    """The output format the chat adapter hands to the core."""
    return conversation_of(request).output_format


def _request(response_format: Any) -> ChatCompletionRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "response_format": response_format}
    return ChatCompletionRequest.model_validate(body)


@pytest.mark.parametrize(
    ("response_format", "param", "message"),
    [
        (
            {"type": "yaml"},
            "response_format.type",
            "response_format.type: Input should be 'text', 'json_object', 'json_schema', 'regex' or 'const_string'",
        ),
        ({"type": 5}, "response_format.type", "response_format.type: Input should be 'text'"),
        ({}, "response_format.type", "response_format.type: Field required"),
        ("json", "response_format", "response_format: Input should be a valid dictionary"),
        ({"type": "regex"}, "response_format.pattern", "response_format.pattern: Field required"),
        ({"type": "regex", "pattern": ""}, "response_format.pattern", "response_format.pattern: String should have"),
        ({"type": "regex", "pattern": "(unclosed"}, "response_format.pattern", "response_format.pattern: not a valid"),
        ({"type": "const_string", "value": 3}, "response_format.value", "response_format.value: Input should be"),
        ({"type": "json_schema"}, "response_format.json_schema", "response_format.json_schema: Field required"),
        ({"type": "json_schema", "json_schema": "x"}, "response_format.json_schema", "response_format.json_schema:"),
        (
            {"type": "json_schema", "json_schema": {"schema": "s"}},
            "response_format.json_schema.schema",
            "response_format.json_schema.schema: Input should be a valid dictionary",
        ),
    ],
)
def test_malformed_response_format_is_a_400_naming_the_field(response_format: Any, param: str, message: str) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        _request(response_format)
    error = bad_request(caught.value)
    assert error.param == param
    assert error.message.startswith(message), error.message


def test_response_format_shapes_clients_send_are_accepted() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    named = {"name": "x", "schema": schema, "strict": True, "description": "d", "extra": 1}
    parsed = _request({"type": "json_schema", "json_schema": named}).response_format
    assert isinstance(parsed, JSONSchemaFormat) and parsed.json_schema.schema_ == schema
    # OpenAI requires a name and a schema; ovserve never did (no schema: any JSON).
    unnamed = _request({"type": "json_schema", "json_schema": {}}).response_format
    assert isinstance(unnamed, JSONSchemaFormat) and unnamed.json_schema.schema_ == {}
    assert _request({"type": "text", "extra": 1}).response_format is not None
    assert _request(None).response_format is None


def test_grammars_are_compiled_from_the_typed_formats() -> None:
    assert response_format_grammar(_format(_request({"type": "text"}))) is None
    assert response_format_grammar(None) is None
    const = _format(_request({"type": "const_string", "value": "a.b"}))
    assert response_format_grammar(const) == {"regex": re.escape("a.b")}
    assert response_format_grammar(RegexFormat("[0-9]+", "response_format")) == {"regex": "[0-9]+"}
    json_object = response_format_grammar(_format(_request({"type": "json_object"})))
    assert json_object is not None and re.fullmatch(json_object["regex"], '{"a":1}')


def test_an_uncompilable_schema_names_the_schema() -> None:
    request = _request({"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}})
    with pytest.raises(BadRequestError) as caught:
        response_format_grammar(_format(request))
    assert caught.value.param == "response_format.json_schema.schema"
