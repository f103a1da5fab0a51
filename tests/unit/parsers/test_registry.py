from __future__ import annotations

import pytest

from ovserve.parsers import TOOL_PARSERS, UnknownParserError, tool_parser, tool_parser_name


def test_names_resolve() -> None:
    for name in ("hermes3", "qwen3", "llama3", "mistral", "phi4"):
        assert tool_parser(name) is TOOL_PARSERS[name]


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownParserError, match="hermes3"):
        tool_parser("nope")


def test_an_alias_format_is_named_by_its_own_name() -> None:
    # qwen3 is Hermes' format: a model given the format directly is named by the format's own name.
    assert tool_parser_name(tool_parser("qwen3")) == "hermes3"
    assert tool_parser_name(tool_parser("llama3")) == "llama3"
    assert tool_parser_name(None) is None
