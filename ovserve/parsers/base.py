"""Streaming extraction of tool calls and reasoning from model text.

A tool-call format is data (:class:`ToolCallFormat`: where calls start, where they end, how to
decode the payload); one state machine (:class:`ToolCallExtractor`) runs every format, so each
parser module only says what its model writes. Text arrives in arbitrary pieces (stream deltas);
the extractor holds back text that could be the start of a marker, never emits a marker as
content, and falls back to plain content when a payload does not decode.

A format that the marker machine cannot describe (gpt-oss's harmony channels carry reasoning,
content and calls in one syntax) gives a ``stream_parser`` instead: a factory of
:class:`OutputParser` objects that turn the whole output into :class:`Parsed` pieces.

Contract of every parser, unary or streamed: the text is fed in arbitrary pieces and the
concatenation of what comes out is the same whatever the pieces; a call is emitted whole, once
(its arguments a JSON object string); markers never reach ``content``; output that is not a valid
call of the format comes back as ``content`` (a malformed call is the model's text, not an error).

``special_tokens`` of a format: its markers that tokenizers declare special (``[TOOL_CALLS]``,
``<|channel|>``...). Decoding normally drops special tokens, so when a model's tokenizer has one of
them the request is decoded with special tokens kept and every *other* special token is removed
from the text before the parsers see it (``ovserve.core.chat``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import secrets
import string
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)

# Tool name -> its ``parameters`` JSON schema (``{}`` when the tool declared none), for formats
# whose argument values are text typed by the schema (Qwen3-Coder's XML, GLM's arg_value).
ToolSchemas = Mapping[str, Any]
NO_TOOLS: ToolSchemas = {}
# A JSON schema -> the regex of its compact JSON (``ovserve.core.guided.schema_regex``).
SchemaRegex = Callable[[Any], str]
# (tool name, parameters schema, schema_regex) -> the regex of one whole call in a format,
# markers included: what a grammar forces for ``tool_choice`` required / named.
CallRegex = Callable[[str, Any, SchemaRegex], str]


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # a JSON object, as OpenAI's function.arguments
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")


class PayloadError(ValueError):
    """The text between the markers is not a tool call of this format."""


def call_from_object(item: Any, *, arguments_keys: tuple[str, ...] = ("arguments", "parameters")) -> ToolCall:
    """``{"name": ..., "arguments": {...}}`` (arguments may also be a JSON string) -> ToolCall."""
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        raise PayloadError("a tool call needs a 'name'")
    arguments: Any = {}
    for key in arguments_keys:
        if key in item:
            arguments = item[key]
            break
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            raise PayloadError(f"arguments are not JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise PayloadError("arguments must be a JSON object")
    return ToolCall(name=item["name"], arguments=json.dumps(arguments, ensure_ascii=False))


def decode_json(payload: str) -> Any:
    try:
        return json.loads(payload)
    except ValueError as exc:
        raise PayloadError(f"not JSON: {exc}") from exc


def nine_alphanumerics() -> str:
    """A tool-call id as Mistral's chat templates demand it (and vLLM and OVMS generate it)."""
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))


def regex_literal(text: str) -> str:
    """``text`` as a regex matching itself; a newline is written ``\\n`` (the engine's regex dialect)."""
    return re.escape(text).replace("\\\n", "\\n")


def json_object_call(begin: str, end: str, *, arguments_key: str = "arguments") -> CallRegex:
    """The :data:`CallRegex` of formats that write one call as ``begin{"name": ..., "arguments": {...}}end``."""

    def call_regex(name: str, parameters: Any, schema_regex: SchemaRegex) -> str:
        schema = {
            "type": "object",
            "properties": {"name": {"const": name}, arguments_key: parameters},
            "required": ["name", arguments_key],
            "additionalProperties": False,
        }
        return f"{regex_literal(begin)}({schema_regex(schema)}){regex_literal(end)}"

    return call_regex


@dataclass
class Parsed:
    """What a piece of model output turned into: reasoning, answer text, whole tool calls."""

    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.tool_calls)

    def extend(self, other: Parsed) -> Parsed:
        self.reasoning += other.reasoning
        self.content += other.content
        self.tool_calls += other.tool_calls
        return self


class OutputParser(Protocol):
    """A whole-output parser (reasoning, content and calls at once); see the module docstring."""

    def push(self, text: str) -> Parsed: ...

    def finish(self) -> Parsed: ...


@dataclass(frozen=True)
class ParserContext:
    """What a stream parser is built with. ``tools``: None when tool calls are not parsed for
    this request (no tools offered); ``starts_in_reasoning``: the prompt opened the reasoning."""

    tools: ToolSchemas | None = None
    starts_in_reasoning: bool = False


