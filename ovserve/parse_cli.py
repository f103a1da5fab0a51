"""``ovserve parse``: a model's raw output (stdin) as the assistant message the server would make
of it, printed as one JSON object: ``{"content", "reasoning_content", "tool_calls"}``.

For "my tool call came back as content": get the model's raw text (a request with
``"skip_special_tokens": false`` returns it unparsed), pipe it in, and see what a parser makes of
it. The parsing is the server's own (:func:`ovserve.core.output.parse_text`).

- ``--tool_parser`` / ``--reasoning_parser``: a parser name, ``none`` (off), or ``auto``: detected
  from ``--model_path``'s chat template and special tokens as ``ovserve serve`` detects them.
  Omitted: ``auto`` with ``--model_path``, ``none`` without.
- ``--model_path``: also strips the model's special tokens that are not markers of the chosen
  formats, as the server does when it decodes with special tokens kept.
- ``--tools``: a JSON file of the request's OpenAI ``tools`` (chat's or the Responses API's shape,
  or a whole request body with ``tools``): formats that write arguments as text type them by the
  tool's ``parameters``. Calls are parsed with or without it.
- ``--chunk N``: feed the text in deltas of N characters, as a stream would; the answer must be the
  same. ``--starts_in_reasoning``: the prompt already opened the reasoning block.

Call ids are numbered (``call_0``...) so two runs diff cleanly. The parsers chosen, and why, go to
stderr. A mistake (unknown parser, unreadable file) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ovserve.cli_types import int_at_least
from ovserve.core.output import parse_text
from ovserve.parsers import (
    PARSER_OFF,
    REASONING_PARSERS,
    TOOL_PARSERS,
    ModelParsers,
    choose_parsers,
    format_markers,
)
from ovserve.parsers.base import NO_TOOLS, ToolSchemas
from ovserve.parsers.detect import read_chat_template, read_special_tokens

AUTO = "auto"


class ParseUsageError(Exception):
    """A mistake on the command line or in a file it names: one line, exit status 2."""


def add_parse_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tool_parser", metavar="NAME", help=f"{', '.join(sorted(TOOL_PARSERS))}, {PARSER_OFF} or {AUTO}"
    )
    parser.add_argument(
        "--reasoning_parser", metavar="NAME", help=f"{', '.join(sorted(REASONING_PARSERS))}, {PARSER_OFF} or {AUTO}"
    )
    parser.add_argument("--model_path", type=Path, metavar="DIR", help="model directory, for auto detection")
    parser.add_argument("--tools", type=Path, metavar="FILE", help="JSON file of the request's OpenAI tools")
    parser.add_argument("--chunk", type=int_at_least(1), metavar="N", help="feed the text in deltas of N characters")
    parser.add_argument(
        "--starts_in_reasoning", action="store_true", help="the prompt already opened the reasoning block"
    )


def _setting(value: str | None, option: str, registry: Mapping[str, object], model_path: Path | None) -> str | None:
    """The value for :func:`choose_parsers`: a name, ``none``, or None to detect."""
    if value is None:
        return None if model_path is not None else PARSER_OFF
    if value == AUTO:
        if model_path is None:
            raise ParseUsageError(f"--{option} {AUTO} needs --model_path")
        return None
    if value != PARSER_OFF and value not in registry:
        known = ", ".join([*sorted(registry), PARSER_OFF, AUTO])
        raise ParseUsageError(f"unknown {option} '{value}' (known: {known})")
    return value


def _parsers(args: argparse.Namespace) -> tuple[ModelParsers, frozenset[str]]:
    """The parsers chosen, and the special tokens to strip from the text."""
    model_path: Path | None = args.model_path
    if model_path is not None and not model_path.is_dir():
        raise ParseUsageError(f"--model_path: {model_path} is not a directory")
    tool = _setting(args.tool_parser, "tool_parser", TOOL_PARSERS, model_path)
    reasoning = _setting(args.reasoning_parser, "reasoning_parser", REASONING_PARSERS, model_path)
    template = read_chat_template(model_path) if model_path is not None else None
    special_tokens = read_special_tokens(model_path) if model_path is not None else frozenset()
    parsers = choose_parsers(
        tool_parser=tool, reasoning_parser=reasoning, chat_template=template, special_tokens=special_tokens
    )
    return parsers, special_tokens - format_markers(parsers.tool_format, parsers.reasoning_format)


def _function(tool: Any) -> Any:
    """Chat's ``{"type": "function", "function": {...}}`` or the Responses API's flat function."""
    if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
        return tool["function"]
    return tool


def read_tools(path: Path) -> ToolSchemas:
    """Tool name -> its ``parameters`` schema, from a JSON file of OpenAI ``tools``."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeError, ValueError) as exc:
        raise ParseUsageError(f"--tools: cannot read {path}: {exc}") from None
    tools = document.get("tools") if isinstance(document, dict) else document
    if not isinstance(tools, list):
        raise ParseUsageError(f"--tools: {path} holds neither a list of tools nor an object with 'tools'")
    schemas: dict[str, Any] = {}
    for index, tool in enumerate(tools):
        function = _function(tool)
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ParseUsageError(f"--tools: tool {index} in {path} has no function name")
        parameters = function.get("parameters")
        schemas[function["name"]] = parameters if isinstance(parameters, dict) else {}
    return schemas


def run(args: argparse.Namespace) -> int:
    try:
        parsers, strip_tokens = _parsers(args)
        tools = read_tools(args.tools) if args.tools is not None else NO_TOOLS
    except ParseUsageError as exc:
        print(f"ovserve parse: {exc}", file=sys.stderr)
        return 2
    print(f"ovserve parse: {parsers.describe()}", file=sys.stderr)
    message = parse_text(
        sys.stdin.read(),
        tool_format=parsers.tool_format,
        reasoning_format=parsers.reasoning_format,
        tools=tools,
        chunk=args.chunk,
        starts_in_reasoning=args.starts_in_reasoning,
        strip_tokens=strip_tokens,
    )
    calls = message["tool_calls"]
    assert isinstance(calls, list)  # parse_text's shape
    for index, call in enumerate(calls):
        call["id"] = f"call_{index}"
    print(json.dumps(message, ensure_ascii=False, indent=2))
    return 0
