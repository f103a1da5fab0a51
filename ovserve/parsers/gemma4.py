"""Gemma 4: tool calls ``<|tool_call>call:NAME{key:value,...}<tool_call|>`` and a thinking channel
``<|channel>thought\\n...<channel|>``.

Tool calls. Each call is its own block; parallel calls follow each other without separator
(``<|tool_call>call:a{...}<tool_call|><|tool_call>call:b{...}<tool_call|>``); a block holding
several calls separated by ``,`` is accepted too (OVMS's parser splits them). The arguments are
not JSON but the template's ``format_argument`` notation:

- strings between ``<|"|>`` delimiters, verbatim (no escaping: ``"`` ``{`` ``,`` are plain text);
- ``true`` / ``false``, numbers bare, ``null`` (also ``none`` / ``nil``, as vLLM reads them);
- objects ``{key:value,...}`` with bare keys (or ``<|"|>``-quoted keys), arrays ``[value,...]``;
- whitespace between tokens is tolerated (llama.cpp's grammar allows it).

A bare word that is none of these becomes a string, as vLLM's ``_parse_gemma4_value`` does. A block
that does not parse (no ``call:NAME{``, unbalanced brackets, an unterminated string, text after
the call) is returned as content with a warning, and so is a block cut before ``<tool_call|>``
(``<tool_call|>`` is no stop token; the model stops at ``<|tool_response>`` after it).

Thinking. ``<|channel>`` opens the thought channel, whose first line names it (``thought``, a
label that is not reasoning), ``<channel|>`` closes it; the text after it is the answer. With
thinking off the template prefills an empty ``<|channel>thought\\n<channel|>`` in the prompt, so
the output has no channel. Thought blocks are taken wherever they appear (llama.cpp: "Gemma 4 may
emit an extra ``<|channel>thought\\n<channel|>`` at the end of the content. It may also emit a
single trailing ``<channel|>`` token"): a stray ``<channel|>`` is dropped, never shown, and an
unclosed channel at the end of output is reasoning. Newlines right after ``<channel|>`` belong to
neither part. Several non-empty thoughts are joined with a newline.

Sources: the chat template, llama.cpp ``models/templates/google-gemma-4-31B-it-interleaved.jinja``
(ggml-org/llama.cpp, a copy of Google's: ``format_argument``, ``'<|tool_call>call:' + name + '{'``,
``'}<tool_call|>'``, ``'<|channel>thought\\n' ... '<channel|>'``, the prefilled empty thought);
the parsers, vLLM ``vllm/tool_parsers/gemma4_tool_parser.py`` and
``vllm/reasoning/gemma4_reasoning_parser.py`` (strings delimited by ``<|"|>``, the ``thought\\n``
label stripped), llama.cpp ``common/parsers/gemma4.cpp`` (the value grammar; thought blocks
between content) and OVMS ``src/llm/io_processing/gemma4/`` (openvinotoolkit/model_server; tool
call tokens 48/49, several calls in one block, the channel header line). Google's model repository
itself (google/gemma-4-*) is not in the reference corpus; the template above is llama.cpp's copy.

``call_regex`` stays None: ``<|tool_call>``, ``<tool_call|>`` and ``<|"|>`` are special tokens
(ids 48, 49 and 52 in OVMS's and vLLM's parsers) that an engine grammar over text cannot write,
and the arguments are not JSON, so a JSON schema's regex could not describe them anyway.
"""

from __future__ import annotations

import json
import math
import re
from enum import Enum

from ovserve.json_types import JsonObject, JsonValue
from ovserve.parsers.base import (
    OutputParser,
    Parsed,
    ParserContext,
    ReasoningFormat,
    ToolCallFormat,
    partial_marker,
    split_at_marker,
)
from ovserve.parsers.calls import PayloadError, ToolCall
from ovserve.parsers.schemas import ToolSchemas

TOOL_CALL_START = "<|tool_call>"
TOOL_CALL_END = "<tool_call|>"
STRING = '<|"|>'
CHANNEL_START = "<|channel>"
CHANNEL_END = "<channel|>"
_MARKERS = (CHANNEL_START, CHANNEL_END)
THOUGHT_LABEL = "thought"

_CALL_PREFIX = "call:"
_NAME = re.compile(r"[\w\-.]+")  # vLLM's tool_call_regex: letters, digits, _, -, .
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_NULLS = ("null", "none", "nil")


# -- tool calls ---------------------------------------------------------------------------------