@dataclass(frozen=True)
class ToolCallFormat:
    """How one model family writes tool calls.

    ``starts``: markers that open a call block. ``end``: the marker that closes it, or None when
    the block runs to the end of the output. ``start_of_output_only``: markers that only count
    as the very first non-space text (Llama 3 writes bare JSON). ``decode`` turns a block's
    payload into calls (given the offered tools' schemas) and raises :class:`PayloadError` when
    it is not a call.
    """

    name: str
    starts: tuple[str, ...]
    end: str | None
    decode: Callable[[str, ToolSchemas], list[ToolCall]]
    start_of_output_only: tuple[str, ...] = ()
    # Keep the start marker in the payload (Llama 3's "{" is part of the JSON).
    marker_in_payload: tuple[str, ...] = ()
    # The text before and after one ``{"name", "arguments"}`` call, for formats whose calls a
    # grammar can guide once the model opens a call (enable_tool_guided_generation).
    json_call_wrap: tuple[str, str] | None = None
    # One whole call as a regex, for formats whose calls a grammar can force (tool_choice
    # required / named); None: it cannot.
    call_regex: CallRegex | None = None
    # Markers of this format that tokenizers may declare special tokens (module docstring).
    special_tokens: tuple[str, ...] = ()
    # Formats the marker machine cannot describe: a whole-output parser (module docstring).
    stream_parser: Callable[[ParserContext], OutputParser] | None = None
    # The ids this family's chat template accepts back in the next turn, when it is picky
    # (Mistral's templates refuse any tool-call id that is not 9 alphanumerics); None: call_<hex>.
    call_id: Callable[[], str] | None = None
    # The payload is JSON: an end marker inside one of its strings does not end the block.
    json_payload: bool = False
    # (start, end) pairs for start markers whose block does not close with ``end`` (None: it runs
    # to the end of the output): a format with several spellings of its block (Kimi's singular
    # and plural sections, LFM2's tagged list next to a bare pythonic list).
    block_ends: tuple[tuple[str, str | None], ...] = ()

    def end_of(self, start: str) -> str | None:
        """The marker that closes a block opened by ``start``."""
        for marker, end in self.block_ends:
            if marker == start:
                return end
        return self.end


