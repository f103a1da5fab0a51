from __future__ import annotations

import pytest

from ovserve.parsers import TOOL_PARSERS, UnknownParserError, detect_tool_parser, tool_parser


def test_names_resolve() -> None:
    for name in ("hermes3", "qwen3", "llama3", "mistral", "phi4"):
        assert tool_parser(name) is TOOL_PARSERS[name]


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownParserError, match="hermes3"):
        tool_parser("nope")


def test_detection_from_templates() -> None:
    assert detect_tool_parser("... <tool_call>\\n{{ tool_call | tojson }} ...") is TOOL_PARSERS["hermes3"]
    assert detect_tool_parser("{{ '[TOOL_CALLS]' }}") is TOOL_PARSERS["mistral"]
    assert detect_tool_parser("{{- '<|python_tag|>' }}") is TOOL_PARSERS["llama3"]
    assert detect_tool_parser("plain template") is None