class _Reader:
    """A cursor over a call block's text for the recursive-descent value parser."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.position = 0

    def skip_space(self) -> None:
        while self.position < len(self.text) and self.text[self.position].isspace():
            self.position += 1

    def at(self, token: str) -> bool:
        return self.text.startswith(token, self.position)

    def at_end(self) -> bool:
        return self.position >= len(self.text)

    def take(self, token: str) -> None:
        if not self.at(token):
            found = self.text[self.position : self.position + 20] or "the end"
            raise PayloadError(f"expected {token!r} at {found!r}")
        self.position += len(token)

    def string(self) -> str:
        self.take(STRING)
        end = self.text.find(STRING, self.position)
        if end == -1:
            raise PayloadError("unterminated string")
        value = self.text[self.position : end]
        self.position = end + len(STRING)
        return value

    def value(self) -> JsonValue:
        self.skip_space()
        if self.at(STRING):
            return self.string()
        if self.at("{"):
            return self.object()
        if self.at("["):
            return self.array()
        start = self.position
        while not self.at_end() and self.text[self.position] not in ",}]":
            self.position += 1
        return _bare(self.text[start : self.position].strip())

    def object(self) -> JsonObject:
        self.take("{")
        result: JsonObject = {}
        self.skip_space()
        while not self.at("}"):
            key = self.key()
            result[key] = self.value()
            if not self._separator("}"):
                break
        self.take("}")
        return result

    def key(self) -> str:
        self.skip_space()
        if self.at(STRING):
            key = self.string()
            self.skip_space()
        else:
            start = self.position
            while not self.at_end() and self.text[self.position] not in ":,{}[]":
                self.position += 1
            key = self.text[start : self.position].strip()
        if not key:
            raise PayloadError("an argument without a name")
        self.take(":")
        return key

    def array(self) -> list[JsonValue]:
        self.take("[")
        items: list[JsonValue] = []
        self.skip_space()
        while not self.at("]"):
            items.append(self.value())
            if not self._separator("]"):
                break
        self.take("]")
        return items

    def _separator(self, closer: str) -> bool:
        """After a member: a comma means another may follow (a trailing one is tolerated)."""
        self.skip_space()
        if self.at(","):
            self.position += 1
            self.skip_space()
            return True
        if not self.at(closer):
            raise PayloadError(f"expected ',' or {closer!r}")
        return False


def _bare(raw: str) -> JsonValue:
    if not raw:
        raise PayloadError("an argument without a value")
    if raw in ("true", "false"):
        return raw == "true"
    if raw.lower() in _NULLS:
        return None
    if _JSON_NUMBER.fullmatch(raw):
        number = json.loads(raw)
        # 1e400 is inf, which JSON cannot write: such a number stays the model's text.
        return number if not isinstance(number, float) or math.isfinite(number) else raw
    return raw


def decode(payload: str, tools: ToolSchemas) -> list[ToolCall]:
    try:
        return _calls(_Reader(payload))
    except RecursionError:
        raise PayloadError("arguments nested too deeply") from None


def _calls(reader: _Reader) -> list[ToolCall]:
    payload = reader.text
    calls: list[ToolCall] = []
    while True:
        reader.skip_space()
        reader.take(_CALL_PREFIX)
        brace = payload.find("{", reader.position)
        name = payload[reader.position : brace].strip() if brace != -1 else ""
        if not _NAME.fullmatch(name):
            raise PayloadError(f"expected call:NAME{{...}}, got {payload[:40]!r}")
        reader.position = brace
        arguments = reader.object()
        calls.append(ToolCall(name=name, arguments=arguments))
        reader.skip_space()
        if reader.at_end():
            return calls
        reader.take(",")  # OVMS: several calls in one block


FORMAT = ToolCallFormat(
    name="gemma4",
    starts=(TOOL_CALL_START,),
    end=TOOL_CALL_END,
    decode=decode,
    special_tokens=(TOOL_CALL_START, TOOL_CALL_END, STRING),
)


# -- thinking -----------------------------------------------------------------------------------


class _State(Enum):
    CONTENT = "content"  # answer text
    LABEL = "label"  # right after <|channel>: its ``thought`` label may be arriving
    THOUGHT_START = "thought_start"  # after the label: the whitespace ending its line is dropped
    THOUGHT = "thought"  # reasoning, until <channel|>
    AFTER = "after"  # right after <channel|>: newlines belong to neither part


class ThoughtSplitter:
    """Gemma 4's thought channels -> reasoning, the rest -> content (module docstring)."""

    def __init__(self, context: ParserContext) -> None:
        # The prompt may end inside the channel, after its label (``<|channel>thought``).
        self._state = _State.THOUGHT_START if context.starts_in_reasoning else _State.CONTENT
        self._pending = ""
        self._label = ""
        self._thought_has_text = False
        self._reasoned = False  # a thought with text came before: the next one gets a newline

    def push(self, text: str) -> Parsed:
        out = Parsed()
        self._pending += text
        while self._pending:
            if self._state == _State.LABEL:
                if not self._read_label():
                    break
                continue
            if self._state == _State.THOUGHT_START:
                self._pending = self._pending.lstrip()
                if not self._pending:
                    break
                self._state = _State.THOUGHT
            if self._state == _State.AFTER:
                self._pending = self._pending.lstrip("\n")
                if not self._pending:
                    break
                self._state = _State.CONTENT
            text, marker, self._pending = split_at_marker(self._pending, _MARKERS)
            self._emit(text, out)
            if marker is None:
                break
            self._on_marker(marker)
        return out

    def finish(self) -> Parsed:
        out = Parsed()
        rest, self._pending = self._pending, ""
        if self._state == _State.LABEL:
            # The output ended inside the channel's first words.
            text = self._label + rest
            labelled, body = _after_label(text, closed=True) or (False, text)
            self._state = _State.THOUGHT
            self._emit(body.lstrip() if labelled else body, out)
        elif self._state == _State.THOUGHT_START:
            self._state = _State.THOUGHT
            self._emit(rest.lstrip(), out)
        elif self._state == _State.AFTER:
            self._state = _State.CONTENT
            self._emit(rest.lstrip("\n"), out)
        else:
            self._emit(rest, out)  # a marker's beginning that never completed is text
        return out

    def _on_marker(self, marker: str) -> None:
        if marker == CHANNEL_START:
            if self._state == _State.CONTENT:
                self._state, self._label = _State.LABEL, ""
            # <|channel> inside a thought: a stray marker, dropped.
        elif self._state == _State.THOUGHT:
            self._state = _State.AFTER
            self._thought_has_text = False
        # <channel|> outside a thought: a stray marker, dropped.

    def _read_label(self) -> bool:
        """After ``<|channel>``: drop the ``thought`` label; False while it may still be arriving."""
        text = self._label + self._pending
        close = text.find(CHANNEL_END)
        head = text if close == -1 else text[:close]
        if close == -1:
            # A marker's beginning at the end is no label text yet.
            head = head[: len(head) - partial_marker(head, _MARKERS)]
        split = _after_label(head, closed=close != -1)
        if split is None:
            self._label, self._pending = text, ""
            return False
        labelled, body = split
        self._label, self._pending = "", body + text[len(head) :]
        # After the label, the whitespace that ends its line is no reasoning.
        self._state = _State.THOUGHT_START if labelled else _State.THOUGHT
        return True

    def _emit(self, text: str, out: Parsed) -> None:
        if not text:
            return
        if self._state in (_State.THOUGHT, _State.THOUGHT_START):
            if not self._thought_has_text:
                self._thought_has_text = True
                if self._reasoned:
                    text = "\n" + text
                self._reasoned = True
            out.reasoning += text
        else:
            out.content += text


def _after_label(head: str, *, closed: bool) -> tuple[bool, str] | None:
    """(a ``thought`` label was there, the channel's text after it) for the start of a channel,
    or None while undecided. ``closed``: nothing more arrives (``<channel|>`` or the end)."""
    stripped = head.lstrip()
    if stripped.startswith(THOUGHT_LABEL):
        rest = stripped[len(THOUGHT_LABEL) :]
        if rest[:1].isspace() or (closed and not rest):
            return True, rest
        if not rest:
            return None  # "thought": the label, or the start of a longer word
        return False, head
    if THOUGHT_LABEL.startswith(stripped):
        # An empty channel (``<|channel><channel|>``), or a label still arriving.
        return (True, "") if closed else None
    return False, head


def thought_splitter(context: ParserContext) -> OutputParser:
    return ThoughtSplitter(context)


REASONING_FORMAT = ReasoningFormat(
    name="gemma4",
    # Used to tell whether the prompt itself opened the channel (chat.py: starts_in_reasoning).
    start=f"{CHANNEL_START}{THOUGHT_LABEL}",
    end=CHANNEL_END,
    special_tokens=_MARKERS,
    stream_parser=thought_splitter,
)