@dataclass
class Extracted:
    """What a piece of model text turned into."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


class ToolCallExtractor:
    def __init__(self, fmt: ToolCallFormat, tools: ToolSchemas = NO_TOOLS) -> None:
        self._fmt = fmt
        self._tools = tools
        self._pending = ""  # content that may be the beginning of a start marker
        self._block: str | None = None  # inside a call block: its text so far (marker included)
        self._marker = ""
        self._end: str | None = None  # what closes the open block (fmt.end_of its marker)
        self._seen_text = False  # start_of_output_only markers are over once text was emitted

    def push(self, text: str) -> Extracted:
        out = Extracted()
        self._pending += text
        while self._pending:
            if self._block is not None:
                if not self._consume_block(out):
                    break
                continue
            if not self._consume_content(out):
                break
        return out

    def finish(self) -> Extracted:
        """End of output: close an open block (or give it back as content)."""
        out = Extracted()
        if self._block is not None:
            block, self._block = self._block + self._pending, None
            self._pending = ""
            if self._end is None:
                self._decode_into(block, out)
            else:
                out.content += block  # unterminated: not a call after all
        out.content += self._pending
        self._pending = ""
        return out

    # -- states ---------------------------------------------------------------------------------

    def _markers(self) -> tuple[str, ...]:
        if self._seen_text:
            return self._fmt.starts
        return self._fmt.starts + self._fmt.start_of_output_only

    def _consume_content(self, out: Extracted) -> bool:
        text = self._pending
        best: tuple[int, str] | None = None
        for marker in self._markers():
            if marker in self._fmt.start_of_output_only:
                stripped = text.lstrip()
                position = len(text) - len(stripped) if stripped.startswith(marker) else -1
            else:
                position = text.find(marker)
            if position != -1 and (best is None or position < best[0]):
                best = (position, marker)
        if best is not None:
            position, marker = best
            self._emit_content(out, text[:position])
            self._block, self._marker, self._end = marker, marker, self._fmt.end_of(marker)
            self._pending = text[position + len(marker) :]
            return True
        # No marker yet: keep back whatever could still become one.
        keep = self._holdback(text)
        self._emit_content(out, text[: len(text) - keep])
        self._pending = text[len(text) - keep :]
        return False

    def _holdback(self, text: str) -> int:
        keep = 0
        for marker in self._markers():
            if marker in self._fmt.start_of_output_only:
                if not text.strip() or marker.startswith(text.lstrip()):
                    keep = max(keep, len(text))
                continue
            for size in range(min(len(marker) - 1, len(text)), 0, -1):
                if marker.startswith(text[-size:]):
                    keep = max(keep, size)
                    break
        return keep

    def _emit_content(self, out: Extracted, text: str) -> None:
        if text:
            out.content += text
            if text.strip():
                self._seen_text = True

    def _consume_block(self, out: Extracted) -> bool:
        assert self._block is not None
        end = self._end
        if end is None:
            self._block += self._pending
            self._pending = ""
            return False
        position = self._pending.find(end)
        while position != -1 and self._fmt.json_payload and _inside_json_string(self._block + self._pending[:position]):
            # The end marker inside an argument string is text (a JSON string cannot hold the block's end).
            position = self._pending.find(end, position + 1)
        if position == -1:
            return False  # wait for the end marker (finish() handles a block that never closes)
        block = self._block + self._pending[: position + len(end)]
        self._pending = self._pending[position + len(end) :]
        self._block = None
        self._decode_into(block, out)
        return True

    def _decode_into(self, block: str, out: Extracted) -> None:
        payload = block[len(self._marker) :]
        if self._end is not None and payload.endswith(self._end):
            payload = payload[: -len(self._end)]
        if self._marker in self._fmt.marker_in_payload:
            payload = self._marker + payload
        try:
            calls = self._fmt.decode(payload.strip(), self._tools)
        except PayloadError as exc:
            # Malformed: the client sees what the model wrote; the log says why it is no call.
            log.warning("%s tool call not parsed, returned as content: %s", self._fmt.name, exc)
            self._emit_content(out, block)
            return
        if self._fmt.call_id is not None:
            calls = [dataclasses.replace(call, id=self._fmt.call_id()) for call in calls]
        out.tool_calls.extend(calls)
        self._seen_text = True


@dataclass(frozen=True)
class ReasoningFormat:
    """``start``...``end`` around the reasoning at the beginning of the output. ``stream_parser``:
    formats that need more (harmony channels) parse the whole output themselves."""

    name: str
    start: str
    end: str
    special_tokens: tuple[str, ...] = ()  # as ToolCallFormat.special_tokens
    stream_parser: Callable[[ParserContext], OutputParser] | None = None


@dataclass
class Split:
    reasoning: str = ""
    content: str = ""


class ReasoningSplitter:
    """Separates ``<think>...</think>`` from the answer; reasoning never leaks into content.

    ``in_reasoning``: the prompt already opened the block (templates that end with ``<think>``),
    so the output starts inside it.
    """

    def __init__(self, fmt: ReasoningFormat, *, in_reasoning: bool = False) -> None:
        self._fmt = fmt
        self._state = "reasoning" if in_reasoning else "start"
        self._pending = ""

    def push(self, text: str) -> Split:
        out = Split()
        self._pending += text
        while self._pending:
            if self._state == "start":
                stripped = self._pending.lstrip()
                if stripped.startswith(self._fmt.start):
                    self._pending = stripped[len(self._fmt.start) :]
                    self._state = "reasoning"
                elif self._fmt.start.startswith(stripped):
                    return out  # maybe the start tag, still arriving
                else:
                    self._state = "content"
            elif self._state == "reasoning":
                position = self._pending.find(self._fmt.end)
                if position != -1:
                    out.reasoning += self._pending[:position]
                    self._pending = self._pending[position + len(self._fmt.end) :]
                    self._state = "after_reasoning"
                    continue
                keep = _suffix_prefix(self._pending, self._fmt.end)
                out.reasoning += self._pending[: len(self._pending) - keep]
                self._pending = self._pending[len(self._pending) - keep :]
                return out
            elif self._state == "after_reasoning":
                # Templates put blank lines between </think> and the answer; they belong to neither.
                self._pending = self._pending.lstrip("\n")
                if self._pending:
                    self._state = "content"
            else:
                out.content += self._pending
                self._pending = ""
        return out

    def finish(self) -> Split:
        out = Split()
        if self._state == "reasoning":
            out.reasoning = self._pending  # the model never closed its thinking
        else:
            out.content = self._pending
        self._pending = ""
        return out


def _inside_json_string(text: str) -> bool:
    """Whether ``text`` (a block so far) ends inside a JSON string: an odd count of unescaped quotes."""
    inside = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = inside
        elif char == '"':
            inside = not inside
    return inside


def _suffix_prefix(text: str, marker: str) -> int:
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
