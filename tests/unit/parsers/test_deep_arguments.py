"""Arguments nested past the JSON decoder's depth are no call: the model's text comes back as
content, in every format whose arguments are JSON (a RecursionError escaped the parsers and failed
the request)."""

from __future__ import annotations

import logging

import pytest

from ovserve.core.output import parse_text
from ovserve.parsers import TOOL_PARSERS

DEEP = "[" * 5000 + "]" * 5000
CALLS = {
    "hermes3": '<tool_call>{"name": "f", "arguments": {"a": %s}}</tool_call>',
    "deepseek_v31": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{"a": %s}'
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    "kimi_k2": '<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{"a": %s}'
    "<|tool_call_end|><|tool_calls_section_end|>",
    "mistral": '[TOOL_CALLS][{"name": "f", "arguments": {"a": %s}}]',
    "devstral": '[TOOL_CALLS]f[ARGS]{"a": %s}',
    "llama3": '{"name": "f", "parameters": {"a": %s}}',
    "phi4": 'functools[{"name": "f", "arguments": {"a": %s}}]',
    "granite": '<|tool_call|>[{"name": "f", "arguments": {"a": %s}}]',
    "gptoss": '<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": %s}<|call|>',
}


@pytest.mark.parametrize("parser", sorted(CALLS))
def test_arguments_too_deep_to_decode_are_content(parser: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)  # each refused call logs a warning with the text
    text = CALLS[parser] % DEEP
    for chunk in (None, 997):
        parsed = parse_text(text, tool_format=TOOL_PARSERS[parser], reasoning_format=None, chunk=chunk)
        assert parsed["tool_calls"] == []
        assert DEEP in str(parsed["content"])
