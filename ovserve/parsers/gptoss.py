"""gpt-oss: OpenAI's harmony format, where one syntax carries reasoning, answer and tool calls.

The output after the prompt's ``<|start|>assistant`` is a sequence of messages, each a header and
a body; two outputs (the first is one line, broken here)::

    <|channel|>analysis<|message|>REASONING<|end|><|start|>assistant<|channel|>commentary
    to=functions.get_weather <|constrain|>json<|message|>{"location":"Tokyo"}<|call|>

    <|channel|>analysis<|message|>REASONING<|end|><|start|>assistant<|channel|>final<|message|>ANSWER<|return|>

The header names the channel and, for a call, the recipient (``to=functions.NAME``, in the role
part before ``<|channel|>`` or in the channel part after it) and an optional content type
(``<|constrain|>json`` or a bare ``json``). What a message becomes:

- ``analysis`` -> ``reasoning_content`` (also with a recipient that is no function: the built-in
  ``python`` / ``browser.*`` tools run in the chain of thought);
- ``final``, ``commentary`` without recipient (a preamble meant for the user), or no channel at
  all -> ``content``;
- a recipient ``functions.NAME`` -> a tool call whose arguments are the body, which must be a JSON
  object; anything else is returned as ``content`` with a warning (a malformed call is text);
- anything else (``commentary to=browser.search``, an unknown channel) is dropped, as vLLM does.

Several messages of one kind are joined with a newline, in order (vLLM's ``parse_chat_output``).

Sources: the format, OpenAI's cookbook ``articles/openai-harmony.md`` (openai/openai-cookbook:
the recipient may sit in the role or the channel part of the header, preambles, built-in tools);
the channel-to-field mapping, vLLM ``vllm/entrypoints/openai/parser/harmony_utils.py``
(``parse_chat_output``), ``vllm/tool_parsers/openai_tool_parser.py`` and vLLM's ``HarmonyParser``
(``_SegmentType``: function recipient -> call, analysis -> reasoning, final or commentary without
recipient -> content, the rest ignored); OVMS ``src/llm/io_processing/gptoss/harmony.cpp`` and
``reasoning_parser.cpp`` (openvinotoolkit/model_server; commentary without recipient is content).

Ends of output. ``<|return|>`` and ``<|call|>`` are stop tokens (vLLM's
``get_stop_tokens_for_assistant_actions``), which the engine removes from the text of a unary
response; ``max_tokens`` cuts anywhere. So the end of the output closes the open message: an
unterminated analysis is reasoning, an unterminated final or preamble is content, and an
unterminated call is a call when its body is a whole JSON object (``<|call|>`` was the stop token
taken off; vLLM's ``process_eos`` completes the message the same way) and content otherwise (cut
by ``max_tokens``). An unfinished header carries no text and is dropped.

No tools offered (``ParserContext.tools`` None): calls are not parsed and a message to a function
is dropped (logged), as vLLM (the ``TOOL`` segment is ignored without a tool parser) and OVMS (its
reasoning parser surfaces only analysis, final and preambles) do.

Output with no harmony marker at all (a misconfigured parser, or a template whose prompt already
opened a message body) is plain content: text at the start that cannot begin a header
(``<|...|>`` or ``to=``) starts a body without channel.

``call_regex`` stays None: every marker is a special token of the o200k_harmony tokenizer
(``<|channel|>`` 200005, ``<|message|>`` 200008, ``<|call|>`` 200012..., OVMS ``harmony.hpp``),
which an engine grammar over text cannot write, and real tokenizers never spell them as text.
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

from ovserve.parsers.base import (
    OutputParser,
    Parsed,
    ParserContext,
    ReasoningFormat,
    ToolCallFormat,
    split_at_marker,
)
from ovserve.parsers.calls import PayloadError, ToolCall
from ovserve.parsers.schemas import ToolSchemas

log = logging.getLogger(__name__)

START = "<|start|>"
END = "<|end|>"
MESSAGE = "<|message|>"
CHANNEL = "<|channel|>"
CONSTRAIN = "<|constrain|>"
CALL = "<|call|>"
RETURN = "<|return|>"
MARKERS = (START, END, MESSAGE, CHANNEL, CONSTRAIN, CALL, RETURN)
_MESSAGE_ENDS = (END, CALL, RETURN)
_FUNCTIONS = "functions."
_RECIPIENT = re.compile(r"to=(\S+)")
# What a header can begin with when the output starts without a marker (recipient first).
_HEADER_OPENER = "to="


class _Kind(Enum):
    """What a message's body becomes (module docstring)."""

    REASONING = "reasoning"
    CONTENT = "content"
    CALL = "call"
    DROP = "drop"


@dataclass
class _Header:
    """A message header as it arrives: the role part (before ``<|channel|>``), the channel part
    and the content type (after ``<|constrain|>``); markers are not part of the texts."""

    role: str = ""
    channel: str = ""
    constrain: str = ""
    section: Literal["role", "channel", "constrain"] = "role"

    def add(self, text: str) -> None:
        setattr(self, self.section, getattr(self, self.section) + text)

    def recipient(self) -> str | None:
        for part in (self.role, self.channel):
            found = _RECIPIENT.search(part)
            if found:
                return found.group(1)
        return None

    def channel_name(self) -> str | None:
        words = [word for word in self.channel.split() if not word.startswith("to=")]
        return words[0] if words else None


class HarmonyParser:
    """One choice's harmony output -> reasoning, content and whole tool calls (module docstring)."""

    def __init__(self, context: ParserContext) -> None:
        self._tools: ToolSchemas | None = context.tools
        self._pending = ""  # text that may be the beginning of a marker
        self._header = _Header()
        self._in_body = context.starts_in_reasoning
        self._kind = _Kind.REASONING if context.starts_in_reasoning else _Kind.DROP
        self._recipient: str | None = None
        self._call_body = ""
        # A marker was seen (or the prompt opened a body): text without one is no plain output.
        self._structured = context.starts_in_reasoning
        self._message_emitted = False  # the current message's separator was written
        self._emitted: set[_Kind] = set()  # kinds that have text already (they get a separator)

    def push(self, text: str) -> Parsed:
        out = Parsed()
        self._pending += text
        while self._pending:
            text, marker, self._pending = split_at_marker(self._pending, MARKERS)
            self._text(text, out)
            if marker is None:
                break
            self._marker(marker, out)
        return out

    def finish(self) -> Parsed:
        out = Parsed()
        rest, self._pending = self._pending, ""
        self._text(rest, out)  # a marker's beginning that never completed is text
        if self._in_body:
            self._close(out)
        elif not self._structured and self._header.role:
            self._emit(_Kind.CONTENT, self._header.role, out)  # "to", never followed by a header
        return out

    # -- text and markers -----------------------------------------------------------------------

    def _text(self, text: str, out: Parsed) -> None:
        if not text:
            return
        if self._in_body:
            if self._kind == _Kind.CALL:
                self._call_body += text
            elif self._kind in (_Kind.REASONING, _Kind.CONTENT):
                self._emit(self._kind, text, out)
            return
        self._header.add(text)
        if not self._structured:
            self._maybe_plain(out)

    def _maybe_plain(self, out: Parsed) -> None:
        """Output that starts with text no header can begin with is a body without channel."""
        head = self._header.role.lstrip()
        if not head or head.startswith(_HEADER_OPENER) or _HEADER_OPENER.startswith(head):
            return
        text, self._header = self._header.role, _Header()
        self._open_body()
        self._emit(_Kind.CONTENT, text, out)

    def _marker(self, marker: str, out: Parsed) -> None:
        self._structured = True
        if self._in_body:
            if marker in _MESSAGE_ENDS:
                self._close(out)
            elif marker in (START, CHANNEL):
                # A new header without an end marker: the message ended there.
                self._close(out)
                self._header.section = "channel" if marker == CHANNEL else "role"
            # <|message|> / <|constrain|> inside a body: stray markers, dropped.
            return
        if marker == START or marker in _MESSAGE_ENDS:
            self._header = _Header()  # a new message (or an empty one ended): its header restarts
        elif marker == CHANNEL:
            self._header.section = "channel"
        elif marker == CONSTRAIN:
            self._header.section = "constrain"
        else:  # <|message|>
            self._open_body()

    # -- messages -------------------------------------------------------------------------------

    def _open_body(self) -> None:
        self._recipient = self._header.recipient()
        channel = self._header.channel_name()
        self._header = _Header()
        self._in_body = True
        self._message_emitted = False
        self._call_body = ""
        if self._recipient and self._recipient.startswith(_FUNCTIONS):
            self._kind = _Kind.CALL if self._tools is not None else _Kind.DROP
            if self._tools is None:
                log.warning("gptoss: a call to %s with no tools offered is dropped", self._recipient)
        elif channel == "analysis":
            self._kind = _Kind.REASONING
        elif channel == "final" or (channel in ("commentary", None) and self._recipient is None):
            self._kind = _Kind.CONTENT
        else:
            self._kind = _Kind.DROP

    def _close(self, out: Parsed) -> None:
        if self._kind == _Kind.CALL:
            assert self._recipient is not None
            name = self._recipient[len(_FUNCTIONS) :]
            try:
                out.tool_calls.append(_decode_call(name, self._call_body))
            except PayloadError as exc:
                log.warning("gptoss tool call not parsed, returned as content: %s", exc)
                self._emit(_Kind.CONTENT, self._call_body, out)
        self._in_body = False
        self._kind = _Kind.DROP
        self._recipient = None
        self._call_body = ""
        self._header = _Header()

    def _emit(self, kind: _Kind, text: str, out: Parsed) -> None:
        if not text:
            return
        if not self._message_emitted:
            self._message_emitted = True
            if kind in self._emitted:
                text = "\n" + text  # messages of one kind are joined with a newline
            self._emitted.add(kind)
        if kind == _Kind.REASONING:
            out.reasoning += text
        else:
            out.content += text


def _decode_call(name: str, body: str) -> ToolCall:
    if not name:
        raise PayloadError("the recipient names no function")
    try:
        arguments = json.loads(body, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError) as exc:  # too deep to decode: the model's text, not a crash
        raise PayloadError(f"{name}: arguments are not JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise PayloadError(f"{name}: arguments must be a JSON object")
    return ToolCall(name=name, arguments=arguments)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Python's json reads NaN and Infinity; clients cannot


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is out of range")
    return number


def parser(context: ParserContext) -> OutputParser:
    return HarmonyParser(context)


FORMAT = ToolCallFormat(
    name="gptoss",
    starts=(),
    end=None,
    decode=lambda payload, tools: [],  # never called: the stream parser reads the whole output
    special_tokens=MARKERS,
    stream_parser=parser,
)

REASONING_FORMAT = ReasoningFormat(
    name="gptoss",
    # Only used to tell whether the prompt itself opened an analysis body.
    start=f"{CHANNEL}analysis{MESSAGE}",
    end=END,
    special_tokens=MARKERS,
    stream_parser=parser,
)
